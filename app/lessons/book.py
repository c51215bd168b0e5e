"""Groups plus the user's decisions: every lesson with its counts, scope and what holds it back.

Pure: ``assess(groups, rows, now)`` gives each lesson

* its **words**: the user's edit, else the comment most like the others in its
  group (the group's centre, shortest on a tie), else the tag's name; and, for a
  group rated in two or more projects, each project's own centre (``words_in``), so
  a project's text quotes what the user said there, never another project's names;
* its **polarity**: the user's resolution, else the side with more ratings;
* its **scope**: the user's choice, else its own project (the turn's folder;
  ratings of turns with no known folder belong to no project and count as
  global); a lesson rated in two or more projects is *suggested* as global;
* why it is **not told** to the agent: deleted, muted, retired (no new rating
  for ``RETIRE_DAYS`` and not pinned) or contradicted. A contradiction is a group
  with clearly good and clearly bad ratings (each side at least ``MIXED_SHARE`` of
  it), or two lessons rated opposite ways in nearly the same words
  (``wording.SAME``); both stay listed for the user to resolve, none is merged.

Counts are never stored: they are the evidence's, per project or in all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from rltray.app.hooks import lessonfiles
from rltray.app.lessons import wording
from rltray.app.lessons.grouping import Evidence, Group
from rltray.app.store import LessonRow
from rltray.app.store.base import parse_iso

RETIRE_DAYS = 60
#: A group is contradictory when its smaller side holds at least this share of it.
MIXED_SHARE = 0.25
#: The words are picked among a group's newest comments only (the pick compares each pair).
CENTRE_FROM = 40


@dataclass(frozen=True)
class Lesson:
    key: str
    words: str  # what the agent is told (the user's words)
    polarity: int | None  # -1 avoid, +1 keep, None: a note the user added
    evidence: tuple[Evidence, ...]
    scope: str  # "project" | "global"
    projects: tuple[str, ...]  # the project keys it belongs to (lessonfiles.key)
    folders: tuple[str, ...]  # the same projects as folders, for people
    last: str  # newest rating behind it (an added lesson: when it was last changed)
    user_added: bool = False
    edited: bool = False
    tag: str | None = None  # a lesson of a tag nobody explained
    tags: tuple[str, ...] = ()
    suggested_global: bool = False
    muted: bool = False
    pinned: bool = False
    deleted: bool = False
    retired: bool = False
    contradiction: str | None = None  # why it is held back until the user resolves it
    resolved: bool = False  # the user set its polarity
    #: (project key, the centre of that project's own comments): a group rated in 2+ projects
    local_words: tuple[tuple[str, str], ...] = ()

    def words_in(self, project: str | None) -> str:
        """The words for ``project``'s text (None: every project's): the user's own words
        (edited, added) everywhere; else the centre of the comments made in that project,
        so a comment from another project (its names, its paths) is not told there."""
        if project is not None and not (self.edited or self.user_added):
            for key, words in self.local_words:
                if key == project:
                    return words
        return self.words

    @property
    def told(self) -> bool:
        """Whether it goes to the agent (within the budget)."""
        return not (self.deleted or self.muted or self.retired or self.contradiction)

    def counts(self, project: str | None = None) -> tuple[int, int]:
        """(bad, good) of its ratings, in one project (its key) or in all (None)."""
        mine = [e for e in self.evidence if project is None or e.project == project]
        return sum(e.value < 0 for e in mine), sum(e.value > 0 for e in mine)

    def last_in(self, project: str | None = None) -> str:
        dates = [e.rated_at for e in self.evidence if project is None or e.project == project]
        return max(dates) if dates else self.last

    def status(self) -> str:
        """One word for a listing: why it is held back, else how it is told."""
        for flag, word in ((self.deleted, "deleted"), (self.contradiction, "contradiction"),
                           (self.muted, "muted"), (self.retired, "retired")):  # fmt: skip
            if flag:
                return word
        return "pinned" if self.pinned else "told"


def assess(groups: Iterable[Group], rows: Iterable[LessonRow], now: datetime) -> list[Lesson]:
    """Every lesson, groups first (in the order they appeared), then the added ones."""
    decided = {r.key: r for r in rows}
    lessons = [_from_group(g, decided.get(g.key), now) for g in groups]
    lessons += [_added(r, now) for r in decided.values() if r.user_added]
    return _contradicting_pairs(lessons)


def _from_group(group: Group, row: LessonRow | None, now: datetime) -> Lesson:
    evidence = tuple(group.evidence)
    bad = sum(e.value < 0 for e in evidence)
    good = len(evidence) - bad
    polarity = row.polarity if row is not None and row.polarity else (-1 if bad > good else 1)
    contradiction = None
    if row is None or not row.polarity:
        contradiction = _mixed(evidence, bad, good)
    projects, folders = _projects(e.cwd for e in evidence)
    default_scope = "project" if projects else "global"
    scope = row.scope if row is not None and row.scope else default_scope
    last = max(e.rated_at for e in evidence)
    tags = sorted({name for e in evidence for _, name in e.tags}, key=str.lower)
    return Lesson(
        key=group.key,
        words=(row.text if row is not None and row.text else _centre(group)),
        polarity=polarity,
        evidence=evidence,
        scope=scope,
        projects=projects,
        folders=folders,
        last=last,
        edited=row is not None and bool(row.text),
        tag=group.tag,
        tags=tuple(tags),
        suggested_global=len(projects) >= 2 and (row is None or row.scope is None),
        muted=row is not None and row.muted,
        pinned=row is not None and row.pinned,
        deleted=row is not None and row.deleted_at is not None,
        retired=_retired(last, row is not None and row.pinned, now),
        contradiction=contradiction,
        resolved=row is not None and bool(row.polarity),
        local_words=_local_words(group) if len(projects) >= 2 else (),
    )


def _local_words(group: Group) -> tuple[tuple[str, str], ...]:
    """Each project's own centre among the group's comments (projects with a comment)."""
    by_project: dict[str, list[str]] = {}
    for e in group.evidence:
        if e.comment and e.project is not None:
            by_project.setdefault(e.project, []).append(e.comment)
    return tuple((key, centre(comments)) for key, comments in by_project.items())


def _added(row: LessonRow, now: datetime) -> Lesson:
    projects, folders = _projects([row.project])
    return Lesson(
        key=row.key,
        words=row.text or "",
        polarity=row.polarity or None,
        evidence=(),
        scope=row.scope or ("project" if projects else "global"),
        projects=projects,
        folders=folders,
        last=row.updated_at,
        user_added=True,
        muted=row.muted,
        pinned=row.pinned,
        deleted=row.deleted_at is not None,
        retired=_retired(row.updated_at, row.pinned, now),
    )


def _projects(cwds: Iterable[str | None]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    seen: dict[str, str] = {}
    for cwd in cwds:
        if cwd:
            seen.setdefault(lessonfiles.key(cwd), cwd)
    return tuple(seen), tuple(seen.values())


def _retired(last: str, pinned: bool, now: datetime) -> bool:
    try:
        when = parse_iso(last)
    except ValueError:
        return False
    return not pinned and now - when > timedelta(days=RETIRE_DAYS)


def _mixed(evidence: tuple[Evidence, ...], bad: int, good: int) -> str | None:
    """Why a group rated both ways cannot be told as one side (None: it can)."""
    if good == bad:
        return f"rated good and bad equally often ({good} each)"
    clear_good = any(e.clear and e.value > 0 for e in evidence)
    clear_bad = any(e.clear and e.value < 0 for e in evidence)
    if clear_good and clear_bad and min(good, bad) / (good + bad) >= MIXED_SHARE:
        return f"rated good {good} and bad {bad} times"
    return None


def _centre(group: Group) -> str:
    """The group's words: the centre of its comments, else its tag's name (or its key)."""
    comments = group.comments
    return centre(comments) if comments else group.tag or group.key


def centre(comments: list[str]) -> str:
    """The comment most like the others (shortest, then earliest on a tie), among the
    newest ``CENTRE_FROM`` (each pair is compared)."""
    newest = comments[-CENTRE_FROM:]
    scored = [
        (-sum(wording.similarity(c, o) for o in newest), len(c), i) for i, c in enumerate(newest)
    ]
    return newest[min(scored)[2]]


def _contradicting_pairs(lessons: list[Lesson]) -> list[Lesson]:
    """Flag lessons rated opposite ways in nearly the same words that meet in one file."""
    live = [
        i for i, lesson in enumerate(lessons)
        if lesson.polarity and not (lesson.deleted or lesson.muted or lesson.retired)
    ]  # fmt: skip
    reasons: dict[int, str] = {}
    for n, i in enumerate(live):
        for j in live[n + 1 :]:
            a, b = lessons[i], lessons[j]
            if a.polarity == b.polarity or not _meet(a, b):
                continue
            if wording.similarity(a.words, b.words) >= wording.SAME:
                reasons.setdefault(i, f"says the opposite of lesson {b.key} in nearly its words")
                reasons.setdefault(j, f"says the opposite of lesson {a.key} in nearly its words")
    return [
        replace(lesson, contradiction=lesson.contradiction or reasons[i])
        if i in reasons
        else lesson
        for i, lesson in enumerate(lessons)
    ]


def _meet(a: Lesson, b: Lesson) -> bool:
    """Whether two lessons can end up in one text (a global one meets every project)."""
    return a.scope == "global" or b.scope == "global" or bool(set(a.projects) & set(b.projects))
