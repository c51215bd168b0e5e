"""An OpenAPI 3.1 document of rltray's JSON routes, built from the Flask apps themselves.

Why it is generated, not written: editor extensions read it to talk to the
local API, and the fuzz tests (tests/web/test_fuzz.py) send requests drawn
from it. Every ``/api/`` rule of each app's ``url_map`` becomes an operation;
path parameters come from the rule's converters (an id's int64 range
included), bodies and query strings from the pydantic models ``httpinput.takes``
recorded on the view. A new route, a changed method or a changed model is in
the document without touching this file. Routes that validate no body (the
wizard's) are documented with a generic JSON object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from rltray.app.api.input import NoBody, models_of

VERSION = "3.1.0"
PREFIX = "/api/"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "description": "what kind of refusal"},
                "message": {"type": "string", "description": "one sentence for the user"},
            },
        }
    },
}
_ARG = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")


@dataclass(frozen=True)
class Surface:
    """A part of one Flask app's routes: its tag and how its requests authenticate."""

    app: Any  # a Flask app
    tag: str
    about: str
    schemes: dict[str, dict[str, Any]]  # security scheme name -> OpenAPI scheme
    reads: tuple[str, ...]  # the schemes a GET needs (all of them at once)
    writes: tuple[str, ...]  # the schemes a state-changing request needs
    endpoints: Callable[[str], bool] = lambda _name: True  # which endpoints are this part's
    # Another way in that the same server also takes (the API's bearer on a page's route,
    # a window's session on an API route): its schemes for a GET and for a change.
    also_reads: tuple[str, ...] = ()
    also_writes: tuple[str, ...] = ()


def document(surfaces: Sequence[Surface], title: str, version: str) -> dict[str, Any]:
    """The OpenAPI document of every ``/api/`` route of ``surfaces``."""
    paths: dict[str, dict[str, Any]] = {}
    models: list[type[BaseModel]] = []
    operations: list[tuple[dict[str, Any], type[BaseModel] | None, type[BaseModel] | None]] = []
    for surface in surfaces:
        for rule in sorted(surface.app.url_map.iter_rules(), key=lambda r: r.rule):
            if not rule.rule.startswith(PREFIX) or not surface.endpoints(rule.endpoint):
                continue
            view = surface.app.view_functions[rule.endpoint]
            body, query = models_of(view)
            models += [m for m in (body, query) if m is not None and m not in models]
            item = paths.setdefault(_ARG.sub(r"{\1}", rule.rule), {})
            for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
                op = _operation(surface, rule, view, method)
                item[method.lower()] = op
                operations.append((op, body if method in WRITES else None, query))
    refs, defs = models_json_schema(
        [(m, "validation") for m in models], ref_template="#/components/schemas/{model}"
    )
    for op, body, query in operations:
        if query is not None:
            op["parameters"] += _query_parameters(query)
        if body is not None and body is not NoBody:
            schema = refs[(body, "validation")]
            required = bool(body.model_json_schema().get("required"))
            op["requestBody"] = {"required": required, "content": _json(schema)}
    schemes: dict[str, Any] = {}
    for surface in surfaces:
        schemes.update(surface.schemes)
    return {
        "openapi": VERSION,
        "info": {"title": title, "version": version},
        "tags": [{"name": s.tag, "description": s.about} for s in surfaces],
        "paths": paths,
        "components": {
            "schemas": {**defs.get("$defs", {}), "Error": ERROR_SCHEMA},
            "responses": {
                "Error": {
                    "description": "refused: one sentence in the one error shape",
                    "content": _json({"$ref": "#/components/schemas/Error"}),
                }
            },
            "securitySchemes": schemes,
        },
    }


def _operation(surface: Surface, rule: Any, view: Any, method: str) -> dict[str, Any]:
    doc = (view.__doc__ or "").strip().splitlines()
    needs = surface.writes if method in WRITES else surface.reads
    also = surface.also_writes if method in WRITES else surface.also_reads
    security = [{name: [] for name in needs}] + ([{name: [] for name in also}] if also else [])
    op: dict[str, Any] = {
        "operationId": f"{rule.endpoint}.{method.lower()}",
        "tags": [surface.tag],
        "summary": doc[0] if doc else rule.endpoint,
        "security": security,
        "parameters": [_path_parameter(name, c) for name, c in _converters(rule)],
        "responses": {
            "200": {"description": "done", "content": _json({})},
            "4XX": {"$ref": "#/components/responses/Error"},
        },
    }
    body, _ = models_of(view)
    if body is None and method in WRITES:  # a route that checks no body: any JSON object
        op["requestBody"] = {"required": False, "content": _json({"type": "object"})}
    return op


def _converters(rule: Any) -> list[tuple[str, Any]]:
    # werkzeug keeps a rule's converters only in this attribute (flask-smorest reads it too)
    return sorted(rule._converters.items())


def _path_parameter(name: str, converter: Any) -> dict[str, Any]:
    from werkzeug.routing import IntegerConverter

    schema: dict[str, Any]
    if isinstance(converter, IntegerConverter):
        schema = {"type": "integer"}
        if converter.min is not None:
            schema["minimum"] = converter.min
        elif not converter.signed:
            schema["minimum"] = 0
        if converter.max is not None:
            schema["maximum"] = converter.max
    else:
        schema = {"type": "string", "pattern": "^[^/]+$"}
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": prop}
        for name, prop in schema.get("properties", {}).items()
    ]


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}
