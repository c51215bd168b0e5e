"""The text an agent is told: facts about the user's preferences, in the user's words, small.

One text per project (its own lessons, then the global ones under "In every
project:") and one global text for every other folder (``hooks/lessonfiles.py``
picks). Each bullet states what the user said and how often they rated it::

    - Avoid: ran the whole suite when asked for one test (rated bad 5 times, last on 2026-11-25).

The set stays small: at most ``MAX_LESSONS`` bullets and ``lessonfiles.BUDGET_CHARS``
characters, pinned and added lessons first, then the ones rated most often in
that project, then the newest; a bullet that does not fit is left out whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone

from rltray.app.hooks import lessonfiles
from rltray.app.lessons.book import Lesson
from rltray.app.words import preview

HEADER_PROJECT = "The user's own feedback on earlier answers in this project (from rltray):"
HEADER_GLOBAL = "The user's own feedback on earlier answers (from rltray):"
EVERY_PROJECT = "In every project:"
MAX_LESSONS = 10
WORDS_CHARS = 200  # one lesson's words in a bullet


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
    """One lesson as the agent reads it (counts in ``project``, or in all for a global one)."""
    words = _words(lesson)
    if lesson.polarity is None:
        return f"- Note from the user: {words}."
    head = "Avoid" if lesson.polarity < 0 else "Keep"
    if lesson.user_added:
        return f"- {head}: {words} (the user's own note)."
    view = _view(lesson, project)
    bad, good = lesson.counts(view)
    main, other = (bad, good) if lesson.polarity < 0 else (good, bad)
    side, other_side = ("bad", "good") if lesson.polarity < 0 else ("good", "bad")
    detail = f"rated {side} {_times(main)}"
    if other:
        detail += f" and {other_side} {_times(other)}"
    detail += f", last on {_day(lesson.last_in(view))}"
    return f"- {head}: {words} ({detail})."


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


def _words(lesson: Lesson) -> str:
    if lesson.tag and not lesson.edited:
        return f'answers the user tagged "{lesson.tag}"'
    words = preview(lesson.words, WORDS_CHARS).rstrip(" .!;:,")
    if len(words) > 1 and words[0].isupper() and words[1].islower():
        words = words[0].lower() + words[1:]  # "Ran the…" reads on after "Avoid:"; "API…" stays
    return words


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
