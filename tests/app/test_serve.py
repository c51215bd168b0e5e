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
            endpoint = json.loads((home / "endpoint.json").read_text())
        except (OSError, ValueError):
            endpoint = {}
        if endpoint.get("pid") == proc.pid:  # not a file left by a killed one
            return endpoint
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


def test_serve_trains_on_request_and_a_sigkilled_service_is_reconciled_at_next_start(
    rltray_home: Path, serve_env: dict[str, str], tmp_path: Path
) -> None:
    """The tray/service killed with SIGKILL mid-run leaves no run "running" forever."""
    from rltray.app import config
    from rltray.app.paths import Paths
    from rltray.app.store import Store

    from tests.app.test_training import FAKE_TRAINER

    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_TRAINER.format(python=sys.executable), encoding="utf-8")
    fake.chmod(0o755)
    paths = Paths.from_env()
    paths.ensure()
    config.set_value(paths, "training.base_model", "/models/tiny")
    config.set_value(paths, "training.python", str(fake))
    for i in range(12):
        spool_turn(rltray_home, f"t{i}", f"prompt {i}", f"answer {i}")
    env = {**serve_env, "FAKE_MODE": "slow"}
    proc = start_serve(env)
    try:
        endpoint = wait_for_endpoint(rltray_home, proc)
        port, token = endpoint["port"], endpoint.get("token")
        deadline = time.monotonic() + 10
        while call(port, "/api/status", token)[1]["turns"] < 12:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        with Store(paths.db) as store:
            for turn in store.list_turns(limit=12):
                store.rate(turn.id, 1 if turn.id % 2 else -1, "cli")
        code, started = call(port, "/api/train", token, method="POST")
        assert code == 200, started
        deadline = time.monotonic() + 20
        while not (call(port, "/api/status", token)[1]["training"]["progress"] or {}).get("step"):
            assert time.monotonic() < deadline, "no training progress"
            time.sleep(0.05)
    finally:
        proc.kill()  # SIGKILL: no handler runs, the run stays "running" in the database
        proc.wait(30)
    with Store(paths.db) as store:
        assert store.get_run(started["run"]).status == "running"
    time.sleep(1)  # the fake trainer dies writing to the dead service's pipe, unsaved
    proc = start_serve({**serve_env, "FAKE_MODE": "done"})
    try:
        endpoint = wait_for_endpoint(rltray_home, proc)
        port, token = endpoint["port"], endpoint.get("token")
        (run,) = call(port, "/api/runs", token)[1]
        assert (run["id"], run["status"]) == (started["run"], "failed")
        assert run["adapter_version"] is None
        assert run["error"] == "the app stopped while this run was going"
        status = call(port, "/api/status", token)[1]
        assert status["untrained"] + status["held_out"] == 12  # nothing lost
        code, again = call(port, "/api/train", token, method="POST")
        assert code == 200, again
        deadline = time.monotonic() + 30
        while not call(port, "/api/versions", token)[1]:
            assert time.monotonic() < deadline, "the new run did not finish"
            time.sleep(0.1)
        versions = call(port, "/api/versions", token)[1]
        assert [(v["version"], v["active"]) for v in versions] == [(1, True)]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
