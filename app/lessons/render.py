"""The text an agent is told: facts about the user's ratings, and the user's words, small.

One text per project (its own lessons, then the global ones under "In every
project:") and one global text for every other folder (``hooks/lessonfiles.py``
picks). Each bullet states how the user rated answers and quotes what they said
about them, word for word::

    - The user rated answers bad 5 times (last on 2026-11-25) and commented: "be brief"

Why quoted and never turned into an order: the user explains a bad rating by what
they wanted as often as by what went wrong ("be brief"), so a verb put before their
words ("Avoid: be brief") said the opposite of what they meant, and a reworded or
added lesson ("Keep answers short") is already an instruction of the user's own.
The facts (rated bad, how often, their words) are all rltray knows; the agent reads
them. A comment is cut to ``WORDS_CHARS`` (marked "…"); words the user wrote as the
lesson (added or reworded, at most ``store.lessons.MAX_LESSON_CHARS``) are told whole,
so nothing the store accepted is silently dropped.

The set stays small: at most ``MAX_LESSONS`` bullets and ``lessonfiles.BUDGET_CHARS``
characters, pinned and added lessons first, then the ones rated most often in
that project, then the newest; a bullet that does not fit is left out whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone

from rltray.app.hooks import lessonfiles
from rltray.app.lessons.book import Lesson
from rltray.app.store.lessons import MAX_LESSON_CHARS
from rltray.app.words import preview

HEADER_PROJECT = "The user's own feedback on earlier answers in this project (from rltray):"
HEADER_GLOBAL = "The user's own feedback on earlier answers (from rltray):"
EVERY_PROJECT = "In every project:"
MAX_LESSONS = 10
WORDS_CHARS = 200  # one comment's words in a bullet (the user's own lesson words: whole)


def text(
    lessons: Iterable[Lesson], project: str | None, budget: int = lessonfiles.BUDGET_CHARS
) -> str | None:
    """What a session in ``project`` (its key; None: a folder of its own) is told, or None."""
    picked = chosen(lessons, project, budget)
    return _assemble(picked, project) if picked else None


def texts(lessons: Iterable[Lesson], budget: int = lessonfiles.BUDGET_CHARS) -> dict[str, str]:
    """``{project key or lessonfiles.GLOBAL: text}`` for ``lessonfiles.write_all``.

    A project gets its own file only when it has a lesson of its own to tell; any
    other folder reads the global one.
    """
    every = list(lessons)
    out: dict[str, str] = {}
    global_text = text(every, None, budget)
    if global_text:
        out[lessonfiles.GLOBAL] = global_text
    own = {p for lesson in every if lesson.told and lesson.scope == "project"
           for p in lesson.projects}  # fmt: skip
    for project in sorted(own):
        project_text = text(every, project, budget)
        if project_text:
            out[project] = project_text
    return out


def chosen(lessons: Iterable[Lesson], project: str | None, budget: int) -> list[Lesson]:
    """The lessons told in ``project``'s text, in order, within the count and the budget."""
    candidates = [
        lesson for lesson in lessons
        if lesson.told and (lesson.scope == "global" or _own(lesson, project))
    ]  # fmt: skip
    candidates.sort(key=lambda lesson: lesson.last_in(_view(lesson, project)), reverse=True)
    candidates.sort(key=lambda lesson: _rank(lesson, project))
    picked: list[Lesson] = []
    for lesson in candidates:
        if len(picked) == MAX_LESSONS:
            break
        if len(_assemble([*picked, lesson], project)) <= budget:
            picked.append(lesson)
    return picked


def bullet(lesson: Lesson, project: str | None = None) -> str:
    """One lesson as the agent reads it (counts in ``project``, or in all for a global one):
    the facts, then the user's words in quotes, never with a verb of rltray's before them."""
    if lesson.user_added:
        kind = {None: "", -1: "avoid", 1: "keep"}.get(lesson.polarity, "")
        filed = f' (filed under "{kind}")' if kind else ""
        return f'- The user\'s own note{filed}: "{_words(lesson, project)}"'
    view = _view(lesson, project)
    bad, good = lesson.counts(view)
    sides = [("bad", bad), ("good", good)]
    if (lesson.polarity or -1) > 0:  # the side the lesson stands for is said first
        sides.reverse()
    counts = " and ".join(f"{side} {_times(n)}" for side, n in sides if n)
    when = f"last on {_day(lesson.last_in(view))}"
    if lesson.resolved:
        when += f"; they count it as {'bad' if (lesson.polarity or 0) < 0 else 'good'}"
    if lesson.tag:
        facts = f'- The user tagged answers "{lesson.tag}" and rated them {counts} ({when})'
    else:
        facts = f"- The user rated answers {counts} ({when})"
    if lesson.edited:
        return f'{facts}; their own note on it: "{_words(lesson, project)}"'
    if lesson.tag:
        return facts
    return f'{facts} and commented: "{_words(lesson, project)}"'


def _assemble(picked: list[Lesson], project: str | None) -> str:
    own = [lesson for lesson in picked if project is not None and _own(lesson, project)]
    shared = [lesson for lesson in picked if lesson not in own]
    if project is None or not own:
        lines = [HEADER_GLOBAL if project is None else HEADER_PROJECT]
        lines += [bullet(lesson, project) for lesson in picked]
        return "\n".join(lines)
    lines = [HEADER_PROJECT, *(bullet(lesson, project) for lesson in own)]
    if shared:
        lines += [EVERY_PROJECT, *(bullet(lesson, project) for lesson in shared)]
    return "\n".join(lines)


def _own(lesson: Lesson, project: str | None) -> bool:
    return project is not None and lesson.scope == "project" and project in lesson.projects


def _view(lesson: Lesson, project: str | None) -> str | None:
    """Whose ratings a bullet counts: the project's for its own lessons, all for global ones."""
    return project if _own(lesson, project) else None


def _rank(lesson: Lesson, project: str | None) -> tuple[bool, bool, int]:
    bad, good = lesson.counts(_view(lesson, project))
    return (not lesson.pinned, not lesson.user_added, -max(bad, good))


def _words(lesson: Lesson, project: str | None) -> str:
    """The user's words as they wrote them, on one line: a comment cut to ``WORDS_CHARS``
    (in ``project``'s own comments for its own lesson: ``Lesson.words_in``), words the user
    wrote as the lesson whole (the store's cap)."""
    if lesson.user_added or lesson.edited:
        return preview(lesson.words, MAX_LESSON_CHARS)
    return preview(lesson.words_in(_view(lesson, project)), WORDS_CHARS)


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _day(iso: str) -> str:
    """The local date of a stored UTC time (the user's calendar, as they rated)."""
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return iso[:10]
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone().date().isoformat()
