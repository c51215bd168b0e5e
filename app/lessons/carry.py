"""The user's decisions about a lesson follow its group when the group's key moves.

A lesson drawn from comments is keyed by its first turn (``c42``, app/lessons/grouping.py).
When that rating is withdrawn, its comment cleared or its turn deleted, the group lives
on under its next turn's key, and the row holding what the user decided (muted, deleted,
pinned, edited words, scope) was left behind under the old one: a lesson the user had
deleted came back and was told to the agent again. Each decided row records the turns
behind its lesson (``members``: hashes of their source keys, which are never reused,
unlike turn ids); a row whose key no longer names a group moves to the group that holds
most of its turns and has no row of its own.

A row is also not taken by a group under its key that shares none of its turns: SQLite
gives a deleted newest turn's id to the next turn, whose new lesson is another one.

A group can also split in two: withdrawing the one rating whose comment bridged two
wordings leaves two groups, and the row follows the part that keeps its key (or most
of its turns). The other part, with no row of its own, was a lesson the user had
deleted, muted or reworded, and came back told under a new key. So a group with no
row whose turns were all behind a decided row (its recorded ``members`` before this
pass) gets a copy of that row's decisions (``copies``). A turn the user re-commented in
wholly other words also leaves that way and keeps the decision too: rltray cannot tell
a new wording from a bridge withdrawn, and of the two mistakes, telling the agent what
the user deleted or muted is the worse one (a new comment on a new turn starts a new
lesson as ever).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rltray.app.lessons.grouping import Group
    from rltray.app.store.lessons import LessonRow

#: (row's key, key it moves to, the turns behind it now)
Move = tuple[str, str, tuple[str, ...]]

#: (row's key once the moves are written, key of the group that takes a copy, its turns)
Copy = tuple[str, str, tuple[str, ...]]

#: Prefix of a row set aside: no group is keyed so, so it waits for its turns to come back.
PARKED = "was-"


def members(group: Group) -> tuple[str, ...]:
    """The turns behind a group, as the row records them."""
    return tuple(sorted({e.turn_key for e in group.evidence if e.turn_key}))


@dataclass(frozen=True)
class Plan:
    """What ``plan`` found to write: moves first, then copies (they name moved keys)."""

    moves: list[Move] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)


def plan(groups: Sequence[Group], rows: Iterable[LessonRow]) -> Plan:
    """The moves and copies that keep every decision with the turns it was made about.

    Moves in the order to apply: rows set aside first (their key names a group of other
    turns: ``PARKED`` + key, found again by their turns if those come back), then rows
    moving to their group's new key, then rows recording the turns behind them now.
    Then copies: a group left with no row whose turns were all behind one decided row
    takes that row's decisions (the newest such row's, when several held them).
    """
    now = {g.key: members(g) for g in groups}
    decided = {r.key: r for r in rows if not r.user_added}
    parked: list[Move] = []
    moved: list[Move] = []
    kept: list[Move] = []
    orphans = []
    claimed = set()
    final = {}  # row's key now -> its key once the moves are written
    for key, row in decided.items():
        turns = now.get(key)
        if turns is not None and (not row.members or set(row.members) & set(turns)):
            claimed.add(key)
            final[key] = key
            if tuple(row.members) != turns:
                kept.append((key, key, turns))
        elif row.members:
            orphans.append(row)
    for row in sorted(orphans, key=lambda r: r.updated_at, reverse=True):  # newest first
        best, most = None, 0
        for key, turns in now.items():
            shared = len(set(row.members) & set(turns))
            if key not in claimed and shared > most:
                best, most = key, shared
        if best is not None:
            claimed.add(best)
            final[row.key] = best
            moved.append((row.key, best, now[best]))
        elif row.key in now:
            final[row.key] = PARKED + row.key
            parked.append((row.key, PARKED + row.key, row.members))
    copies: list[Copy] = []
    sources = sorted((r for r in decided.values() if r.members),
                     key=lambda r: r.updated_at, reverse=True)  # fmt: skip
    for key, turns in now.items():
        if key in claimed or not turns:
            continue
        for row in sources:
            if set(turns) <= set(row.members):
                copies.append((final.get(row.key, row.key), key, turns))
                break
    return Plan(parked + moved + kept, copies)
