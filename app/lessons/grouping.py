"""Ratings with a comment or a tag, grouped into what the user keeps saying.

Two passes, both in capture order (turn id, which re-rating a turn does not
change), so a group forms the same way every time and keeps its key as
ratings arrive:

1. Each comment joins the group holding the comment most like it (``wording.JOIN``
   or more, compared with every comment already there), else starts one keyed by
   its turn (``c42``). The group is the user's words; its tags come along.
2. A rating with tags and no comment joins, per tag, the group of the same folder
   whose comments carry that tag most often: a tag the user once explained is
   explained by those words. A tag nobody explained is a group of its own (``t3``,
   the tag's id).

Groups ignore good and bad: the same words rated both ways must show up as one
group with both (``book`` flags it), never as two lessons that quietly cancel.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rltray.app.hooks import lessonfiles
from rltray.app.lessons import wording

#: A comment is compared with at most this many distinct wordings of each group.
COMPARED = 24


@dataclass(frozen=True)
class Evidence:
    """One active rating behind a lesson (``store.lesson_evidence`` reads them)."""

    rating_id: int
    turn_id: int
    value: int  # +1 good, -1 bad
    score: int | None  # 1-5 when graded
    comment: str | None
    rated_at: str
    cwd: str | None  # the turn's folder: the project
    agent: str
    tags: tuple[tuple[int, str], ...] = ()  # (tag id, name)
    turn_key: str = ""  # a hash of the turn's source key: never reused (app/lessons/carry.py)

    @property
    def project(self) -> str | None:
        """The project's key (``lessonfiles.key``), so "/a/b" and "/a/b/" are one project."""
        return lessonfiles.key(self.cwd) if self.cwd else None

    @property
    def clear(self) -> bool:
        """Plainly good or bad (a click, or a 1 or 5), not a 2 or 4 that only leans."""
        return self.score is None or self.score in (1, 5)

    @classmethod
    def from_row(cls, row: dict[str, object]) -> Evidence:
        return cls(
            rating_id=int(row["rating_id"]),  # type: ignore[call-overload]
            turn_id=int(row["turn_id"]),  # type: ignore[call-overload]
            value=int(row["value"]),  # type: ignore[call-overload]
            score=row.get("score"),  # type: ignore[arg-type]
            comment=row.get("comment"),  # type: ignore[arg-type]
            rated_at=str(row["rated_at"]),
            cwd=row.get("cwd"),  # type: ignore[arg-type]
            agent=str(row["agent"]),
            tags=tuple(row.get("tags") or ()),  # type: ignore[arg-type]
            turn_key=str(row.get("turn_key") or ""),
        )


@dataclass
class Group:
    """Ratings that say one thing: words (``c<turn>``) or one unexplained tag (``t<tag id>``)."""

    key: str
    evidence: list[Evidence] = field(default_factory=list)
    tag: str | None = None  # the tag's name, for a group of an unexplained tag

    @property
    def comments(self) -> list[str]:
        return [e.comment for e in self.evidence if e.comment]

    def tag_count(self, tag_id: int, project: str | None) -> int:
        return sum(
            1
            for e in self.evidence
            if e.comment and e.project == project and any(t == tag_id for t, _ in e.tags)
        )


def group(evidence: Iterable[Evidence]) -> list[Group]:
    """The groups of ``evidence`` (see the top), in the order they first appeared."""
    items = sorted(evidence, key=lambda e: (e.turn_id, e.rating_id))
    groups = _Wordings()
    for item in items:
        if item.comment:
            groups.join(item)
    by_tag: dict[int, Group] = {}
    for item in items:
        if item.comment:
            continue
        joined: set[str] = set()
        for tag_id, name in item.tags:
            home = _explained(groups.groups, tag_id, item.project)
            if home is None:
                home = by_tag.get(tag_id)
                if home is None:
                    home = by_tag[tag_id] = Group(f"t{tag_id}", tag=name)
            if home.key not in joined:
                home.evidence.append(item)
                joined.add(home.key)
    everything = groups.groups + list(by_tag.values())
    return sorted(everything, key=lambda g: min(e.turn_id for e in g.evidence))


class _Wordings:
    """The groups of pass 1, with an index from each word to the groups using it.

    Two comments reach ``JOIN`` only if they share a word, so a new comment is
    compared with the groups that share one, and within each with its first
    ``COMPARED`` distinct wordings (the first stay the first, so an old rating's
    group never changes): thousands of comments group in well under a second,
    often enough to run on every change.
    """

    def __init__(self) -> None:
        self.groups: list[Group] = []
        self._members: list[list[frozenset[str]]] = []  # per group: its comments' words
        self._by_word: dict[str, set[int]] = {}
        self._wordless: dict[str, int] = {}  # comments of filler only, by their exact text

    def join(self, item: Evidence) -> None:
        assert item.comment
        mine = wording.words(item.comment)
        if not mine:
            flat = " ".join(item.comment.lower().split())
            index = self._wordless.get(flat)
            if index is None:
                index = self._wordless[flat] = self._start(item)
            else:
                self.groups[index].evidence.append(item)
            return
        best, best_score = None, 0.0
        dice = wording.dice
        for index in sorted(set().union(*(self._by_word.get(w, set()) for w in mine))):
            for member in self._members[index]:
                score = dice(mine, member)
                if score > best_score:
                    best, best_score = index, score
        if best is None or best_score < wording.JOIN:
            best = self._start(item)
        else:
            self.groups[best].evidence.append(item)
        members = self._members[best]
        if len(members) < COMPARED and mine not in members:
            members.append(mine)
        for word in mine:
            self._by_word.setdefault(word, set()).add(best)

    def _start(self, item: Evidence) -> int:
        self.groups.append(Group(f"c{item.turn_id}", [item]))
        self._members.append([])
        return len(self.groups) - 1


def _explained(groups: list[Group], tag_id: int, project: str | None) -> Group | None:
    """The group of this folder whose comments carry the tag most often (first on a tie)."""
    best, most = None, 0
    for candidate in groups:
        count = candidate.tag_count(tag_id, project)
        if count > most:
            best, most = candidate, count
    return best
