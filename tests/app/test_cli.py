"""The `rltray` command run in process against a real data folder."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from pathlib import Path

import pytest
from rltray.app.cli import main
from rltray.app.errors import ExitCode

from tests.support.spoolfiles import spool_turn as spool_record


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), env=dict(os.environ), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def spool_turn(
    home: Path, turn: str, prompt: str, response: str, agent: str = "claude-code"
) -> None:
    """Drop a hook record exactly as the hook program would leave it."""
    spool_record(home, turn, response, prompt=prompt, agent=agent, cwd="/tmp", model=None)


@pytest.fixture
def user_home() -> Path:
    return Path(os.environ["HOME"])


def test_status_json_on_an_empty_folder(rltray_home: Path) -> None:
    code, out, _ = cli("status", "--json")
    assert code == ExitCode.OK
    data = json.loads(out)
    assert data["turns"] == 0 and data["pending_spool"] == 0
    assert data["data_folder"] == str(rltray_home)


def counts() -> tuple[int, int, int]:
    status = json.loads(cli("status", "--json")[1])
    return status["good"], status["bad"], status["unrated"]


def test_good_rates_the_newest_turn_and_never_an_older_one(rltray_home: Path) -> None:
    """Bug pinned: after one rating, `rltray bad` silently rated an older (unrated) answer."""
    spool_turn(rltray_home, "t1", "first prompt", "first answer")
    spool_turn(rltray_home, "t2", "second prompt", "second answer")
    code, out, err = cli("good", "--comment", "nice")
    assert code == ExitCode.OK, err
    assert "second prompt" in out
    assert "(claude-code in /tmp)" in out  # the newest turn may be another project's: say whose
    code, out, err = cli("bad")
    assert code == ExitCode.NOTHING_TO_DO
    assert "already rated good" in err and "rltray bad --last" in err
    assert counts() == (1, 0, 1)
    code, out, _ = cli("good")  # the same word again: nothing to change, not an error
    assert code == ExitCode.OK and "Already rated" in out and counts() == (1, 0, 1)


def test_changing_ones_mind_with_last_or_by_turn_id(rltray_home: Path) -> None:
    spool_turn(rltray_home, "t1", "first prompt", "first answer")
    spool_turn(rltray_home, "t2", "second prompt", "second answer")
    cli("good")
    code, out, err = cli("bad", "--last", "-c", "broke the build")
    assert code == ExitCode.OK and "second prompt" in out, err
    assert counts() == (0, 1, 1)
    code, out, err = cli("rate", "1", "good")
    assert code == ExitCode.OK and "first prompt" in out, err
    assert counts() == (1, 1, 0)
    code, _, err = cli("rate", "99", "good")
    assert code == ExitCode.USAGE and "no turn 99" in err


def test_undo_withdraws_only_the_last_rating(rltray_home: Path) -> None:
    """A second undo must not reach back and withdraw an older, unrelated rating."""
    spool_turn(rltray_home, "t1", "first prompt", "first answer")
    cli("good")
    spool_turn(rltray_home, "t2", "second prompt", "second answer")
    cli("bad")
    code, out, _ = cli("undo")
    assert code == ExitCode.OK and "second prompt" in out and "bad" in out
    assert counts() == (1, 0, 1)
    code, _, err = cli("undo")
    assert code == ExitCode.NOTHING_TO_DO and "already withdrawn" in err
    assert counts() == (1, 0, 1)


def test_rating_with_nothing_captured_is_one_clear_sentence() -> None:
    code, out, err = cli("good")
    assert code == ExitCode.NOTHING_TO_DO
    assert "No turn has been captured yet" in err
    assert "Traceback" not in err and out == ""


def test_undo_with_nothing_rated() -> None:
    code, _, err = cli("undo")
    assert code == ExitCode.NOTHING_TO_DO and "no rating to undo" in err


MARKUP = ["[/api/orders]", "[red]x[/red]", "[link=https://e.com]click[/link]", "list[str]", "[/x]"]


@pytest.mark.parametrize("text", MARKUP)
def test_captured_markup_is_printed_as_text_and_never_crashes(
    rltray_home: Path, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug pinned: an answer containing `[/api/orders]` crashed good/bad/undo/turns with
    MarkupError after saving, and `list[str]` printed as `list`."""
    # wide enough that `turns` shows the whole prompt cell (at 80 columns the id, agent,
    # captured and rating columns come first and the preview is cut)
    monkeypatch.setenv("COLUMNS", "200")
    spool_turn(rltray_home, "t1", f"prompt {text}", f"answer {text}")
    for argv in (("turns",), ("good",), ("bad", "--last"), ("undo",)):
        code, out, err = cli(*argv)
        assert code == ExitCode.OK, (argv, err)
        assert text in out, (argv, out)
    assert counts() == (0, 0, 1)


