"""What the ratings browser's routes accept: query strings and JSON bodies as strict models.

``web/ratings.py`` takes each through ``httpinput.takes``, and the OpenAPI
document describes them from these classes. Turn ids are ``httpinput.Id``
(whole numbers in SQLite's int64 range: ``[1.9]`` or ``[2**63]`` is refused,
not truncated or sent to SQLite), comments are capped like `/rl` comments.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from rltray.app.api.input import (
    INT64_MAX,
    MAX_IDS,
    MAX_TEXT,
    Body,
    Comment,
    Id,
    Name,
    Query,
    int_choice,
    text,
)

PAGE_SIZE = 50
MAX_LIMIT = 1000  # turns one /api/turns answer may hold (each carries its whole text)
MAX_TAGS = 1000
RATINGS = ("good", "bad", "unrated", "rated")
BULK_ACTIONS = ("good", "bad", "unrate", "tag", "untag", "delete")
Day = text(10)  # 2025-03-01; ratings.py turns it into a UTC bound and explains a bad one


class TurnQuery(Query):
    """The ratings browser's filters (each one narrows; empty ones do not)."""

    q: text(MAX_TEXT) = ""  # type: ignore[valid-type]
    agent: Name | None = None
    project: text(MAX_TEXT) | None = None  # type: ignore[valid-type]
    rating: Literal[RATINGS] | None = None  # type: ignore[valid-type]
    since: Day | None = None  # type: ignore[valid-type]
    until: Day | None = None  # type: ignore[valid-type]
    tag: Annotated[tuple[Name, ...], Field(max_length=MAX_TAGS)] = ()
    turn: Id | None = None  # just this turn, its detail open (the Lessons page links here)


class TurnListQuery(TurnQuery):
    """The filters, and which slice of the matching turns (newest first)."""

    limit: Annotated[int, Field(ge=0, le=MAX_LIMIT)] = PAGE_SIZE
    offset: Annotated[int, Field(ge=0, le=INT64_MAX)] = 0


class RatingsPageQuery(TurnQuery):
    page: Annotated[int, Field(ge=1, le=INT64_MAX // PAGE_SIZE)] = 1


class ExportQuery(TurnQuery):
    id: Annotated[tuple[Id, ...], Field(max_length=MAX_IDS)] = ()


class RateTurnBody(Body):
    """Rate a turn: 1 good, -1 bad, 0 withdraws, or ``score`` 1-5 (a graded rating: 4-5
    good, 1-2 bad, 3 refused with the reason); no comment keeps the one it has."""

    value: int_choice(1, -1, 0) | None = None  # type: ignore[valid-type]
    score: int_choice(1, 2, 3, 4, 5) | None = None  # type: ignore[valid-type]
    comment: Comment | None = None  # type: ignore[valid-type]


class CommentBody(Body):
    """The comment of a turn's active rating; null or "" removes it."""

    comment: Comment | None = None  # type: ignore[valid-type]


class TagsBody(Body):
    """Exactly the tags a turn carries (new names join the tag list)."""

    tags: Annotated[list[Name], Field(max_length=MAX_TAGS)]


class BulkBody(Body):
    """One action on selected turns; ``tag`` names the tag for tag / untag."""

    ids: Annotated[list[Id], Field(min_length=1, max_length=MAX_IDS)]
    action: Literal[BULK_ACTIONS]  # type: ignore[valid-type]
    tag: Name | None = None


class TagNameBody(Body):
    name: Name
