"""The `rltray` command run in process against a real data folder."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest
from rltray.app.cli import main
from rltray.app.errors import ExitCode


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), env=dict(os.environ), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def spool_turn(
    home: Path, turn: str, prompt: str, response: str, agent: str = "claude-code"
) -> None:
    """Drop a hook record exactly as the hook program would leave it."""
    incoming = home / "spool" / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    record = {
        "v": 1,
        "kind": "turn",
        "agent": agent,
        "session": "s1",
        "turn": turn,
        "prompt": prompt,
        "response": response,
        "context": [],
        "cwd": "/tmp",
        "model": None,
        "captured_at": "2026-11-22T10:00:00Z",
        "event": "stop",
    }
    name = f"{time.time_ns():020d}-{os.getpid()}-{turn[:8]:>8}.json"
    (incoming / name).write_text(json.dumps(record))


@pytest.fixture
def user_home() -> Path:
    return Path(os.environ["HOME"])


def test_status_json_on_an_empty_folder(rltray_home: Path) -> None:
    code, out, _ = cli("status", "--json")
    assert code == ExitCode.OK
    data = json.loads(out)
    assert data["turns"] == 0 and data["pending_spool"] == 0
    assert data["data_folder"] == str(rltray_home)


def test_good_rates_the_newest_unrated_turn_and_undo_withdraws_it(rltray_home: Path) -> None:
    spool_turn(rltray_home, "t1", "first prompt", "first answer")
    spool_turn(rltray_home, "t2", "second prompt", "second answer")
    code, out, err = cli("good", "--comment", "nice")
    assert code == ExitCode.OK, err
    assert "second prompt" in out
    code, out, _ = cli("bad")
    assert code == ExitCode.OK and "first prompt" in out
    status = json.loads(cli("status", "--json")[1])
    assert (status["good"], status["bad"], status["unrated"]) == (1, 1, 0)

    code, out, _ = cli("undo")
    assert code == ExitCode.OK and "first prompt" in out
    status = json.loads(cli("status", "--json")[1])
    assert (status["good"], status["bad"], status["unrated"]) == (1, 0, 1)


def test_rating_with_nothing_captured_is_one_clear_sentence() -> None:
    code, out, err = cli("good")
    assert code == ExitCode.NOTHING_TO_DO
    assert "no unrated turn" in err
    assert "Traceback" not in err and out == ""


def test_undo_with_nothing_rated() -> None:
    code, _, err = cli("undo")
    assert code == ExitCode.NOTHING_TO_DO and "no rating to undo" in err


def test_turns_and_export(rltray_home: Path, tmp_path: Path) -> None:
    spool_turn(rltray_home, "t1", "p1", "r1")
    spool_turn(rltray_home, "t2", "p2", "r2")
    cli("good")
    code, out, _ = cli("turns", "--json", "--limit", "1")
    assert code == ExitCode.OK
    (row,) = json.loads(out)
    assert row["prompt"] == "p2" and row["rating"]["value"] == 1

    target = tmp_path / "export.jsonl"
    code, _, err = cli("export", "-o", str(target))
    assert code == ExitCode.OK, err
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert {r["prompt"] for r in rows} == {"p1", "p2"}
    assert oct(target.stat().st_mode & 0o777) == oct(0o600)


def test_bad_arguments_exit_with_usage_code() -> None:
    code, _, _ = cli("turns", "--limit", "zero")
    assert code == ExitCode.USAGE


def test_serve_once_ingests_and_releases_the_lock(rltray_home: Path) -> None:
    spool_turn(rltray_home, "t1", "p1", "r1")
    code, _, err = cli("serve", "--once")
    assert code == ExitCode.OK, err
    assert json.loads(cli("status", "--json")[1])["turns"] == 1
    assert cli("serve", "--once")[0] == ExitCode.OK  # lock was released


def test_serve_refuses_a_second_instance(rltray_home: Path) -> None:
    from filelock import FileLock

    rltray_home.mkdir(parents=True, exist_ok=True)
    with FileLock(str(rltray_home / "rltray.lock")):
        code, _, err = cli("serve", "--once")
    assert code == ExitCode.ALREADY_RUNNING and "already running" in err


def test_doctor_reports_every_check_and_how_to_install_hooks(user_home: Path) -> None:
    (user_home / ".claude").mkdir()  # Claude Code is present, hooks are not installed
    code, out, err = cli("doctor")
    for name in ("python", "database", "hook records", "settings", "keyring", "Claude Code"):
        assert name in out, (name, out)
    assert "rltray hooks install --agent claude-code" in out
    assert code == ExitCode.OK, err  # warnings only: capture can be set up


def test_doctor_fails_on_a_broken_settings_file(rltray_home: Path) -> None:
    rltray_home.mkdir(parents=True, exist_ok=True)
    (rltray_home / "config.toml").write_text("[training\npreset = ")
    code, out, _ = cli("doctor")
    assert code == ExitCode.NOT_AVAILABLE
    assert "config.toml" in out


def test_terminal_times_are_the_local_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    from rltray.app.service import local_time

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        assert local_time("2026-11-23T04:45:54.262831+00:00") == "2026-11-23 05:45"
        assert local_time(None) == "—"
        assert local_time("not a time") == "not a time"  # shown as stored, never a crash
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