def test_errors_print_user_text_verbatim(rltray_home: Path) -> None:
    target = "/nonexistent-dir/[red]x[/]"
    code, _, err = cli("export", "-o", target)
    assert code == ExitCode.USAGE and target in err and "Traceback" not in err


def test_turns_fit_a_readable_preview_in_80_columns(rltray_home: Path) -> None:
    """Bug pinned: at 80 columns previews were 13 characters wide."""
    spool_turn(rltray_home, "t1", "How do I reverse a linked list in place", "Walk the list once")
    code, out, _ = cli("turns")
    assert code == ExitCode.OK
    assert "How do I reverse a linked" in out
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.parametrize("width", [60, 80, 100, 140, 200])
def test_turns_show_every_id_and_rating_in_full_at_any_width(
    rltray_home: Path, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug pinned (issue 22): at 80-100 columns ids and ratings printed as "…", from 140
    the id, agent, captured and rating columns vanished; a newcomer rated the wrong turns."""
    long = "How do I reverse a linked list in place without any extra memory at all " * 3
    for n in range(1, 13):
        spool_turn(rltray_home, f"t{n}", f"{long} {n}", f"Walk the list once {long}",
                   agent="codex" if n % 2 else "claude-code")
    assert cli("good")[0] == ExitCode.OK  # turn 12
    assert cli("rate", "3", "bad")[0] == ExitCode.OK
    monkeypatch.setenv("COLUMNS", str(width))  # the CLI's Console(file=StringIO) is this wide
    code, out, _ = cli("turns")
    assert code == ExitCode.OK
    shown = {}
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit():
            ident, agent, day, time_, *rest = cells
            rating = rest[0] if rest and rest[0] in ("good", "bad") else ""
            shown[int(ident)] = (agent, f"{day} {time_}", rating)
    assert sorted(shown) == list(range(1, 13)), out
    for n, (agent, captured, rating) in shown.items():
        assert agent == ("codex" if n % 2 else "claude-code"), out
        assert "…" not in captured and len(captured) == 16, out
        assert rating == {12: "good", 3: "bad"}.get(n, ""), out
    assert max(len(line) for line in out.splitlines()) <= width
    assert "How do I" in out  # the text columns still show a readable start


def test_empty_turns_is_a_sentence_not_an_empty_table() -> None:
    code, out, _ = cli("turns")
    assert code == ExitCode.OK and "No turns captured yet" in out and "─" not in out


def test_debug_works_before_or_after_the_command_and_version_prints() -> None:
    """Bug pinned: `--debug` worked only before the subcommand; there was no --version."""
    from rltray import app
    from rltray.app.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["status", "--debug"]).debug is True
    assert parser.parse_args(["--debug", "status"]).debug is True
    assert parser.parse_args(["status"]).debug is False
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--version"]) == 0
    assert out.getvalue().strip() == f"rltray {app.__version__}"


def test_counts_are_singular_for_one(rltray_home: Path, tmp_path: Path) -> None:
    spool_turn(rltray_home, "t1", "p", "r")
    _, _, err = cli("export", "-o", str(tmp_path / "one.jsonl"))
    assert "Wrote 1 turn to" in err
    _, out, _ = cli("status")
    assert "1 turn," in out


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
    from rltray.app.words import local_time

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        assert local_time("2026-11-23T04:45:54.262831+00:00") == "2026-11-23 05:45"
        assert local_time(None) == "—"
        assert local_time("not a time") == "not a time"  # shown as stored, never a crash
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_hooks_install_that_installs_nothing_fails(user_home: Path) -> None:
    """Bug pinned: `hooks install` with no agent found (or a named one missing) exited 0."""
    env_path = {"PATH": "/nonexistent"}
    out, err = io.StringIO(), io.StringIO()
    code = main(["hooks", "install"], env={**os.environ, **env_path}, stdout=out, stderr=err)
    assert code == ExitCode.NOT_AVAILABLE and "nothing installed" in err.getvalue()
    (user_home / ".codex").mkdir()
    out, err = io.StringIO(), io.StringIO()
    argv = ["hooks", "install", "--agent", "claude-code"]
    code = main(argv, env={**os.environ, **env_path}, stdout=out, stderr=err)
    assert code == ExitCode.NOT_AVAILABLE and "Claude Code not found" in err.getvalue()
    assert not (user_home / ".claude").exists()


def test_doctor_does_not_claim_everything_works_without_hooks(
    user_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug pinned: doctor said "Everything … works" with no hooks installed, and its fix
    `pip install 'rltray[torch]'` lost `[torch]` to markup."""
    from rltray.app.cli import doctor

    missing = doctor.Check(
        "training: torch", doctor.WARN, "missing [red]peft", "pip install 'rltray[torch]'"
    )
    monkeypatch.setattr(doctor, "_training_backends", lambda: iter([missing]))
    code, out, _ = cli("doctor")
    assert code == ExitCode.OK
    assert "Everything" not in out and "no agent's hooks are installed" in out
    assert "pip install 'rltray[torch]'" in out and "missing [red]peft" in out


def test_the_service_lock_is_private(rltray_home: Path) -> None:
    """Bug pinned: rltray.lock was created 0644."""
    import threading

    from rltray.app import instance
    from rltray.app.cli import headless
    from rltray.app.cli.context import Context
    from rltray.app.paths import Paths

    stop = threading.Event()
    ctx = Context(dict(os.environ), io.StringIO(), io.StringIO())
    server = threading.Thread(target=headless.serve, args=(ctx,), kwargs={"stop": stop})
    server.start()
    try:
        paths = Paths.from_env()
        deadline = time.monotonic() + 10
        while not instance.service_running(paths) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert instance.service_running(paths)
        assert oct(paths.lock.stat().st_mode & 0o777) == oct(0o600)
        # While the service runs it owns the spool: the CLI waits for it, and the turn the
        # service stored is the one `good` rates.
        spool_turn(rltray_home, "t1", "served prompt", "served answer")
        code, out, err = cli("good")
        assert code == ExitCode.OK and "served prompt" in out, err
    finally:
        stop.set()
        server.join(timeout=10)
        ctx.close()
    assert not instance.service_running(Paths.from_env())


def test_rate_takes_a_score_from_1_to_5_and_turns_shows_it(rltray_home: Path) -> None:
    """Issue 22 item 12: graded ratings beside good / bad."""
    spool_turn(rltray_home, "t1", "first prompt", "first answer")
    code, out, err = cli("rate", "1", "4")
    assert code == ExitCode.OK and "Rated 4/5: turn 1" in out, err
    code, _, err = cli("rate", "1", "3")
    assert code != ExitCode.OK and "3 is the middle of the scale" in err
    code, _, err = cli("rate", "1", "7")
    assert code != ExitCode.OK and "a score from 1 to 5, not '7'" in err
    code, out, _ = cli("turns")
    assert code == ExitCode.OK and "4/5" in out
    code, out, _ = cli("export")
    assert json.loads(out.splitlines()[0])["rating"]["score"] == 4


def test_a_turns_folder_reads_with_the_home_folder_as_a_tilde(user_home: Path) -> None:
    from rltray.app.words import folder

    assert folder(str(user_home / "src" / "shop")) == "~/src/shop"
    assert folder(str(user_home)) == "~"
    assert folder(str(user_home) + "-other/x") == str(user_home) + "-other/x"
    assert folder("/srv/app") == "/srv/app" and folder(None) == ""
