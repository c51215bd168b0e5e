"""What a request may carry on rltray's two HTTP surfaces, checked in one place.

Why it looks like this (ARCHITECTURE "Security model", issue 18 part 6): the
local API and the settings web app once read bodies with ``int(body.get(...))``
and stored whatever came. An object as a comment, an id of 2**63, a float id, a
list body or JSON nested 100,000 deep each reached SQLite or the JSON decoder
and came back as a 500; a 64 MiB comment was stored. Now every body and query
is a strict pydantic model: ints are ints (not bools, floats or strings) in
SQLite's int64 range, text is capped, unknown fields are refused, and a refusal
is one sentence (a ``UserError``, so both surfaces answer it in their one error
shape) raised before anything is stored. ``takes`` is the one door: it parses,
validates and hands the view its model, and records the models on the view so
``app/api/openapi.py`` describes exactly what is checked.

JSON is read by ``pydantic_core.from_json``: it has a nesting limit (a deep
body is a ``ValueError``, not a ``RecursionError``) and refuses lone
surrogates, which ``json.loads`` lets through to fail later in SQLite.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args, get_origin

from flask import Request, request
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError, from_json
from rltray.app.errors import UserError
from rltray.app.spool import MAX_COMMENT

INT64_MAX = 2**63 - 1  # SQLite's INTEGER: a bigger id cannot name a row, and binding it fails
MAX_IDS = 10_000  # turns one bulk request may name (a page shows 50)
SMALL_BODY = 64 * 1024  # the API's bodies; the largest real one: a rating with a 2,000-char comment
MAX_NAME = 200  # a name's raw length (tags: the store's own rule then allows 40 characters)
MAX_TEXT = 4096  # a setting's text, a search, a path
# An id in a URL path: werkzeug's int converter with SQLite's range, so /api/turns/2**63 is
# a 404 (no such route) instead of an OverflowError in the query.
ID_PATH = f"int(min=1, max={INT64_MAX})"
VERSION_PATTERN = "^[vV]?[0-9]{1,18}$"  # v3 or 3; 18 digits stay inside int64


def text(max_length: int) -> Any:
    """A JSON string of at most ``max_length`` characters (a number or a list is refused)."""
    return Annotated[str, StringConstraints(strict=True, max_length=max_length)]


def _exact_int(value: Any) -> Any:
    # Literal[1] compares with ==, so it would let True and 1.0 through
    if type(value) is not int:
        raise PydanticCustomError("int_type", "Input should be a whole number")
    return value


def _version(value: Any) -> int:
    if type(value) is int and 0 <= value <= INT64_MAX:
        return value
    if isinstance(value, str) and re.fullmatch(VERSION_PATTERN, value):
        return int(value.lower().removeprefix("v"))
    raise PydanticCustomError(
        "version", 'Input should be a version like 3 or "v3" (0 for the base model)'
    )


def _setting_value(value: Any) -> Any:
    if isinstance(value, bool) or (type(value) is int and abs(value) <= INT64_MAX):
        return value
    if isinstance(value, str) and len(value) <= MAX_TEXT:
        return value
    raise PydanticCustomError(
        "setting_value",
        f"Input should be true, false, a whole number or text of at most {MAX_TEXT} characters",
    )


Id = Annotated[int, Field(ge=1, le=INT64_MAX)]  # strict in a Body, parsed from text in a Query
Comment = text(MAX_COMMENT)  # capped like a `/rl good <comment>` (spool.MAX_COMMENT)
Name = text(MAX_NAME)


def int_choice(*values: int) -> Any:
    """One of these whole numbers, exactly (``Literal`` alone would take ``true`` for 1)."""
    return Annotated[Literal[values], BeforeValidator(_exact_int)]  # type: ignore[valid-type]


Version = Annotated[
    int,
    BeforeValidator(_version),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
                {"type": "string", "pattern": VERSION_PATTERN},
            ],
            "description": "a version number, or its name like v3; 0 is the base model",
        }
    ),
]


SettingValue = Annotated[
    Any,
    BeforeValidator(_setting_value),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "boolean"},
                {"type": "integer", "minimum": -INT64_MAX, "maximum": INT64_MAX},
                {"type": "string", "maxLength": MAX_TEXT},
            ]
        }
    ),
]


class Body(BaseModel):
    """A JSON request body: strict types, unknown fields refused."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class NoBody(Body):
    """A request that takes no body (an empty one or ``{}``)."""


