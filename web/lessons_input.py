"""What the lessons page's JSON routes accept: strict bodies and queries (``httpinput.takes``).

Its own module, like ``ratings_input.py``, so the OpenAPI document describes
exactly what is checked. Words are capped at the raw text cap here; the store
then applies its own rule (one line, at most 500 characters) in one sentence.
Kinds and scopes are the lesson intents' own words (``app/lessons/intents.py``).
"""

from __future__ import annotations

from typing import Literal

from rltray.app.api.input import MAX_NAME, MAX_TEXT, Body, Query, text
from rltray.app.lessons.intents import POLARITIES, SCOPES

Words = text(MAX_TEXT)
Folder = text(MAX_TEXT)
#: A lesson's id in a path: c12 (a comment's group), t3 (a tag), u4 (the user's own).
KEY_PATH = "string(maxlength=24)"


class AddLessonBody(Body):
    """A lesson in your words: for one project folder, or for every project (null)."""

    text: Words  # type: ignore[valid-type]
    folder: Folder | None = None  # type: ignore[valid-type]
    kind: Literal[tuple(POLARITIES)] = "note"  # type: ignore[valid-type]


class WordsBody(Body):
    """Tell the lesson in these words; null or "" goes back to your own comment's words."""

    text: Words | None = None  # type: ignore[valid-type]


class SuggestBody(Body):
    """Which Ollama model rewords the lesson (null: the ``ollama.model`` setting)."""

    model: text(MAX_NAME) | None = None  # type: ignore[valid-type]


class FlagBody(Body):
    """Turn a lesson's flag (muted, pinned) on or off."""

    on: bool


class ResolveBody(Body):
    """Settle a contradiction: the lesson is told as avoid or as keep from now on."""

    kind: Literal["avoid", "keep"]


class ScopeBody(Body):
    """Tell the lesson in its own project only, or in every project."""

    scope: Literal[SCOPES]  # type: ignore[valid-type]


class SwitchBody(Body):
    """Turn lessons on or off for an agent."""

    on: bool


class PreviewQuery(Query):
    """Which session to preview: its folder (none: a folder with no lessons of its own)
    and its agent (none: the first agent rltray knows)."""

    folder: Folder | None = None  # type: ignore[valid-type]
    agent: text(100) | None = None  # type: ignore[valid-type]
