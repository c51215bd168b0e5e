"""The web app's door (ARCHITECTURE "Security model"): launch token -> cookie, 401 without it,
403 for a foreign Host or Origin and for a change without the CSRF token — and nothing changes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from http.cookiejar import CookieJar

import pytest
from rltray.app import config
from rltray.web.security import COOKIE, Guard, Refused
from rltray.web.server import WebServer

from tests.web.webtesting import post_json

STATE_CHANGES = [
    ("/api/turns/1/rating", {"value": 1}),
    ("/api/turns/bulk", {"ids": [1], "action": "delete"}),
    ("/api/settings", {"training.preset": "aggressive"}),
    ("/api/rollback", {"version": 0}),
    ("/api/tags", {"name": "evil"}),
]


def _unchanged(service, turn_id: int) -> None:
    turn = service.store.get_turn(turn_id)
    assert turn is not None and turn.rating is None
    assert config.load_config(service.paths).training.preset == "balanced"
    assert "evil" not in [t["name"] for t in service.store.list_tags()]


def assert_error(response, status: int, code: str) -> None:
    assert response.status_code == status
    body = response.get_json()
    assert body == {"error": {"code": code, "message": body["error"]["message"]}}
    assert body["error"]["message"].endswith(".")


def test_without_the_cookie_every_route_is_401(anonymous, app, add_turns, service) -> None:
    (turn_id,) = add_turns(1)
    for rule in app.url_map.iter_rules():
        if rule.endpoint in ("launch", "static"):
            continue
        url = rule.rule.replace("<int:turn_id>", str(turn_id)).replace("<job_id>", "x")
        url = url.replace("<name>", "codex").replace("<action>", "install")
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            response = anonymous.open(url, method=method, json={})
            assert response.status_code == 401, (method, url)
            if url.startswith("/api/"):
                assert_error(response, 401, "unauthorized")
            else:
                assert b"not signed in" in response.data and b"Traceback" not in response.data
    # the package's public stylesheet is served without a session (refusal pages use it),
    # but not to another site's page
    assert anonymous.get("/static/app.css").status_code == 200
    foreign = anonymous.get("/static/app.css", headers={"Sec-Fetch-Site": "same-site"})
    assert foreign.status_code == 403
    _unchanged(service, turn_id)


def test_a_launch_token_works_once_and_sets_a_strict_httponly_cookie(app, guard) -> None:
    c = app.test_client()
    token = guard.launch_token("setup")
    first = c.get(f"/launch/{token}")
    assert first.status_code == 303 and first.headers["Location"] == "/setup"
    cookie = first.headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE}=") and guard.session(c.get_cookie(COOKIE).value)
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert c.get("/setup").status_code == 200
    again = app.test_client().get(f"/launch/{token}")
    assert again.status_code == 401 and b"already used or has expired" in again.data
    assert app.test_client().get("/launch/made-up").status_code == 401
    with pytest.raises(ValueError, match="Unknown page"):
        guard.launch_token("/etc/passwd")


def test_an_expired_launch_token_is_refused(app, guard, monkeypatch) -> None:
    import rltray.web.security as security

    monkeypatch.setattr(security, "LAUNCH_TTL_S", -1.0)
    token = guard.launch_token("")
    assert app.test_client().get(f"/launch/{token}").status_code == 401


def test_a_wrong_cookie_is_401(app) -> None:
    c = app.test_client()
    c.set_cookie(COOKIE, "guess")
    assert_error(c.get("/api/dashboard"), 401, "unauthorized")


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.2", "[::2]"])
def test_a_foreign_host_is_403_even_with_the_cookie(client, host, add_turns, service) -> None:
    (turn_id,) = add_turns(1)
    assert_error(client.get("/api/dashboard", headers={"Host": host}), 403, "forbidden_host")
    url = f"/api/turns/{turn_id}/rating"
    response = post_json(client, url, {"value": 1}, headers={"Host": host})
    assert_error(response, 403, "forbidden_host")
    _unchanged(service, turn_id)


def test_a_foreign_origin_is_403_even_with_cookie_and_csrf(client, add_turns, service) -> None:
    (turn_id,) = add_turns(1)
    for origin in ("http://evil.example", "null", "http://127.0.0.1:1"):
        for url, body in STATE_CHANGES:
            response = post_json(
                client, url.replace("/1/", f"/{turn_id}/"), body, headers={"Origin": origin}
            )
            assert_error(response, 403, "forbidden_origin")
    _unchanged(service, turn_id)
    ok = post_json(client, f"/api/turns/{turn_id}/rating", {"value": 1},
                   headers={"Origin": "http://localhost"})  # fmt: skip
    assert ok.status_code == 200


def test_changes_without_the_csrf_token_are_403_and_change_nothing(client, add_turns, service):
    (turn_id,) = add_turns(1)
    for url, body in STATE_CHANGES:
        url = url.replace("/1/", f"/{turn_id}/")
        assert_error(client.post(url, json=body), 403, "csrf")
        wrong = client.post(url, json=body, headers={"X-CSRF-Token": "nope"})
        assert_error(wrong, 403, "csrf")
    # an HTML form post from another page: refused for where it came from, before any token
    form = client.post(
        "/settings",
        data={"training.preset": "aggressive"},
        headers={"Sec-Fetch-Site": "cross-site"},
    )
    assert form.status_code == 403 and b"another web page" in form.data
    # our own origin but no token: refused by the CSRF check
    own = client.post(
        "/settings",
        data={"training.preset": "aggressive"},
        headers={"Sec-Fetch-Site": "same-origin"},
    )
    assert own.status_code == 403 and b"CSRF" in own.data
    secret = client.post("/settings/secret", data={"hf_token": "hf_evil", "action": "save"})
    assert secret.status_code == 403
    _unchanged(service, turn_id)
    assert service.store.get_turn(turn_id) is not None


def test_the_real_server_binds_localhost_and_checks_host_and_port(runtime) -> None:
    server = WebServer(runtime).start()
    try:
        assert server.address[0] == "127.0.0.1"
        jar = CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        with opener.open(server.launch_url(""), timeout=10) as page:
            html = page.read().decode()
            assert page.url == server.base_url + "/" and "<title>Dashboard · rltray</title>" in html
        assert [c.name for c in jar] == [COOKIE]
        with opener.open(server.base_url + "/api/dashboard", timeout=10) as api:
            assert "counts" in json.loads(api.read())
        for host in (f"localhost:{server.port + 1}", "attacker.example"):
            req = urllib.request.Request(server.base_url + "/api/dashboard", headers={"Host": host})
            with pytest.raises(urllib.error.HTTPError) as refused:
                opener.open(req, timeout=10)
            assert refused.value.code == 403
        with pytest.raises(urllib.error.HTTPError) as anon:
            urllib.request.urlopen(server.base_url + "/", timeout=10)
        assert anon.value.code == 401
    finally:
        server.stop()


def test_guards_of_two_apps_do_not_share_secrets() -> None:
    a, b = Guard(), Guard()
    sid = a.open_session()
    with pytest.raises(Refused):
        b.session(sid)
    assert a.csrf_for(sid) and b.csrf_for(sid) == ""
    token = a.launch_token("")
    assert b.spend(token) is None and a.spend(token) == "/"


def test_the_web_cannot_point_training_python_at_a_program_of_its_choosing(
    client, service, tmp_path
) -> None:
    """A change that names a program to run must come from outside the browser
    (`rltray config set`), unless it names what rltray built or its own interpreter."""
    evil = tmp_path / "evil"
    evil.write_text("#!/bin/sh\ntouch /tmp/owned\n")
    evil.chmod(0o755)
    refused = post_json(client, "/api/settings", {"training.python": str(evil)})
    assert refused.status_code == 400
    assert "rltray config set training.python" in json.dumps(refused.get_json())
    form = client.post("/settings", data={"training.python": str(evil), "csrf_token": client.csrf})
    assert b"rltray config set training.python" in form.data
    assert config.load_config(service.paths).training.python == ""
    sneaky = service.paths.home / "trainer-env" / ".." / ".." / "evil"
    assert post_json(client, "/api/settings", {"training.python": str(sneaky)}).status_code == 400
    built = service.paths.home / "trainer-env" / "bin" / "python"
    assert post_json(client, "/api/settings", {"training.python": str(built)}).status_code == 200
    assert config.load_config(service.paths).training.python == str(built)
    assert post_json(client, "/api/settings", {"training.python": ""}).status_code == 200
    config.set_value(service.paths, "training.python", str(evil))  # the CLI's way: allowed
    assert config.load_config(service.paths).training.python == str(evil)


def test_each_launch_is_its_own_session_and_sign_out_ends_only_that_one(app, guard) -> None:
    one, two = app.test_client(), app.test_client()
    for c in (one, two):
        assert c.get(f"/launch/{guard.launch_token('')}").status_code == 303
    a, b = one.get_cookie(COOKIE).value, two.get_cookie(COOKIE).value
    assert a != b and guard.csrf_for(a) != guard.csrf_for(b)
    # one window's CSRF token does not work with another window's cookie
    crossed = one.post("/api/tags", json={"name": "x"}, headers={"X-CSRF-Token": guard.csrf_for(b)})
    assert crossed.status_code == 403
    out = one.post("/signout", data={"csrf_token": guard.csrf_for(a)})
    assert out.status_code == 200 and b"Signed out" in out.data
    assert b"Sign out</button>" not in out.data
    assert one.get("/api/dashboard").status_code == 401
    assert two.get("/api/dashboard").status_code == 200


def test_a_session_ends_after_its_idle_time(app, guard, monkeypatch) -> None:
    import rltray.web.security as security

    now = [1000.0]
    guard.clock = lambda: now[0]
    c = app.test_client()
    c.get(f"/launch/{guard.launch_token('')}")
    now[0] += security.SESSION_IDLE_S - 60
    assert c.get("/api/dashboard").status_code == 200  # in use: the idle clock restarts
    now[0] += security.SESSION_IDLE_S - 60
    assert c.get("/api/dashboard").status_code == 200
    now[0] += security.SESSION_IDLE_S + 1
    assert_error(c.get("/api/dashboard"), 401, "unauthorized")


def test_a_browser_from_the_redirect_file_gets_a_refreshing_page_not_a_redirect(app, guard):
    c = app.test_client()
    token = guard.launch_token("setup")
    landed = c.get(f"/launch/{token}", headers={"Sec-Fetch-Site": "cross-site"})
    assert landed.status_code == 200 and b'content="0;url=/setup"' in landed.data
    assert landed.headers["Referrer-Policy"] == "no-referrer"
    assert c.get("/setup", headers={"Sec-Fetch-Site": "same-origin"}).status_code == 200
    assert c.get("/setup", headers={"Sec-Fetch-Site": "same-site"}).status_code == 403


def test_the_api_and_the_settings_pages_are_one_server(service, start_runtime) -> None:
    """One port (issue 21): endpoint.json names the server the settings window uses, and
    its guard takes the bearer token on any route, or a window's cookie; nothing else."""
    runtime = start_runtime(service, notifications=False, scheduler=False, api=True)
    endpoint = json.loads(service.paths.endpoint.read_text())
    assert runtime.settings_url("").startswith(f"http://127.0.0.1:{endpoint['port']}/launch/")
    base = f"http://127.0.0.1:{endpoint['port']}"

    def get(path: str, token: str | None) -> int:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        try:
            with urllib.request.urlopen(
                urllib.request.Request(base + path, headers=headers), timeout=10
            ) as answer:
                return answer.status
        except urllib.error.HTTPError as refused:
            return refused.code

    token = runtime.api_token
    assert get("/api/status", token) == 200
    assert get("/api/dashboard", token) == 200  # a settings page's JSON route
    assert get("/api/status", None) == 401
    assert get("/api/status", token + "x") == 401
    runtime.close()
    assert not service.paths.endpoint.exists()