class Query(BaseModel):
    """A query string: its values are text, so numbers are parsed (but still range-checked)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


# -- reading -------------------------------------------------------------------------


def read_json(data: bytes | str) -> Any:
    """The JSON value of a body; ``ValueError`` with one sentence when it is not JSON."""
    try:
        return from_json(data)
    except ValueError as exc:
        detail = str(exc)
        if "recursion limit" in detail:
            raise ValueError("The request body is nested too deeply.") from None
        raise ValueError(f"The request body is not valid JSON ({detail}).") from None


def parse_body(model: type[BaseModel], data: bytes) -> Any:
    """``data`` (an empty body counts as ``{}``) as ``model``, else one ``UserError`` sentence."""
    try:
        value = read_json(data) if data.strip() else {}
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return validate(model, value)


def parse_query(model: type[Query], args: Any) -> Any:
    """A query string (werkzeug ``MultiDict``) as ``model``; "" counts as absent, like a form's."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        given = [v for v in args.getlist(name) if v != ""]
        if not given:
            continue
        values[name] = given if _is_list(field.annotation) else given[-1]
    return validate(model, values)


def validate(model: type[BaseModel], value: Any) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise UserError(sentence(model, exc)) from None


def sentence(model: type[BaseModel], exc: ValidationError) -> str:
    """The first problem as one sentence that names the field and never repeats the input."""
    error = exc.errors(include_url=False, include_input=False)[0]
    loc = list(error["loc"])  # models use no unions (a custom type instead), so no branch names
    fields = "" if issubclass(model, RootModel) else ", ".join(model.model_fields)
    if not loc:
        if error["type"] in ("model_type", "dict_type", "model_attributes_type"):
            return f"The request body must be a JSON object (fields: {fields or 'none'})."
        return f"The request body is refused: {error['msg'].rstrip('.')}."
    name = str(loc[0])[:40] + "".join(f"[{str(p)[:40]}]" for p in loc[1:])  # a key is input
    kind, message = error["type"], error["msg"]
    if kind == "missing":
        return f"{name} is required."
    if kind == "extra_forbidden":
        return f"{name} is not a field of this request (fields: {fields or 'none'})."
    first, _, rest = message.partition(" ")
    if first in ("Input", "String", "List", "Value", "Dictionary", "Tuple"):
        return f"{name} {rest.rstrip('.')}."
    return f"{name}: {message.rstrip('.')}."


def _is_list(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _is_list(get_args(annotation)[0])
    return origin in (list, tuple)


# -- the one door ---------------------------------------------------------------------

BODY_ATTR = "rltray_body"
QUERY_ATTR = "rltray_query"


def takes(
    body: type[BaseModel] | None = None,
    query: type[Query] | None = None,
    max_bytes: int | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Validate a Flask view's JSON body and/or query string; the view gets ``body=``/``query=``.

    The models stay on the view (``models_of``): the OpenAPI document is built
    from them, so what is documented is what is checked. ``max_bytes``: a body
    larger than this is refused (413) before it is read.
    """

    def wrap(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def checked(**kwargs: Any) -> Any:
            if max_bytes is not None:
                request.max_content_length = min(max_bytes, request.max_content_length or max_bytes)
            if query is not None:
                kwargs["query"] = parse_query(query, request.args)
            if body is not None:
                kwargs["body"] = parse_body(body, request.get_data(cache=True))
            return view(**kwargs)

        setattr(checked, BODY_ATTR, body)
        setattr(checked, QUERY_ATTR, query)
        return checked

    return wrap


def models_of(view: Callable[..., Any]) -> tuple[type[BaseModel] | None, type[Query] | None]:
    """The body and query models ``takes`` recorded on a view (None, None for others)."""
    return getattr(view, BODY_ATTR, None), getattr(view, QUERY_ATTR, None)


class JSONObjectRequest(Request):
    """A Flask request whose ``get_json`` answers a JSON object, None (no body), or refuses.

    For views that read ``request.get_json(silent=True) or {}`` themselves (the
    wizard's): Flask let a body nested too deep through as a ``RecursionError``,
    and a list or a string reached ``.get`` — both 500s. Here any body that is
    not a JSON object is one sentence (a ``UserError``), silent or not; ``force``
    is implied (the CSRF header, not the content type, keeps other sites out).
    """

    def get_json(self, force: bool = False, silent: bool = False, cache: bool = True) -> Any:
        data = self.get_data(cache=cache)
        if not data.strip():
            if silent:
                return None
            raise UserError("The request needs a JSON object as its body.")
        try:
            value = read_json(data)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if not isinstance(value, dict):
            raise UserError("The request body must be a JSON object.")
        return value
