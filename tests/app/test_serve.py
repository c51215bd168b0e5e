"""`rltray serve` as a user runs it: a real process, its local API, SIGTERM, a second instance."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.app.test_cli import spool_turn


def start_serve(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rltray.app.cli", "serve"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_endpoint(home: Path, proc: subprocess.Popen[str], timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited early: {proc.stderr.read()}")  # type: ignore[union-attr]
        try:
            return json.loads((home / "endpoint.json").read_text())
        except (OSError, ValueError):
            time.sleep(0.05)
    raise AssertionError("serve never wrote endpoint.json")


def call(
    port: int, path: str, token: str | None, method: str = "GET", host: str | None = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if host:
        headers["Host"] = host
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        method=method,
        headers=headers,
        data=b"{}" if method == "POST" else None,
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def serve_env(rltray_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)  # no desktop: notifications report, never block
    return env


def test_serve_ingests_answers_its_api_and_stops_on_sigterm(
    rltray_home: Path, serve_env: dict[str, str], memory_keyring: Any
) -> None:
    proc = start_serve(serve_env)
    try:
        endpoint = wait_for_endpoint(rltray_home, proc)
        assert endpoint["pid"] == proc.pid
        assert oct((rltray_home / "endpoint.json").stat().st_mode & 0o777) == oct(0o600)
        # The serving process has no in-memory keyring of ours: its token is in the 0600 file
        # only because no keyring exists there (said once in doctor).
        token = endpoint.get("token")
        assert token, "a keyring-less service must publish its token in endpoint.json"
        port = endpoint["port"]

        spool_turn(rltray_home, "t1", "served prompt", "served answer")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status = call(port, "/api/status", token)[1]
            if status["turns"] == 1:
                break
            time.sleep(0.1)
        assert status["turns"] == 1 and status["service_running"] is True
        assert status["training"]["automatic"] is True

        assert call(port, "/api/status", None)[0] == 401
        code, body = call(port, "/api/status", token, host="evil.example:80")
        assert code == 403 and body["error"]["code"] == "forbidden_host"
        code, body = call(port, "/api/nothing-here", token)
        assert code == 404 and set(body["error"]) == {"code", "message"}
        code, body = call(port, "/api/pause", token, method="POST")
        assert code == 200 and body == {"automatic": False}

        second = subprocess.run(
            [sys.executable, "-m", "rltray.app.cli", "serve"],
            env=serve_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 5 and "already running" in second.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "rltray stopped." in err
    assert not (rltray_home / "endpoint.json").exists()
