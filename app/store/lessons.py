"""Lessons' rows: what the user decided about each lesson, and the ratings behind them.

The counts of a lesson drawn from ratings are never stored: ``lesson_evidence``
reads the active ratings that carry a comment or a tag each time, and
``app/lessons/`` groups them afresh. A ``lessons`` row only holds the user's own
decisions (edited words, mute, pin, delete, scope, how a contradiction was
resolved) under the group's key, or a lesson the user added in words.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rltray.app.hooks import lessonfiles
from rltray.app.store.base import StoreBase, StoreError, utc_iso
from rltray.app.store.turns import key_hash

#: The one cap, in the hook program's contract module (its `/rl lesson` checks it too); the
#: agent is told the whole text (app/lessons/render.py), so what is accepted is what is told.
MAX_LESSON_CHARS = lessonfiles.MAX_LESSON_CHARS
_COLS = (
    "key, user_added, text, project, polarity, scope, muted, pinned, deleted_at, created_at,"
    " updated_at, members"
)
#: The columns a user's decision may change (``set_lesson``).
CHANGEABLE = ("text", "polarity", "scope", "muted", "pinned", "deleted_at")


@dataclass(frozen=True)
class LessonRow:
    key: str
    user_added: bool
    text: str | None  # the user's words (added or edited); None: the group's own
    project: str | None  # a user-added lesson's folder (None: every project)
    polarity: int | None  # -1 avoid / +1 keep, set by the user; None: from the ratings
    scope: str | None  # "project" | "global" chosen by the user; None: the default
    muted: bool
    pinned: bool
    deleted_at: str | None
    created_at: str
    updated_at: str
    # the turns behind the lesson when last seen (source-key hashes; app/lessons/carry.py)
    members: tuple[str, ...] = ()


def clean_lesson(text: str) -> str:
    """A lesson's words as stored: one line, not empty, not longer than the cap."""
    flat = " ".join(str(text).split())
    if not flat:
        raise StoreError("A lesson needs some words.")
    if len(flat) > MAX_LESSON_CHARS:
        raise StoreError(
            f"A lesson is at most {MAX_LESSON_CHARS} characters; this one has {len(flat)}."
        )
    return flat


def _row(values: tuple[Any, ...]) -> LessonRow:
    return LessonRow(
        key=values[0],
        user_added=bool(values[1]),
        text=values[2],
        project=values[3],
        polarity=values[4],
        scope=values[5],
        muted=bool(values[6]),
        pinned=bool(values[7]),
        deleted_at=values[8],
        created_at=values[9],
        updated_at=values[10],
        members=_members(values[11]),
    )


def _members(text: Any) -> tuple[str, ...]:
    try:
        found = json.loads(text) if text else []
    except ValueError:
        return ()
    return tuple(str(m) for m in found) if isinstance(found, list) else ()


