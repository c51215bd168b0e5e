"""Which platform message carried which turn's answer (OpenClaw's channels).

A reaction in Telegram, Slack or Discord names a message id, not a turn; the hook
records each delivered reply's id (``message`` spool records) and a reaction it could
not resolve itself is resolved here, after any restart of the gateway or the tray.
"""

from __future__ import annotations

from rltray.app.store.base import StoreBase, utc_iso


class Messages(StoreBase):
    """The ``turn_messages`` table (m009)."""

    def add_message(self, agent: str, session: str, turn: str, channel: str | None,
                    message_id: str) -> int | None:
        """Remember that ``message_id`` delivered ``turn``'s answer; the turn's row id, or None
        when that turn was never stored (an `/rl` answer, a deleted turn). A message id seen
        again keeps its first turn."""
        with self._write() as conn:
            row = conn.execute("SELECT id FROM turns WHERE source_key = ?",
                               (f"{agent}:{session}:{turn}",)).fetchone()
            if row is None:
                return None
            conn.execute(
                "INSERT INTO turn_messages (agent, channel, message_id, turn_id, sent_at)"
                " VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING",
                (agent, channel or "", message_id, int(row[0]), utc_iso()),
            )
            return int(row[0])

    def turn_by_message(self, agent: str, channel: str | None, message_id: str) -> int | None:
        """The id of the turn whose answer ``message_id`` was, or None."""
        rows = self._read(
            "SELECT turn_id FROM turn_messages WHERE agent = ? AND channel = ? AND message_id = ?",
            (agent, channel or "", message_id),
        )
        return int(rows[0][0]) if rows else None

    def messages_of(self, turn_id: int) -> list[tuple[str, str]]:
        """(channel, message id) of every delivery of a turn's answer, oldest first."""
        rows = self._read("SELECT channel, message_id FROM turn_messages WHERE turn_id = ?"
                          " ORDER BY sent_at", (turn_id,))
        return [(str(c), str(m)) for c, m in rows]
