"""Which platform message carried which turn's answer (OpenClaw's channels).

A reaction in Telegram, Slack or Discord names a message id, not a turn; the hook
records each delivered reply's id (``message`` spool records) and a reaction it could
not resolve itself is resolved here, after any restart of the gateway or the tray.

A message id is unique only within its chat (Telegram numbers each chat's messages from
1), so the chat is part of the key (m013). The hook names it inside the channel it hands
on, ``<channel>:<chat>`` (``hooks/events_openclaw._where``); a bare channel is a chat not
known, stored as chat '' (as is every row from before m013).
"""

from __future__ import annotations

from rltray.app.store.base import StoreBase, utc_iso


def split_channel(channel: str | None) -> tuple[str, str]:
    """(channel, chat) from the hook's ``<channel>[:<chat>]``; chat '' when not known."""
    name, _, chat = (channel or "").partition(":")
    return name, chat


class Messages(StoreBase):
    """The ``turn_messages`` table (m009; the chat since m013)."""

    def add_message(self, agent: str, session: str, turn: str, channel: str | None,
                    message_id: str) -> int | None:
        """Remember that ``message_id`` delivered ``turn``'s answer; the turn's row id, or None
        when that turn was never stored (an `/rl` answer, a deleted turn). A message id seen
        again in the same chat keeps its first turn."""
        name, chat = split_channel(channel)
        with self._write() as conn:
            row = conn.execute("SELECT id FROM turns WHERE source_key = ?",
                               (f"{agent}:{session}:{turn}",)).fetchone()
            if row is None:
                return None
            conn.execute(
                "INSERT INTO turn_messages (agent, channel, chat, message_id, turn_id, sent_at)"
                " VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                (agent, name, chat, message_id, int(row[0]), utc_iso()),
            )
            return int(row[0])

    def turn_by_message(
        self, agent: str, channel: str | None, message_id: str, session: str | None = None
    ) -> int | None:
        """The id of the turn whose answer ``message_id`` was, or None.

        In a known chat: that chat's message, else one whose chat was not known. With no
        chat: a message whose chat was not known, else the one message of that id in any
        direct chat; None when several chats have one (which is meant cannot be told).

        No chat is a reaction's lookup (OpenClaw's reaction line names none), and reactions
        count in direct chats only: a group's message (Telegram numbers group chats below
        zero) is never its answer, or anyone a group admits could rate by reacting.

        ``session``, with no chat: only that session's answers, and none at all when they
        went to more than one direct chat. Telegram numbers messages per chat, so
        the one answer of that number in another chat may be another person's while the
        reaction was on a message of the user's own chat that no answer went as (review 4).
        """
        name, chat = split_channel(channel)
        mine = " AND turn_id IN (SELECT id FROM turns WHERE agent = ? AND session = ?)"
        within = session is not None and not chat  # a button names its chat: exact
        rows = self._read(
            "SELECT chat, turn_id FROM turn_messages WHERE agent = ? AND channel = ?"
            " AND message_id = ?" + (mine if within else ""),
            (agent, name, message_id, *((agent, session) if within else ())),
        )
        if within:
            chats = self._read(
                "SELECT DISTINCT chat FROM turn_messages WHERE agent = ? AND channel = ?"
                " AND chat != '' AND chat NOT LIKE '-%'" + mine,
                (agent, name, agent, session),
            )
            if len(chats) > 1:
                return None
        by_chat = {str(c): int(t) for c, t in rows if chat or not str(c).startswith("-")}
        if chat in by_chat:
            return by_chat[chat]
        if "" in by_chat:
            return by_chat[""]
        if not chat and len(by_chat) == 1:
            return next(iter(by_chat.values()))
        return None

    def messages_of(self, turn_id: int) -> list[tuple[str, str]]:
        """(channel, message id) of every delivery of a turn's answer, oldest first."""
        rows = self._read("SELECT channel, message_id FROM turn_messages WHERE turn_id = ?"
                          " ORDER BY sent_at", (turn_id,))
        return [(str(c), str(m)) for c, m in rows]
