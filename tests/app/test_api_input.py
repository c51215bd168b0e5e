"""Malformed requests to the local API are a 4xx with one sentence and store nothing (issue 18.6).

Each of the first tests is one input that answered 500 (or was stored) before
the API validated its bodies with strict models; the data folder is compared
before and after every refused request.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from rltray.app.service import Service
from rltray.app.spool import MAX_COMMENT

from tests.support.dbrows import stored

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def turn(service: Service) -> int:
    rec = {"agent": "claude-code", "session": "s1", "turn": "t1", "prompt": "Why?",
           "response": "Because.", "context": [], "cwd": "/work",
           "captured_at": "2025-03-01T10:00:00Z"}  # fmt: skip
    return service.store.add_turn(rec)[0]


@pytest.fixture
def api(runtime: Any) -> Any:
    from rltray.web.app import create_app
    from rltray.web.security import Guard

    app = create_app(runtime, guard=Guard(api_token=TOKEN))
    app.config["TESTING"] = True
    return app.test_client()


def rating_of(turn: int) -> str:
    return f"/api/turns/{turn}/rating"


def post(api: Any, path: str, body: Any = None, raw: bytes | None = None) -> Any:
    data = raw if raw is not None else json.dumps(body).encode()
    return api.post(path, data=data, headers=AUTH, content_type="application/json")


def assert_refused(response: Any, status: int = 400) -> str:
    """A 4xx in the one error shape whose message is one sentence; returns the sentence."""
    assert response.status_code == status, response.get_data(as_text=True)[:300]
    body = response.get_json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    message = body["error"]["message"]
    assert message.endswith(".") and "\n" not in message and len(message) < 300
    return message


def refused_and_nothing_stored(api: Any, service: Service, path: str, body: Any = None,
                               raw: bytes | None = None, status: int = 400) -> str:  # fmt: skip
    before = stored(service.paths)
    message = assert_refused(post(api, path, body, raw), status)
    assert stored(service.paths) == before
    return message


# -- the inputs that answered 500 ----------------------------------------------------------


def test_a_comment_that_is_an_object_is_refused(api, service, turn) -> None:
    message = refused_and_nothing_stored(
        api, service, rating_of(turn), {"value": 1, "comment": {"x": 1}}
    )
    assert "comment" in message


def test_a_value_that_is_not_a_number_is_refused(api, service, turn) -> None:
    message = refused_and_nothing_stored(api, service, rating_of(turn), {"value": "x"})
    assert message.startswith("value should be")
    refused_and_nothing_stored(api, service, "/api/turns/x/rating", {"value": 1}, status=404)


def test_a_list_body_is_refused(api, service, turn) -> None:
    message = refused_and_nothing_stored(api, service, rating_of(turn), [1])
    assert "must be a JSON object" in message


def test_json_nested_too_deep_is_refused(api, service, turn) -> None:
    deep = b"[" * 20_000 + b"]" * 20_000  # 40 KB: under the body cap, over any nesting limit
    assert refused_and_nothing_stored(api, service, rating_of(turn), raw=deep) == (
        "The request body is nested too deeply."
    )
    hundred_k = b"[" * 100_000 + b"]" * 100_000  # the attack as measured: over the body cap too
    refused_and_nothing_stored(api, service, rating_of(turn), raw=hundred_k, status=413)


def test_an_id_outside_sqlites_int64_is_refused(api, service, turn) -> None:
    refused_and_nothing_stored(api, service, rating_of(2**63), {"value": 1}, status=404)
    refused_and_nothing_stored(api, service, "/api/rollback", {"version": "v" + "9" * 20})


# -- a body the API stored before it had a cap -------------------------------------------------


def test_bodies_and_comments_are_capped(api, service, turn) -> None:
    huge = {"value": 1, "comment": "x" * 1024 * 1024}  # the API stored 64 MiB
    message = refused_and_nothing_stored(api, service, rating_of(turn), huge, status=413)
    assert "KiB" in message
    long = {"value": 1, "comment": "x" * (MAX_COMMENT + 1)}
    assert refused_and_nothing_stored(api, service, rating_of(turn), long) == (
        f"comment should have at most {MAX_COMMENT} characters."
    )
    ok = post(api, rating_of(turn), {"value": 1, "comment": "x" * MAX_COMMENT})
    assert ok.status_code == 200
    assert service.store.active_rating(turn).comment == "x" * MAX_COMMENT


# -- the rest of the contract ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/turns/1/rating", {"value": True}),  # a bool is not a rating
        ("/api/turns/1/rating", {"value": 1.0}),  # nor a float
        ("/api/turns/1/rating", {"value": "1"}),  # nor text
        ("/api/turns/1/rating", {"value": 2}),
        ("/api/turns/1/rating", {"value": 1, "extra": 1}),  # unknown fields are refused
        ("/api/turns/1/rating", {}),
        ("/api/rollback", {"version": 1.5}),
        ("/api/rollback", {"version": ["v1"]}),
        ("/api/snooze", {"until": {}}),
        ("/api/snooze", {"until": "forever"}),
        ("/api/settings-window", {"page": []}),
        ("/api/settings-window", {"page": "setup", "open": "yes"}),
        ("/api/train", {"now": True}),  # a route without a body takes none
        ("/api/turns/1/rating", "not an object"),
    ],
)
def test_malformed_bodies_are_one_sentence(api, service, turn, path, body) -> None:
    refused_and_nothing_stored(api, service, path, body)


def test_text_that_is_not_json_is_refused(api, service, turn) -> None:
    message = refused_and_nothing_stored(api, service, rating_of(turn), raw=b'{"value": 1,')
    assert message.startswith("The request body is not valid JSON")
    # a lone surrogate cannot be stored as UTF-8; json.loads would let it through to SQLite
    lone = b'{"value": 1, "comment": "\\ud800"}'
    refused_and_nothing_stored(api, service, rating_of(turn), raw=lone)


def test_well_formed_requests_still_work(api, service, turn) -> None:
    rated = post(api, rating_of(turn), {"value": -1, "comment": "wrong file"})
    assert rated.status_code == 200
    assert rated.get_json()["rating"]["value"] == -1
    assert service.store.active_rating(turn).source == "api"  # not "web": a script rated
    assert post(api, "/api/ingest", raw=b"").status_code == 200  # no body at all
    assert post(api, "/api/pause", {}).status_code == 200
    assert api.get("/api/status", headers=AUTH).status_code == 200


def test_http_errors_keep_the_one_shape(api) -> None:
    assert_refused(api.get("/api/nothing", headers=AUTH), 404)
    assert_refused(api.get("/api/turns/1/rating", headers=AUTH), 405)
