"""What the lessons page shows, read through the service's lesson intents (it writes nothing).

Thin functions over ``service.lessons`` (``app/lessons/intents.py``): the
listing as the CLI shows it, plus the two things a page needs that the listing
leaves out (whether a lesson is muted and pinned at once: its one status word
says only the first; and the rated turns behind it), the per-agent switches
with the one sentence of what is sent and where, and the exact preview with
its size against the budget. The wizard's opt-in uses the same switches, so
both pages say the same thing.
"""

from __future__ import annotations

import os
from typing import Any

from rltray.app.hooks import lessonfiles, registry
from rltray.app.lessons import rewrite
from rltray.app.words import preview as shorten
from rltray.web.state import state

#: How each status word of ``Lesson.status()`` reads on the page ("told": it goes to the agent).
STATUS_WORDS = {"told": "active", "pinned": "pinned", "muted": "muted", "retired": "retired",
                "contradiction": "contradiction", "deleted": "deleted"}  # fmt: skip
PROMPT_CHARS = 160


def rows() -> list[dict[str, Any]]:
    """Every lesson as the page lists it: the intents' listing, plus flags and turn counts."""
    lessons = state().service.lessons
    flags = {lesson.key: lesson for lesson in lessons.all()}
    out = []
    for row in lessons.listing():
        lesson = flags.get(row["id"])
        out.append(
            {
                **row,
                "muted": bool(lesson and lesson.muted),
                "pinned": bool(lesson and lesson.pinned),
                "turns": len(lesson.evidence) if lesson else 0,
                # the model rewords comments: a note or an unexplained tag has none
                "rewordable": bool(lesson and rewrite.comments(lesson)),
                "status_word": STATUS_WORDS.get(row["status"], row["status"]),
            }
        )
    return out


def row(key: str) -> dict[str, Any]:
    """One lesson's row (a ``UserError`` naming it when there is none)."""
    state().service.lessons.get(key)
    return next(r for r in rows() if r["id"] == key)


def turns_behind(key: str) -> list[dict[str, Any]]:
    """The rated turns behind a lesson, newest rating first: what the user said and of what."""
    service = state().service
    lesson = service.lessons.get(key)
    out = []
    for e in sorted(lesson.evidence, key=lambda e: e.rated_at, reverse=True):
        turn = service.store.get_turn(e.turn_id)
        out.append(
            {
                "turn": e.turn_id,
                "value": e.value,
                "score": e.score,
                "comment": e.comment,
                "tags": [name for _, name in e.tags],
                "rated_at": e.rated_at,
                "agent": e.agent,
                "project": e.cwd,
                "prompt": shorten(turn.prompt, PROMPT_CHARS) if turn is not None else None,
            }
        )
    return out


def folders() -> list[str]:
    """The project folders a preview or a new lesson may name: those turns came from, and
    those lessons belong to."""
    known = set(state().service.store.projects())
    for r in state().service.lessons.listing():
        known.update(r["folders"])
    return sorted(known)


def preview_choice(rows: list[dict[str, Any]], switches: list[dict[str, Any]]) -> dict[str, str]:
    """What the preview shows first: an agent whose lessons are on, and the folder of the
    first lesson told in a project of its own (else any folder: the global text)."""
    agent = next((a["name"] for a in switches if a["on"]), switches[0]["name"])
    folder = next(
        (r["folders"][0] for r in rows if r["told"] and r["scope"] == "project" and r["folders"]),
        "",
    )
    return {"agent": agent, "folder": folder}


def sentence(name: str, folder: str) -> str:
    """What turning lessons on for an agent sends, and where: one sentence for both pages."""
    return (
        f"When on, rltray writes the lessons for each project folder, at most "
        f"{lessonfiles.BUDGET_CHARS:,} characters, to {folder}{os.sep} (one .md file per "
        f"project, {lessonfiles.GLOBAL}.md for any other folder); when a {name} session "
        f"starts, rltray's hook reads the file for that folder and puts its text into "
        f"{name}'s context at session start, so it goes to {name}'s model with your prompts."
    )


def agent_rows() -> list[dict[str, Any]]:
    """Each agent's lessons switch: on or off, its folder, what it sends and where."""
    service = state().service
    settings = service.settings().lessons
    home = str(service.paths.home)
    out = []
    for entry in registry.lesson_agents():
        on = bool(getattr(settings, entry.setting))
        folder = lessonfiles.agent_folder(home, entry.name)
        files = _files(folder) if on else 0
        out.append(
            {
                "name": entry.name,
                "display_name": entry.display_name,
                "on": on,
                "folder": folder,
                "files": files,
                "state": _state_words(entry.display_name, on, files),
                "sentence": sentence(entry.display_name, folder),
            }
        )
    return out


def agent_row(name: str) -> dict[str, Any]:
    for r in agent_rows():
        if r["name"] == name:
            return r
    raise AssertionError(name)  # the intents refused an unknown agent before this


def _files(folder: str) -> int:
    try:
        return sum(name.endswith(".md") for name in os.listdir(folder))
    except OSError:
        return 0


def _state_words(name: str, on: bool, files: int) -> str:
    if not on:
        return f"Off: nothing is written for {name} or put into its context."
    if not files:
        return f"On: no lesson to tell {name} yet, so nothing is put into its context."
    return f"On: {files} lesson file{'' if files == 1 else 's'} written for {name} now."


def preview(folder: str | None, agent: str | None) -> dict[str, Any]:
    """Exactly what a session of ``agent`` in ``folder`` would be told, and its size."""
    agent = agent or registry.lesson_agents()[0].name
    shown = state().service.lessons.preview(folder or None, agent)
    name = registry.display_names()[agent]
    chars = len(shown.text) if shown.text else 0
    return {
        "agent": agent,
        "display_name": name,
        "folder": folder or None,
        "text": shown.text,
        "chars": chars,
        "budget": lessonfiles.BUDGET_CHARS,
        "cap": lessonfiles.MAX_CHARS,
        "lessons": shown.lessons,
        "on": shown.on,
        "file": str(shown.file) if shown.file else None,
        "where": _where(name, shown.on, shown.file),
    }


def _where(name: str, on: bool, file: Any) -> str:
    if file is None:
        return f"Nothing would be told to a {name} session there: no lesson to tell."
    if not on:
        return (
            f"{name}'s lessons are off: nothing is sent. Turned on, this text is written to "
            f"{file} and put into {name}'s context at session start."
        )
    return (
        f"{name}'s lessons are on: this text is in {file} and goes into {name}'s context "
        "at session start."
    )
