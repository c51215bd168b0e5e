"""What the ratings browser's routes accept: query strings and JSON bodies as strict models.

``web/ratings.py`` takes each through ``httpinput.takes``, and the OpenAPI
document describes them from these classes. Turn ids are ``httpinput.Id``
(whole numbers in SQLite's int64 range: ``[1.9]`` or ``[2**63]`` is refused,
not truncated or sent to SQLite), comments are capped like `/rl` comments.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema
from pydantic_core import PydanticCustomError
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
MAX_TAGS = 1000  # tags one turn may be given at once
MAX_FILTER_TAGS = 50  # tags one filter may ask for together (each must be on the turn)
MAX_CURSOR = 200  # a row's place: its captured_at text, a comma, its id
RATINGS = ("good", "bad", "unrated", "rated")
BULK_ACTIONS = ("good", "bad", "unrate", "tag", "untag", "delete")
Day = text(10)  # 2025-03-01; ratings.py turns it into a UTC bound and explains a bad one


def _no_nul(value: str) -> str:
    if "\x00" in value:  # no stored text holds one; SQLite would cut the pattern at it
        raise PydanticCustomError("nul", "Input should not contain a NUL character")
    return value


def _few_tags(value: object) -> object:
    if isinstance(value, list | tuple) and len(value) > MAX_FILTER_TAGS:
        raise PydanticCustomError(
            "too_many_tags",
            f"Input should name at most {MAX_FILTER_TAGS} tags, not {len(value)}",
        )
    return value


def _check_cursor(value: str) -> str:
    when, _, number = value.rpartition(",")
    if when.strip() and number.isascii() and number.isdigit() and 1 <= int(number) <= INT64_MAX:
        return value
    raise PydanticCustomError(
        "cursor",
        "Input should be a row's place: the time it was captured, a comma and its id "
        "(2025-03-01T10:00:00+00:00,42), as the pager's links give it",
    )


def cursor(value: str) -> tuple[str, int]:
    """A checked ``before`` / ``after`` value as (captured_at, id)."""
    when, _, number = value.rpartition(",")
    return when, int(number)


SearchText = Annotated[text(MAX_TEXT), AfterValidator(_no_nul)]  # type: ignore[valid-type]
Cursor = Annotated[
    text(MAX_CURSOR),  # type: ignore[valid-type]
    AfterValidator(_check_cursor),
    WithJsonSchema({"type": "string", "maxLength": MAX_CURSOR, "pattern": "^.+,[0-9]+$",
                    "description": "a turn's place in the list: captured_at,id"}),
]


class TurnQuery(Query):
    """The ratings browser's filters (each one narrows; empty ones do not)."""

    q: SearchText = ""  # type: ignore[valid-type]
    agent: Name | None = None
    project: SearchText | None = None  # type: ignore[valid-type]
    rating: Literal[RATINGS] | None = None  # type: ignore[valid-type]
    since: Day | None = None  # type: ignore[valid-type]
    until: Day | None = None  # type: ignore[valid-type]
    tag: Annotated[
        tuple[Name, ...], BeforeValidator(_few_tags), Field(max_length=MAX_FILTER_TAGS)
    ] = ()
    turn: Id | None = None  # just this turn, its detail open (the Lessons page links here)


class TurnListQuery(TurnQuery):
    """The filters, and which slice of the matching turns (newest first)."""

    limit: Annotated[int, Field(ge=0, le=MAX_LIMIT)] = PAGE_SIZE
    offset: Annotated[int, Field(ge=0, le=INT64_MAX)] = 0


class RatingsPageQuery(TurnQuery):
    """The page's filters and where in the list it is: ``before`` (the older turns after a
    row: the pager's "older" link) or ``after`` (the newer ones: "newer"), a row's
    ``captured_at,id``. ``page`` is what links made before the cursors still say."""

    before: Cursor | None = None  # type: ignore[valid-type]
    after: Cursor | None = None  # type: ignore[valid-type]
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
    """The comment of a turn's active rating; null or "" removes it.

    ``was``: the comment the edit started from (null or "" for none). When given and the
    turn's comment is no longer it (another window saved one meanwhile), nothing is
    saved and the answer is 409, saying what the comment is now.
    """

    comment: Comment | None = None  # type: ignore[valid-type]
    was: Comment | None = None  # type: ignore[valid-type]


class TagsBody(Body):
    """Exactly the tags a turn carries (new names join the tag list)."""

    tags: Annotated[list[Name], Field(max_length=MAX_TAGS)]


class TagBody(Body):
    """Add one tag to a turn (``on`` true; a new name joins the tag list) or remove it."""

    name: Name
    on: bool


class BulkBody(Body):
    """One action on selected turns; ``tag`` names the tag for tag / untag."""

    ids: Annotated[list[Id], Field(min_length=1, max_length=MAX_IDS)]
    action: Literal[BULK_ACTIONS]  # type: ignore[valid-type]
    tag: Name | None = None


class TagNameBody(Body):
    name: Name
