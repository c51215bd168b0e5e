"""A page on another port of 127.0.0.1 attacks the signed-in settings app in real Chromium.

Other ports of 127.0.0.1 are *same-site* to the settings app and cookies are not
port-scoped, so Chromium sends ``rltray_session`` along with an attacker page's
images, no-cors fetches and navigations (issue 18, 2). Before the fix one
``<img>`` made the service run ``training.python``; fifty would have started fifty
torch imports. Every such request must now be refused, and nothing may run.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rltray.app import config

from tests.app.test_cli import spool_turn
from tests.web.test_browser import _missing, page, server

__all__ = ["page", "server"]  # the fixtures, shared with test_browser.py

pytestmark = pytest.mark.skipif(_missing() is not None, reason=f"needs {_missing()}")

ATTACK = """<!doctype html><html><body><h1>a dev server</h1>
<img src="{base}/api/setup/backend">
<img src="{base}/api/setup/agents">
<img src="{base}/api/setup/models">
<script>
for (const path of ["/api/setup/backend", "/api/setup/agents", "/api/setup/models",
                    "/api/dashboard", "/ratings/export.jsonl"]) {{
  fetch("{base}" + path, {{mode: "no-cors", credentials: "include"}}).catch(() => null);
  fetch("{base}" + path, {{mode: "no-cors", method: "POST", credentials: "include"}})
    .catch(() => null);
}}
</script>
<form id="f" method="post" action="{base}/settings">
  <input name="training.preset" value="aggressive"></form>
</body></html>"""


@pytest.fixture
def attacker(server) -> Iterator[str]:
    """Another web server on 127.0.0.1 (a dev server, a notebook) serving the attack page."""
    html = ATTACK.format(base=server.base_url).encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *args: Any) -> None:
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{other.server_port}/"
    other.shutdown()
    other.server_close()


@pytest.mark.slow
def test_a_page_on_another_port_cannot_use_the_session(
    page, server, service, attacker, tmp_path: Path, rltray_home: Path
) -> None:
    ran = tmp_path / "ran.txt"
    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!/bin/sh\necho ran >> {ran}\necho '{{}}'\n")
    fake_python.chmod(0o755)
    config.set_value(service.paths, "training.python", str(fake_python))
    spool_turn(rltray_home, "waiting", "a question", "an answer")  # /api/setup/agents ingests

    page.goto(server.launch_url(""))  # the user is signed in; the cookie is in this browser
    page.wait_for_selector("h1")
    assert [c["name"] for c in page.context.cookies()] == ["rltray_session"]

    statuses: list[tuple[str, int]] = []
    page.on(
        "response",
        lambda r: statuses.append((r.url, r.status)) if r.url.startswith(server.base_url) else None,
    )
    page.goto(attacker)
    page.wait_for_timeout(1500)
    page.evaluate("document.getElementById('f').submit()")  # a cross-port form post
    page.wait_for_load_state()
    page.wait_for_timeout(500)

    assert not ran.exists(), "a page on another port made rltray run training.python"
    assert list((rltray_home / "spool" / "incoming").glob("*.json")), "it made rltray ingest"
    assert config.load_config(service.paths).training.preset == "balanced"
    # (the refusal page of the form post loads our own stylesheet and script: same-origin)
    asked = [(url, status) for url, status in statuses if "/static/" not in url]
    reached = {url.removeprefix(server.base_url) for url, _status in asked}
    assert reached >= {"/api/setup/backend", "/api/setup/agents", "/api/setup/models",
                       "/api/dashboard", "/ratings/export.jsonl", "/settings"}, reached  # fmt: skip
    assert {status for _url, status in asked} == {403}, [s for s in asked if s[1] != 403]


@pytest.mark.slow
def test_links_in_captured_answers_open_outside_the_window(page, server, service) -> None:
    turn_id, _ = service.store.add_turn({
        "agent": "codex", "session": "s", "turn": "t1", "prompt": "where?",
        "response": "See [the notebook](http://127.0.0.1:8888/tree) for details.",
        "captured_at": "2025-03-01T10:00:00Z",
    })  # fmt: skip
    page.goto(server.launch_url("ratings"))
    page.goto(f"{server.base_url}/ratings/turn/{turn_id}")
    link = page.locator("a[href='http://127.0.0.1:8888/tree']")
    assert link.get_attribute("target") == "_blank"
    assert set((link.get_attribute("rel") or "").split()) == {"noopener", "noreferrer"}
