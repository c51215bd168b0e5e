"""Fuzz every JSON route against the served OpenAPI document: no 5xx, a refusal stores nothing.

Schemathesis reads ``/api/openapi.json`` from the real local API and draws
requests from it, in-process against the real Flask apps (the API with its
bearer token, the settings app signed in through a launch URL) over a real
data folder holding rated and tagged turns. Each operation gets requests that
fit the document and requests that break it; every answer must be below 500,
every 4xx must be one sentence in the one error shape, and after every 4xx
the database's rows and config.toml must be what they were before it.

Hypothesis runs derandomized (the same requests every run) with a fixed
number of examples per operation, so a failure reproduces and the whole file
stays under a minute on two cores.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rltray.app.service import Service
from rltray.web.app import create_app
from rltray.web.security import COOKIE, Guard
from schemathesis import GenerationMode

from tests.support.dbrows import stored

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = 20  # per operation and mode
# Operations that start a process or a server, whatever the body: each has its own tests.
NOT_FUZZED = {
    "/api/train": "starts a training round (a trainer child process)",
    "/api/settings-window": "starts the settings web server and may open a window",
    "/api/setup/trainer-env": "creates a virtual environment with pip",
    "/api/setup/backend": "runs training.python to probe it",
    "/api/setup/test-notification": "sends a desktop notification",
    "/api/setup/remote/host-key": "connects over SSH to the remote host the settings name",
    "/api/setup/remote/accept-host-key": "connects over SSH to the remote host",
    "/api/setup/remote/check": "starts the remote check: SSH, Ray, a job on the remote",
}
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def turns(service: Service) -> list[int]:
    """Three turns: one rated good with a comment and a tag, one rated bad, one unrated."""
    ids = []
    for k in range(3):
        rec = {"agent": "claude-code", "session": "s1", "turn": f"t{k}", "prompt": f"Q{k}?",
               "response": f"A{k}.", "context": [], "cwd": "/work",
               "captured_at": f"2025-03-01T10:00:0{k}Z"}  # fmt: skip
        ids.append(service.store.add_turn(rec)[0])
    service.rate(ids[0], 1, comment="right", source="web")
    service.rate(ids[1], -1, source="web")
    service.store.set_turn_tags(ids[0], ["kept"])
    return ids


def api_app(runtime: Any, tmp_path: Any) -> Any:
    """The one app (pages and API) as the running rltray serves it, the bearer set."""
    return create_app(runtime, guard=Guard(api_token=TOKEN),
                      options={"ollama_host": "http://127.0.0.1:9",
                               "model_roots": [str(tmp_path)]})  # fmt: skip


@pytest.fixture
def document(runtime: Any, tmp_path: Any) -> Any:
    """The document as the API serves it, loaded by Schemathesis from the real route."""
    return schemathesis.openapi.from_wsgi(
        "/api/openapi.json", api_app(runtime, tmp_path), headers=AUTH
    ).raw_schema


AIM = st.one_of(st.none(), st.integers(0, 2))  # no turn, or which of the three


def aimed(case: Any, ids: list[int], aim: int | None) -> Any:
    """Point a drawn request at a turn that exists (ids drawn at random almost never do)."""
    if aim is None:
        return case
    turn = ids[aim]
    if "turn_id" in (case.path_parameters or {}):
        case.path_parameters["turn_id"] = turn
    if isinstance(case.body, dict):
        if "turn" in case.body:
            case.body["turn"] = turn
        if isinstance(case.body.get("ids"), list) and case.body["ids"]:
            case.body["ids"] = [turn]
    return case


def check(case: Any, service: Service, **credentials: Any) -> None:
    """Send ``case``: below 500; a refusal is one sentence and leaves the data folder as it was."""
    before = stored(service.paths)
    response = case.call(**credentials)
    where = f"{case.method} {case.formatted_path} body={case.body!r:.200}"
    assert response.status_code < 500, f"{where}: {response.text[:300]}"
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) >= {"code", "message"}, f"{where}: {error}"
        assert error["message"].endswith("."), f"{where}: {error}"
        assert stored(service.paths) == before, f"{where}: stored though refused"


def fuzz(schema: Any, service: Service, ids: list[int], **credentials: Any) -> list[str]:
    """Send each operation's drawn requests through ``check``; one line per failing operation."""
    problems: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @FUZZ_SETTINGS
            @given(case=operation.as_strategy(generation_mode=mode), aim=AIM)
            def send(case: Any, aim: int | None) -> None:
                check(aimed(case, ids, aim), service, **credentials)

            try:
                send()
            except AssertionError as exc:
                problems.append(f"{mode.value}: {str(exc).splitlines()[0][:500]}")
    return problems


def loaded(document: dict[str, Any], tag: str, app: Any) -> Any:
    """The document's operations of one app, minus ``NOT_FUZZED``, sent to ``app`` in process."""
    skipped = {path for path in document["paths"] if path in NOT_FUZZED}
    assert skipped == set(NOT_FUZZED), "a skipped operation left the document: update NOT_FUZZED"
    schema = schemathesis.openapi.from_dict(document).include(tag=tag).exclude(path=list(skipped))
    schema.app = app
    return schema


def test_fuzz_the_local_api(service, runtime, turns, document, tmp_path) -> None:
    schema = loaded(document, "api", api_app(runtime, tmp_path))
    assert fuzz(schema, service, turns, headers=AUTH) == []


def test_fuzz_the_settings_apps_json_routes(
    service, runtime, turns, document, tmp_path
) -> None:
    guard = Guard()
    app = create_app(runtime, guard=guard, options={"ollama_host": "http://127.0.0.1:9",
                                                    "model_roots": [str(tmp_path)]})  # fmt: skip
    window = app.test_client()
    assert window.get(f"/launch/{guard.launch_token('')}").status_code == 303
    cookie = window.get_cookie(COOKIE).value
    credentials = {"cookies": {COOKIE: cookie}, "headers": {"X-CSRF-Token": guard.csrf_for(cookie)}}
    schema = loaded(document, "settings web app", app)
    assert fuzz(schema, service, turns, **credentials) == []
