"""The ratings browser's and dashboard's reads: filtered pages of turns and daily counts.

Kept apart from store_turns (which writes turns and ratings) because these are
read-only views shaped by the web screens; the ``TurnFilter`` is the one place
that turns the browser's filter fields into SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rltray.app.store.base import StoreBase, StoreError
from rltray.app.store.turns import _TURN_SELECT, Turn, _turn


@dataclass(frozen=True)
class TurnFilter:
    """What the ratings browser narrows the turns to; empty fields do not filter.

    ``since`` / ``until`` are ISO-8601 UTC bounds on ``captured_at`` (the web
    layer turns the user's local dates into them); ``until`` is exclusive.
    ``before`` / ``after`` are a row's place in the newest-first order, its
    ``(captured_at, id)``: only turns older (or newer) than that row match. The
    browser pages with them, so rating turns out of a filtered list (``unrated``)
    while paging through it skips none, as an offset into the shrinking list did.
    """

    text: str = ""
    agent: str | None = None
    project: str | None = None
    rating: str | None = None  # "good" | "bad" | "unrated" | "rated"
    since: str | None = None
    until: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    turn: int | None = None  # one turn by id (a link from the Lessons page)
    before: tuple[str, int] | None = None  # (captured_at, id): strictly older turns
    after: tuple[str, int] | None = None  # (captured_at, id): strictly newer turns

    def where(self) -> tuple[str, list[Any]]:
        parts: list[str] = []
        params: list[Any] = []
        if self.text.strip():
            like = "%" + _like_escape(self.text.strip()) + "%"
            parts.append(
                "(t.prompt LIKE ? ESCAPE '\\' OR t.response LIKE ? ESCAPE '\\'"
                " OR t.cwd LIKE ? ESCAPE '\\' OR r.comment LIKE ? ESCAPE '\\')"
            )
            params += [like] * 4
        if self.turn is not None:
            parts.append("t.id = ?")
            params.append(self.turn)
        if self.agent:
            parts.append("t.agent = ?")
            params.append(self.agent)
        if self.project:
            parts.append("t.cwd = ?")
            params.append(self.project)
        if self.rating:
            sql = _RATING_WHERE.get(self.rating)
            if sql is None:
                raise StoreError(
                    f"Unknown rating filter {self.rating!r}; use one of {', '.join(_RATING_WHERE)}."
                )
            parts.append(sql)
        if self.since:
            parts.append("t.captured_at >= ?")
            params.append(self.since)
        if self.until:
            parts.append("t.captured_at < ?")
            params.append(self.until)
        if self.before is not None:
            parts.append("(t.captured_at, t.id) < (?, ?)")
            params += [self.before[0], int(self.before[1])]
        if self.after is not None:
            parts.append("(t.captured_at, t.id) > (?, ?)")
            params += [self.after[0], int(self.after[1])]
        names = _distinct_tags(self.tags)
        if names:  # one subquery, however many tags: an EXISTS each went past SQLite's depth
            marks = ",".join("?" * len(names))
            parts.append(
                "t.id IN (SELECT tt.turn_id FROM turn_tags tt JOIN tags g ON g.id = tt.tag_id"
                f" WHERE g.name IN ({marks}) GROUP BY tt.turn_id"
                " HAVING COUNT(DISTINCT tt.tag_id) = ?)"
            )
            params += [*names, len(names)]
        return (" WHERE " + " AND ".join(parts)) if parts else "", params


_RATING_WHERE = {
    "good": "r.value = 1",
    "bad": "r.value = -1",
    "unrated": "r.id IS NULL",
    "rated": "r.id IS NOT NULL",
}


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _distinct_tags(names: tuple[str, ...]) -> list[str]:
    """The tag names once each, as ``tags.name`` (COLLATE NOCASE: ASCII letters only) tells
    them apart; a name given twice must not ask a turn for two tags it cannot have."""
    seen: dict[str, str] = {}
    for name in names:
        seen.setdefault(name.translate(_ASCII_LOWER), name)
    return list(seen.values())


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class Browse(StoreBase):
    """Search, count and group turns and ratings for the web screens."""

    def search_turns(self, where: TurnFilter, limit: int = 50, offset: int = 0) -> list[Turn]:
        """The ratings browser's page of turns, newest captured first.

        With ``where.after`` the page is the ``limit`` turns just newer than that
        row (the nearest ones, not the newest of all), still shown newest first.
        """
        sql, params = where.where()
        order = "ASC" if where.after is not None and where.before is None else "DESC"
        rows = self._read(
            f"{_TURN_SELECT}{sql} ORDER BY t.captured_at {order}, t.id {order} LIMIT ? OFFSET ?",
            (*params, int(limit), int(offset)),
        )
        turns = [_turn(r) for r in rows]
        return turns[::-1] if order == "ASC" else turns

    def count_turns(self, where: TurnFilter) -> int:
        sql, params = where.where()
        rows = self._read(
            "SELECT COUNT(*) FROM turns t LEFT JOIN ratings r"
            f" ON r.turn_id = t.id AND r.withdrawn_at IS NULL{sql}",
            params,
        )
        return int(rows[0][0])

    def projects(self) -> list[str]:
        """Every project folder turns were captured in, for the browser's filter."""
        rows = self._read("SELECT DISTINCT cwd FROM turns WHERE cwd IS NOT NULL ORDER BY cwd")
        return [r[0] for r in rows]

    def agents(self) -> list[str]:
        return [r[0] for r in self._read("SELECT DISTINCT agent FROM turns ORDER BY agent")]

    def ratings_per_day(self, since: str | None = None) -> list[tuple[str, int, int]]:
        """(UTC day, good, bad) of the active ratings, oldest day first (the dashboard)."""
        rows = self._read(
            "SELECT substr(rated_at, 1, 10) AS day, SUM(value = 1), SUM(value = -1)"
            " FROM ratings WHERE withdrawn_at IS NULL AND rated_at >= ?"
            " GROUP BY day ORDER BY day",
            (since or "",),
        )
        return [(d, int(g), int(b)) for d, g, b in rows]
