"""Malformed requests to the settings app are a 4xx with one sentence and store nothing (18.6).

The first tests are the inputs that answered 500 (or were silently changed)
before the JSON routes took their bodies and queries through strict models;
the data folder is compared before and after each refused request.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from rltray.app import config
from rltray.app.spool import MAX_COMMENT

from tests.support.dbrows import stored
from tests.web.test_security import assert_error
from tests.web.webtesting import post_json


def post_raw(client: Any, url: str, data: bytes) -> Any:
    headers = {"X-CSRF-Token": client.csrf}
    return client.post(url, data=data, headers=headers, content_type="application/json")


def send(client: Any, url: str, body: Any) -> Any:
    """A JSON post to make later (``refused`` compares the data folder around it)."""
    return lambda: post_json(client, url, body)


def refused(service: Any, request: Any, status: int = 400) -> str:
    """``request()`` is refused in the one error shape and the data folder is unchanged."""
    before = stored(service.paths)
    response = request()
    code = {400: "UserError", 404: "not_found", 413: "request_entity_too_large"}[status]
    assert_error(response, status, code)
    assert stored(service.paths) == before
    return response.get_json()["error"]["message"]


@pytest.fixture
def rated(service, add_turns) -> int:
    (turn_id,) = add_turns(1)
    service.rate(turn_id, 1, comment="kept", source="web")
    return turn_id


# -- the inputs that answered 500 ----------------------------------------------------------


def test_a_comment_that_is_an_object_is_refused(client, service, rated) -> None:
    rating = {"value": -1, "comment": {"x": 1}}
    message = refused(service, send(client, f"/api/turns/{rated}/rating", rating))
    assert "comment" in message
    refused(service, send(client, f"/api/turns/{rated}/comment", {"comment": ["x"]}))


def test_an_id_outside_sqlites_int64_is_refused(client, service, rated) -> None:
    big = 2**63
    refused(service, lambda: client.get(f"/api/turns/{big}"), 404)
    refused(service, send(client, f"/api/turns/{big}/rating", {"value": 1}), 404)
    message = refused(service, send(client, "/api/turns/bulk", {"ids": [big], "action": "bad"}))
    assert "ids[0]" in message
    refused(service, lambda: client.get(f"/api/turns?offset={big}"))
    assert client.get(f"/ratings/turn/{big}").status_code == 404  # a page: the sentence in HTML


def test_bulk_ids_are_whole_numbers_not_floats(client, service, rated) -> None:
    """``[1.9]`` used to be rated as turn 1."""
    for ids in ([rated + 0.9], [float(rated)], [str(rated)], [True]):
        refused(service, send(client, "/api/turns/bulk", {"ids": ids, "action": "bad"}))
    assert service.store.active_rating(rated).value == 1


def test_json_nested_100k_deep_is_refused(client, service, rated) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    message = refused(service, lambda: post_raw(client, "/api/turns/bulk", deep))
    assert message == "The request body is nested too deeply."
    # a route that reads request.get_json itself (the wizard's) is a 400 too, not a 500
    assert post_raw(client, "/api/setup/model", deep).status_code == 400


# -- caps -----------------------------------------------------------------------------------


def test_comments_are_capped_like_rl_comments(client, service, rated) -> None:
    long = "x" * (MAX_COMMENT + 1)
    for url, body in ((f"/api/turns/{rated}/comment", {"comment": long}),
                      (f"/api/turns/{rated}/rating", {"value": -1, "comment": long})):  # fmt: skip
        message = refused(service, send(client, url, body))
        assert message == f"comment should have at most {MAX_COMMENT} characters."
    ok = post_json(client, f"/api/turns/{rated}/comment", {"comment": "y" * MAX_COMMENT})
    assert ok.status_code == 200 and ok.get_json()["rating"]["comment"] == "y" * MAX_COMMENT


def test_a_body_over_the_cap_is_413_in_the_one_shape(client, service, rated) -> None:
    too_big = json.dumps({"comment": "x" * (5 * 1024 * 1024)}).encode()
    url = f"/api/turns/{rated}/comment"
    message = refused(service, lambda: post_raw(client, url, too_big), 413)
    assert "KiB" in message


# -- the rest of the contract ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "body"),
    [
        ("/api/turns/{id}/rating", {"value": True}),
        ("/api/turns/{id}/rating", {"value": 1.0}),
        ("/api/turns/{id}/rating", {"value": 2}),
        ("/api/turns/{id}/rating", {"value": 1, "extra": 1}),
        ("/api/turns/{id}/rating", [1]),
        ("/api/turns/{id}/tags", {"tags": "wrong"}),
        ("/api/turns/{id}/tags", {"tags": [1]}),
        ("/api/turns/bulk", {"ids": [], "action": "good"}),
        ("/api/turns/bulk", {"ids": "{id}", "action": "good"}),
        ("/api/turns/bulk", {"ids": [1], "action": "explode"}),
        ("/api/turns/bulk", {"ids": [1], "action": "tag"}),  # which tag?
        ("/api/tags", {"name": 5}),
        ("/api/tags/delete", {}),
        ("/api/rollback", {"version": True}),
        ("/api/adapters/delete", {"version": "v" + "9" * 19}),
        ("/api/settings", {"notify.ask": {"a": 1}}),
        ("/api/settings", ["notify.ask"]),
    ],
)
def test_malformed_bodies_are_one_sentence(client, service, rated, url, body) -> None:
    url = url.replace("{id}", str(rated))
    if isinstance(body, dict) and body.get("ids") == "{id}":
        body = {**body, "ids": rated}
    refused(service, send(client, url, body))


@pytest.mark.parametrize(
    "query", ["limit=-1", "limit=1001", "limit=ten", "offset=1.5", "rating=great", "since=x"]
)
def test_malformed_queries_are_one_sentence(client, service, rated, query) -> None:
    refused(service, lambda: client.get(f"/api/turns?{query}"))


def test_a_refused_settings_request_saves_none_of_its_keys(client, service) -> None:
    before = config.load_config(service.paths).notify.ask
    body = {"notify.ask": "long" if before != "long" else "every", "training.min_ratings": 1}
    response = post_json(client, "/api/settings", body)
    assert response.status_code == 400
    assert set(response.get_json()["error"]["fields"]) == {"training.min_ratings"}
    assert config.load_config(service.paths).notify.ask == before


def test_pages_refuse_bad_numbers_in_a_sentence(client) -> None:
    page = client.get(f"/ratings?page={2**70}")
    assert page.status_code == 400 and b"page should be" in page.data
    export = client.get("/ratings/export.jsonl?id=1.5")
    assert export.status_code == 400 and b"id[0] should be" in export.data


def test_well_formed_requests_still_work(client, service, rated) -> None:
    bulk = post_json(client, "/api/turns/bulk", {"ids": [rated], "action": "bad"})
    assert bulk.status_code == 200 and bulk.get_json()["changed"] == 1
    assert service.store.active_rating(rated).comment == "kept"
    listed = client.get("/api/turns?limit=5&offset=0&rating=bad&q=&agent=&tag=")
    assert listed.status_code == 200 and [t["id"] for t in listed.get_json()["turns"]] == [rated]


# -- inputs that still answered 500 (a review of the web app) ------------------------------


@pytest.mark.parametrize("query", ["until=9999-12-31", "since=0001-01-01"])
def test_a_date_at_the_edge_of_the_calendar_is_refused_in_one_sentence(client, query) -> None:
    response = client.get(f"/api/turns?{query}")
    assert_error(response, 400, "UserError")
    assert "is out of range; give a date between the years 1 and 9999" in (
        response.get_json()["error"]["message"])  # fmt: skip


@pytest.mark.parametrize(("path", "said"), [
    ("~nosuchuser/models/m", "there is no user 'nosuchuser' on this machine"),
    ("/tmp/a\x00b", "is not a path: it holds a NUL character"),
])  # fmt: skip
def test_a_path_that_cannot_be_one_is_refused_and_nothing_is_saved(
    client, service, path: str, said: str
) -> None:
    """It answered 500 (RuntimeError from expanduser), with the request's other keys saved,
    though /api/settings saves all or nothing."""
    body = {"notify.every_nth": 7, "training.base_model": path}
    before = service.settings().notify.every_nth
    response = post_json(client, "/api/settings", body)
    assert response.status_code == 400 and said in response.get_json()["error"]["message"]
    assert service.settings().notify.every_nth == before
    message = refused(service, send(client, "/api/setup/models", {"folder": path}))
    assert said in message


def test_a_training_section_split_in_two_is_written_not_a_500(client, service) -> None:
    """Regression: ``[training.hyper]`` after another table (how the custom preset is
    written by hand) made ``[training]`` a proxy tomlkit cannot ``add`` to."""
    service.paths.config.write_text('[training]\npreset = "custom"\n\n[notify]\nevery_nth = 5\n'
                                    '\n[training.hyper]\nlr = 5e-5\n')  # fmt: skip
    response = post_json(client, "/api/settings", {"training.min_ratings": 40,
                                                   "notify.every_nth": 3})  # fmt: skip
    assert response.status_code == 200, response.get_json()
    written = config.load_config(service.paths)
    assert (written.training.min_ratings, written.notify.every_nth) == (40, 3)
    assert written.training.hyper == {"lr": 5e-5}


def test_an_ssh_key_file_is_read_only_as_far_as_a_key_can_be(client, service, tmp_path) -> None:
    """Regression: the file was read whole before the check; /dev/zero took the process to
    22.8 GB and the kernel's OOM killer."""
    big = tmp_path / "id_ed25519"
    with big.open("wb") as fh:
        fh.truncate(4 * 2**30)  # sparse: 4 GiB on paper, nothing on disk
    message = refused(service, send(client, "/api/setup/remote/key", {"path": str(big)}))
    assert "is not a private key (it is larger than any is)" in message
    fifo = tmp_path / "fifo"
    import os

    os.mkfifo(fifo)
    assert "is not a file" in refused(service, send(client, "/api/setup/remote/key",
                                                    {"path": str(fifo)}))  # fmt: skip


def test_a_withdrawal_with_a_comment_is_refused_not_dropped(client, service, rated) -> None:
    """Regression: {"value": 0, "comment": ...} answered 200 and dropped the comment."""
    message = refused(service, send(client, f"/api/turns/{rated}/rating",
                                    {"value": 0, "comment": "wrong file"}))  # fmt: skip
    assert "keeps no comment" in message