class Lessons(StoreBase):
    """The lessons table, the agents lessons go to, and the evidence for lessons."""

    def lesson_evidence(self) -> list[dict[str, Any]]:
        """Every active rating with a comment or a tag, with its turn's folder and agent.

        Ordered by turn id (capture order), which re-rating a turn does not change,
        so groups form the same way each time.
        """
        rows = self._read(
            "SELECT r.id, t.id, r.value, r.score, r.comment, r.rated_at, t.cwd, t.agent,"
            " t.source_key,"
            " (SELECT group_concat(g.id || ':' || g.name, char(10)) FROM turn_tags tt"
            "  JOIN tags g ON g.id = tt.tag_id WHERE tt.turn_id = t.id)"
            " FROM ratings r JOIN turns t ON t.id = r.turn_id"
            " WHERE r.withdrawn_at IS NULL AND (r.comment IS NOT NULL"
            "  OR EXISTS (SELECT 1 FROM turn_tags tt WHERE tt.turn_id = t.id))"
            " ORDER BY t.id"
        )
        out = []
        for rating_id, turn_id, value, score, comment, rated_at, cwd, agent, key, tags in rows:
            pairs = [line.split(":", 1) for line in (tags or "").split("\n") if line]
            out.append(
                {
                    "rating_id": int(rating_id),
                    "turn_id": int(turn_id),
                    "value": int(value),
                    "score": score,
                    "comment": comment,
                    "rated_at": rated_at,
                    "cwd": cwd,
                    "agent": agent,
                    "turn_key": key_hash(key)[:16],
                    "tags": sorted(((int(i), n) for i, n in pairs), key=lambda p: p[1].lower()),
                }
            )
        return out

    def lesson_rows(self) -> list[LessonRow]:
        return [_row(r) for r in self._read(f"SELECT {_COLS} FROM lessons ORDER BY id")]

    def lesson_row(self, key: str) -> LessonRow | None:
        rows = self._read(f"SELECT {_COLS} FROM lessons WHERE key = ?", (key,))
        return _row(rows[0]) if rows else None

    def add_lesson(self, text: str, project: str | None, polarity: int | None = None) -> str:
        """A lesson in the user's words for one folder (None: every project); its key.

        Added lessons start pinned: the user said it, so it does not retire for
        want of ratings (unpin it to let it retire like the others).
        """
        words = clean_lesson(text)
        now = utc_iso()
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO lessons (key, user_added, text, project, polarity, pinned,"
                " created_at, updated_at) VALUES (?, 1, ?, ?, ?, 1, ?, ?)",
                (f"new-{now}", words, project or None, polarity, now, now),
            )
            key = f"u{cur.lastrowid}"
            conn.execute("UPDATE lessons SET key = ? WHERE id = ?", (key, cur.lastrowid))
        return key

    def set_lesson(self, key: str, **changes: Any) -> LessonRow:
        """Record a user's decision about a lesson (a row is made for a group's key)."""
        unknown = sorted(set(changes) - set(CHANGEABLE))
        if unknown:
            raise StoreError(f"A lesson has no {unknown[0]!r} to change.")
        if "text" in changes and changes["text"] is not None:
            changes["text"] = clean_lesson(changes["text"])
        now = utc_iso()
        with self._write() as conn:
            conn.execute(
                "INSERT INTO lessons (key, created_at, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (key) DO NOTHING",
                (key, now, now),
            )
            for column, value in changes.items():  # names checked against CHANGEABLE above
                conn.execute(
                    f"UPDATE lessons SET {column} = ?, updated_at = ? WHERE key = ?",
                    (value, now, key),
                )
            row = conn.execute(f"SELECT {_COLS} FROM lessons WHERE key = ?", (key,)).fetchone()
        return _row(row)

    def lessons_lack_members(self) -> bool:
        """Whether a decided row has never recorded the turns behind it (a file from
        before migration m010, whose rows have not been seen by a refresh yet)."""
        return bool(self._read(
            "SELECT 1 FROM lessons WHERE user_added = 0 AND members IS NULL LIMIT 1"))

    def close_members(self) -> None:
        """Rows a full pass found no group for record no turns (an empty list): the
        pass is not run again for them at every start."""
        with self._write() as conn:
            conn.execute("UPDATE lessons SET members = '[]' WHERE user_added = 0"
                         " AND members IS NULL")

    def carry_lessons(
        self,
        moves: list[tuple[str, str, tuple[str, ...]]],
        copies: Sequence[tuple[str, str, tuple[str, ...]]] = (),
    ) -> int:
        """Apply ``(key, new key, members)`` moves, then ``(key, new key, members)`` copies,
        in one transaction; how many rows changed or were made.

        The same key records the turns behind a lesson; another key moves the user's
        decisions to the group the lesson lives on as (never over a row already there).
        A copy gives a group split off a decided lesson that lesson's decisions (a new
        row under the group's key, never over one already there: app/lessons/carry.py).
        """
        changed = 0
        with self._write() as conn:
            for key, new, members in moves:
                taken = new != key and conn.execute(
                    "SELECT 1 FROM lessons WHERE key = ?", (new,)).fetchone()  # fmt: skip
                if taken:
                    continue
                cur = conn.execute(
                    "UPDATE lessons SET key = ?, members = ? WHERE key = ? AND user_added = 0",
                    (new, json.dumps(list(members)), key),
                )
                changed += cur.rowcount
            for key, new, members in copies:
                cur = conn.execute(
                    "INSERT INTO lessons (key, user_added, text, project, polarity, scope,"
                    " muted, pinned, deleted_at, created_at, updated_at, members)"
                    " SELECT ?, 0, text, project, polarity, scope, muted, pinned, deleted_at,"
                    " created_at, updated_at, ? FROM lessons WHERE key = ? AND user_added = 0"
                    " ON CONFLICT (key) DO NOTHING",
                    (new, json.dumps(list(members)), key),
                )
                changed += cur.rowcount
        return changed

    def lesson_agents(self) -> dict[str, str]:
        """Agent -> since when its lessons are on (agents whose lessons are off are absent)."""
        return {str(a): str(s) for a, s in self._read("SELECT agent, on_since FROM lesson_agents")}

    def set_lesson_agent(self, agent: str, on: bool, at: str | None = None) -> None:
        """Note that lessons went on (kept from the first time) or off for ``agent``."""
        with self._write() as conn:
            if on:
                conn.execute(
                    "INSERT INTO lesson_agents (agent, on_since) VALUES (?, ?)"
                    " ON CONFLICT (agent) DO NOTHING",
                    (agent, utc_iso(at)),
                )
            else:
                conn.execute("DELETE FROM lesson_agents WHERE agent = ?", (agent,))

    def session_turn_after(self, agent: str, session: str, captured_at: str, turn_id: int) -> bool:
        """Whether the session captured a turn after this one (``(captured_at, id)`` order,
        as ``newest_turn``): then a note for its next prompt is not about this turn
        (``Service._note_for_next_prompt``). Works for a turn deleted a moment ago too."""
        return bool(self._read(
            "SELECT 1 FROM turns WHERE agent = ? AND session = ? AND id != ?"
            " AND (captured_at > ? OR (captured_at = ? AND id > ?)) LIMIT 1",
            (agent, session, turn_id, captured_at, captured_at, turn_id),
        ))

    def session_folder(self, agent: str, session: str) -> str | None:
        """The folder a session works in: the newest known folder of its turns."""
        rows = self._read(
            "SELECT cwd FROM turns WHERE agent = ? AND session = ? AND cwd IS NOT NULL"
            " AND cwd != '' ORDER BY captured_at DESC, id DESC LIMIT 1",
            (agent, session),
        )
        return str(rows[0][0]) if rows else None
