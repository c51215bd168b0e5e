"""The OpenAPI document at /api/openapi.json lists every JSON route, with the checked models.

It is built from the apps' url_maps and the models ``httpinput.takes`` records,
so these tests pin that nothing is left out or made up, and that what the
document says is what the routes check.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import schemathesis
from flask import Flask, jsonify
from rltray.app.api.input import INT64_MAX, Body, Comment, Id, takes
from rltray.app.api.openapi import Surface, document
from rltray.app.spool import MAX_COMMENT
from rltray.web.app import create_app

AUTH = {"Authorization": "Bearer t"}


@pytest.fixture
def api(runtime: Any) -> Any:
    from rltray.web.security import Guard

    return create_app(runtime, guard=Guard(api_token="t"))


def served(api: Any) -> dict[str, Any]:
    response = api.test_client().get("/api/openapi.json", headers=AUTH)
    assert response.status_code == 200
    return response.get_json()


def routes_of(app: Any) -> set[tuple[str, str]]:
    """(OpenAPI path, method) of every /api/ rule the app registered."""
    found = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/"):
            path = re.sub(r"<(?:[^<>:]+:)?([^<>]+)>", r"{\1}", rule.rule)
            found |= {(path, m.lower()) for m in rule.methods - {"HEAD", "OPTIONS"}}
    return found


def test_the_document_needs_the_token(api) -> None:
    assert api.test_client().get("/api/openapi.json").status_code == 401


def test_every_route_is_in_the_document_and_nothing_else(api, runtime) -> None:
    doc = served(api)
    documented = {(path, method) for path, item in doc["paths"].items() for method in item}
    registered = routes_of(api)
    assert documented == registered
    assert ("/api/openapi.json", "get") in documented
    assert ("/api/turns/{turn_id}/rating", "post") in documented  # a web app route
    tags = {op["tags"][0] for item in doc["paths"].values() for op in item.values()}
    assert tags == {"api", "settings web app"}


def test_the_document_says_what_the_routes_check(api) -> None:
    doc = served(api)
    schemas = doc["components"]["schemas"]
    rate = doc["paths"]["/api/turns/{turn_id}/rating"]["post"]
    assert rate["security"] == [{"session": [], "csrf": []}, {"bearer": []}]
    ref = rate["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = schemas[ref.rsplit("/", 1)[1]]
    assert body["additionalProperties"] is False and "required" not in body  # value or score
    assert body["properties"]["value"]["anyOf"][0]["enum"] == [1, -1, 0]
    assert body["properties"]["score"]["anyOf"][0]["enum"] == [1, 2, 3, 4, 5]
    (param,) = rate["parameters"]
    assert param["in"] == "path" and param["schema"]["maximum"] == INT64_MAX
    comment = body["properties"]["comment"]["anyOf"][0]
    assert comment == {"type": "string", "maxLength": MAX_COMMENT}
    turn = doc["paths"]["/api/turns/{turn_id}"]["get"]
    assert turn["security"] == [{"session": []}, {"bearer": []}]
    (param,) = turn["parameters"]
    assert param["in"] == "path" and param["schema"]["maximum"] == INT64_MAX
    listing = {p["name"]: p for p in doc["paths"]["/api/turns"]["get"]["parameters"]}
    assert listing["limit"]["schema"]["maximum"] == 1000
    bulk = doc["paths"]["/api/turns/bulk"]["post"]
    assert bulk["security"] == [{"session": [], "csrf": []}, {"bearer": []}]
    assert doc["servers"] == [{"url": "http://localhost"}]


def test_schemathesis_reads_every_operation(api) -> None:
    """A document a standard tool can load: each operation parses (refs, schemas, params)."""
    schema = schemathesis.openapi.from_dict(served(api))
    operations = list(schema.get_all_operations())
    assert operations and all(result.ok() is not None for result in operations)


def test_a_new_route_and_its_model_appear_without_touching_the_generator() -> None:
    class NoteBody(Body):
        turn: Id
        note: Comment

    app = Flask("probe")

    @app.post("/api/notes")
    @takes(body=NoteBody)
    def add_note(body: NoteBody) -> Any:
        """Keep a note on a turn."""
        return jsonify({})

    @app.get("/not-api")
    def page() -> str:
        return ""

    doc = document([Surface(app, "probe", "a probe", {}, (), ())], "probe", "1")
    assert list(doc["paths"]) == ["/api/notes"]
    op = doc["paths"]["/api/notes"]["post"]
    assert op["summary"] == "Keep a note on a turn."
    assert doc["components"]["schemas"]["NoteBody"]["properties"]["note"]["maxLength"] == (
        MAX_COMMENT
    )
