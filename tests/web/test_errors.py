"""One error shape: JSON ``{"error": {"code", "message"}}`` under /api/, a page elsewhere,
never a stack trace."""

from __future__ import annotations

from tests.web.test_security import assert_error
from tests.web.webtesting import post_json


def test_api_errors_have_one_shape(client, add_turns) -> None:
    (turn_id,) = add_turns(1)
    assert_error(client.get("/api/nothing-here"), 404, "not_found")
    assert_error(client.delete(f"/api/turns/{turn_id}", headers={"X-CSRF-Token": client.csrf}),
                 405, "method_not_allowed")  # fmt: skip
    assert_error(post_json(client, "/api/turns/999/rating", {"value": 1}), 400, "UserError")
    assert_error(post_json(client, f"/api/turns/{turn_id}/rating", {"value": 5}), 400, "UserError")
    assert_error(post_json(client, "/api/turns/bulk", {"ids": [], "action": "good"}),
                 400, "UserError")  # fmt: skip
    assert_error(client.get("/api/turns?rating=great"), 400, "UserError")
    assert_error(client.get("/api/turns?since=yesterday"), 400, "UserError")
    assert_error(post_json(client, f"/api/turns/{turn_id}/comment", {"comment": "x"}),
                 400, "StoreError")  # fmt: skip
    bad_json = client.post("/api/turns/bulk", data="{nope", content_type="application/json",
                           headers={"X-CSRF-Token": client.csrf})  # fmt: skip
    assert_error(bad_json, 400, "UserError")


def test_pages_show_errors_in_the_page(client) -> None:
    missing = client.get("/no-such-page")
    assert missing.status_code == 404 and b"<title>Not found" in missing.data
    bad = client.get("/ratings?since=31.12.2024")
    assert bad.status_code == 400
    assert b"must look like 2025-03-01" in bad.data and b"Traceback" not in bad.data
    gone = client.get("/ratings/turn/12345")
    assert gone.status_code == 400 and b"no turn 12345" in gone.data


def test_an_unexpected_failure_is_a_sentence_not_a_trace(client, service, monkeypatch) -> None:
    def broken(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(service.store, "counts", broken)
    page = client.get("/")
    assert page.status_code == 500 and b"disk on fire" in page.data
    assert b"Traceback" not in page.data
    assert_error(client.get("/api/dashboard"), 500, "internal")


def test_a_command_in_a_message_shows_as_code_and_the_rest_stays_text(anonymous, client) -> None:
    """Issue 22: the pages showed rltray's sentences with bare backticks (`rltray settings`)."""
    refused = anonymous.get("/settings").data.decode()
    assert "<code>rltray settings</code>" in refused and "`" not in refused
    missing = client.get("/<b>`x`</b>").data.decode()  # what the address holds is only text
    assert "There is no page /&lt;b&gt;<code>x</code>&lt;/b&gt;." in missing
    assert "<b>" not in missing
    assert "<code>rltray run</code>" in client.get("/").data.decode()
