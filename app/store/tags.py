"""Tags: the reasons a user gives a turn ("wrong", "verbose", "ignored instructions").

The list of tags is the user's to edit; a turn holds any number of them. Tags
explain ratings for the user's own browsing; training does not read them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from rltray.app.store.base import StoreBase, StoreError, in_chunks, utc_iso

MAX_TAG_CHARS = 40


def clean_tag(name: str) -> str:
    """A tag name as stored: trimmed, inner whitespace collapsed, not empty, not too long."""
    text = " ".join(str(name).split())
    if not text:
        raise StoreError("A tag needs a name.")
    if len(text) > MAX_TAG_CHARS:
        raise StoreError(f"A tag is at most {MAX_TAG_CHARS} characters; {text[:20]!r}… is longer.")
    return text


class Tags(StoreBase):
    """The editable tag list and which turns carry which tags."""

    def list_tags(self) -> list[dict[str, object]]:
        """Every tag with how many turns carry it, alphabetical."""
        rows = self._read(
            "SELECT g.name, COUNT(tt.turn_id) FROM tags g"
            " LEFT JOIN turn_tags tt ON tt.tag_id = g.id GROUP BY g.id ORDER BY g.name"
        )
        return [{"name": n, "turns": int(c)} for n, c in rows]

    def add_tag(self, name: str) -> str:
        """Create a tag (an existing one, in any letter case, is kept); returns its stored name."""
        text = clean_tag(name)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO tags (name, created_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                (text, utc_iso()),
            )
            (stored,) = conn.execute("SELECT name FROM tags WHERE name = ?", (text,)).fetchone()
        return str(stored)

    def remove_tag(self, name: str) -> bool:
        """Delete a tag from the list and from every turn; False when there was none."""
        with self._write() as conn:
            return conn.execute("DELETE FROM tags WHERE name = ?", (clean_tag(name),)).rowcount > 0

    def tags_of(self, turn_ids: Iterable[int]) -> dict[int, list[str]]:
        """Each turn's tags (alphabetical); turns without tags are absent."""
        ids = [int(i) for i in turn_ids]
        out: dict[int, list[str]] = {}
        for chunk, marks in in_chunks(ids):
            rows = self._read(
                "SELECT tt.turn_id, g.name FROM turn_tags tt JOIN tags g ON g.id = tt.tag_id"
                f" WHERE tt.turn_id IN ({marks}) ORDER BY g.name",
                chunk,
            )
            for turn_id, name in rows:
                out.setdefault(int(turn_id), []).append(str(name))
        return out

    def set_turn_tags(self, turn_id: int, names: Iterable[str]) -> list[str]:
        """Make a turn carry exactly these tags (new names join the list); returns them."""
        wanted = sorted({clean_tag(n) for n in names}, key=str.lower)
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM turns WHERE id = ?", (turn_id,)).fetchone() is None:
                raise StoreError(f"There is no turn {turn_id}.")
            conn.execute("DELETE FROM turn_tags WHERE turn_id = ?", (turn_id,))
            for name in wanted:
                self._attach(conn, [turn_id], name)
        return self.tags_of([turn_id]).get(turn_id, [])

    def tag_turns(self, turn_ids: Iterable[int], name: str, on: bool = True) -> int:
        """Add (or with ``on=False`` remove) one tag on many turns; returns the turns changed."""
        ids = [int(i) for i in turn_ids]
        text = clean_tag(name)
        with self._write() as conn:
            if on:
                return self._attach(conn, ids, text)
            row = conn.execute("SELECT id FROM tags WHERE name = ?", (text,)).fetchone()
            if row is None:
                return 0
            marks = ",".join("?" * len(ids)) or "NULL"
            return conn.execute(
                f"DELETE FROM turn_tags WHERE tag_id = ? AND turn_id IN ({marks})", (row[0], *ids)
            ).rowcount

    def _attach(self, conn: sqlite3.Connection, turn_ids: list[int], name: str) -> int:
        conn.execute(
            "INSERT INTO tags (name, created_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
            (name, utc_iso()),
        )
        (tag_id,) = conn.execute("SELECT id FROM tags WHERE name = ?", (name,)).fetchone()
        changed = 0
        for turn_id in turn_ids:
            changed += conn.execute(
                "INSERT OR IGNORE INTO turn_tags (turn_id, tag_id)"
                " SELECT id, ? FROM turns WHERE id = ?",
                (tag_id, turn_id),
            ).rowcount
        return changed
