"""Spool ingest: validation, scrubbing, dedupe, exact command targets, rejects with reasons.

Records come from the real hook program (a subprocess, as agents run it) where
the pipeline matters, and are written by hand where a malformed file is the point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rltray.app import spool
from rltray.app.hooks import capture
from rltray.app.paths import Paths
from rltray.app.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GHP = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def hook(home: Path, event: str, payload: dict[str, Any]) -> str:
    argv = capture.build_command(event, home, python=sys.executable)
    stdin = json.dumps(payload).encode()
    if event == "codex-notify":
        argv.append(stdin.decode())
        stdin = b""
    result = subprocess.run(argv, input=stdin, capture_output=True, timeout=30)
    assert result.returncode == 0 and result.stderr == b""
    return result.stdout.decode()


def put(paths: Paths, name: str, data: bytes | dict[str, Any]) -> Path:
    paths.spool_incoming.mkdir(parents=True, exist_ok=True)
    path = paths.spool_incoming / name
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return path


def turn_record(**fields: Any) -> dict[str, Any]:
    rec = {
        "v": 1,
        "kind": "turn",
        "agent": "codex",
        "session": "s",
        "turn": "1",
        "prompt": "p",
        "response": "r",
        "context": [],
        "cwd": None,
        "model": None,
        "captured_at": "2026-01-02T03:04:05Z",
        "event": "stop",
        "transcript": None,
    }
    rec.update(fields)
    return rec


def left(folder: Path) -> list[str]:
    return sorted(os.listdir(folder)) if folder.exists() else []


# -- validate ---------------------------------------------------------------------------


def test_validate_normalises_and_drops_unknown_fields() -> None:
    rec = spool.validate(
        turn_record(
            extra={"x": 1},
            captured_at="2026-01-02T04:04:05+01:00",
            context=[{"role": "user", "content": "c", "name": "n"}],
        )
    )
    assert "extra" not in rec
    assert rec["captured_at"] == "2026-01-02T03:04:05.000000+00:00"
    assert rec["context"] == [{"role": "user", "content": "c"}]


def test_validate_caps_text() -> None:
    rec = spool.validate(
        turn_record(
            response="r" * 300_000, context=[{"role": "user", "content": "c" * 30_000}] * 25
        )
    )
    assert len(rec["response"]) == 200_000
    assert len(rec["context"]) == 20 and len(rec["context"][0]["content"]) == 20_000


def test_validate_makes_lone_surrogates_storable() -> None:
    rec = spool.validate(turn_record(response="x\udfffy"))
    rec["response"].encode("utf-8")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"v": 2}, "version"),
        ({"v": True}, "version"),
        ({"kind": "other"}, "kind"),
        ({"agent": "Claude Code!"}, "agent"),
        ({"session": ""}, "session"),
        ({"turn": 7}, "turn"),
        ({"response": "   "}, "response"),
        ({"prompt": None}, "prompt"),
        ({"context": "nope"}, "context"),
        ({"context": [{"role": "tool", "content": "x"}]}, "role"),
        ({"captured_at": "yesterday"}, "captured_at"),
        ({"cwd": 5}, "cwd"),
    ],
)
def test_validate_rejects_with_a_reason(change: dict[str, Any], reason: str) -> None:
    with pytest.raises(spool.SpoolError) as err:
        spool.validate(turn_record(**change))
    assert reason in err.value.reason


def test_validate_commands() -> None:
    ok = {
        "v": 1,
        "kind": "command",
        "agent": "claude-code",
        "session": "s",
        "command": "good",
        "target_turn": "t",
        "comment": None,
        "captured_at": "2026-01-01T00:00:00Z",
    }
    assert spool.validate(ok)["command"] == "good"
    with pytest.raises(spool.SpoolError, match="command"):
        spool.validate({**ok, "command": "train"})
    with pytest.raises(spool.SpoolError):
        spool.validate([ok])


# -- ingest ----------------------------------------------------------------------------------


def test_hook_records_wait_for_the_tray_then_land_in_the_db(paths: Paths, store: Store) -> None:
    home = paths.home
    hook(home, "claude-prompt", {"session_id": "s", "prompt": f"my token is {GHP}, fix auth"})
    hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "Fixed auth."})
    hook(home, "codex-notify", json.loads((FIXTURES / "codex" / "notify.json").read_text()))
    assert len(left(paths.spool_incoming)) == 2  # the tray is absent: records wait
    report = spool.ingest(paths, store)
    assert (report.turns, report.duplicates, report.rejected) == (2, 0, 0), report.messages
    assert left(paths.spool_incoming) == []
    claude, codex = store.list_turns()[::-1]
    assert claude.prompt == "my token is [REDACTED:github-token], fix auth"
    assert claude.response == "Fixed auth."
    assert codex.source_key == "codex:019a4e2c-7b1d-7f00-9c3e-5d2a1b0c9e8f:12"
    assert codex.context == [{"role": "user", "content": "the tests in api/ fail"}]


def test_notify_and_stop_become_one_turn_with_the_richer_fields(paths: Paths, store: Store) -> None:
    home = paths.home
    hook(home, "codex-prompt", json.loads((FIXTURES / "codex" / "prompt.json").read_text()))
    hook(home, "codex-notify", json.loads((FIXTURES / "codex" / "notify.json").read_text()))
    hook(home, "codex-stop", json.loads((FIXTURES / "codex" / "stop.json").read_text()))
    report = spool.ingest(paths, store)
    assert (report.turns, report.duplicates) == (1, 1)
    (turn,) = store.list_turns()
    assert turn.model == "gpt-5-codex"  # from Stop
    assert turn.context == [{"role": "user", "content": "the tests in api/ fail"}]  # from notify


def test_commands_rate_the_exact_target_turn(paths: Paths, store: Store) -> None:
    home, s = paths.home, {"session_id": "s"}
    hook(home, "claude-prompt", {**s, "prompt": "q1"})
    hook(home, "claude-stop", {**s, "last_assistant_message": "a1"})
    hook(home, "claude-prompt", {**s, "prompt": "/rl good"})
    spool.ingest(paths, store)
    hook(home, "claude-prompt", {**s, "prompt": "q2"})
    hook(home, "claude-stop", {**s, "last_assistant_message": "a2"})
    hook(home, "claude-prompt", {**s, "prompt": "/rl bad wrong file"})
    # Another session's newer turn must not steal the rating.
    hook(home, "claude-prompt", {"session_id": "other", "prompt": "q3"})
    hook(home, "claude-stop", {"session_id": "other", "last_assistant_message": "a3"})
    report = spool.ingest(paths, store)
    assert report.commands == 1 and report.rejected == 0, report.messages
    ratings = {t.response: t.rating for t in store.list_turns()}
    assert ratings["a1"] is not None and ratings["a1"].value == 1
    assert ratings["a1"].source == "agent"
    assert ratings["a2"] is not None and (ratings["a2"].value, ratings["a2"].comment) == (
        -1,
        "wrong file",
    )
    assert ratings["a3"] is None
    hook(home, "claude-prompt", {**s, "prompt": "/rl undo"})
    spool.ingest(paths, store)
    ratings = {t.response: t.rating for t in store.list_turns()}
    assert ratings["a2"] is None and ratings["a1"] is not None  # undo hit the last rated turn


def test_a_turn_whose_prompt_is_an_rl_command_is_never_stored(paths: Paths, store: Store) -> None:
    """Issue 19: with Codex's hooks untrusted, `/rl bad` reached the model and an older hook
    spooled its answer as a turn; ingest must not store it to train on (and says so)."""
    put(paths, "0001.json", turn_record(turn="1", prompt="fix the bug", response="fixed"))
    put(paths, "0002.json", turn_record(turn="2", prompt=" /rl bad", response="ok, noted"))
    put(paths, "0003.json", turn_record(turn="3", prompt="$rl good", response="ok"))
    report = spool.ingest(paths, store)
    assert [t.prompt for t in store.list_turns()] == ["fix the bug"]
    assert report.turns == 1 and report.rejected == 0
    assert sum("is an rltray command" in m for m in report.messages) == 2
    assert left(paths.spool_incoming) == []


def test_rl_typed_in_codex_without_trusted_hooks_rates_the_turn_before(
    paths: Paths, store: Store
) -> None:
    """Only notify sees `$rl bad` when Codex's hooks are untrusted: the answer before it is
    rated, no turn is stored for the rating itself, and ingest says what happened."""
    home = paths.home
    base = {"type": "agent-turn-complete", "thread-id": "th", "cwd": "/w"}
    hook(home, "codex-notify", {**base, "turn-id": "t1", "input-messages": ["fix it"],
                                "last-assistant-message": "fixed"})
    hook(home, "codex-notify", {**base, "turn-id": "t2", "input-messages": ["$rl bad slow"],
                                "last-assistant-message": "rltray noted your rating"})
    report = spool.ingest(paths, store)
    (turn,) = store.list_turns()
    assert turn.response == "fixed" and turn.rating is not None
    assert (turn.rating.value, turn.rating.comment) == (-1, "slow")
    assert any("typed in Codex (seen by notify)" in m for m in report.messages)


def test_status_and_targetless_commands_are_consumed(paths: Paths, store: Store) -> None:
    hook(paths.home, "claude-prompt", {"session_id": "s", "prompt": "/rl status"})
    hook(paths.home, "claude-prompt", {"session_id": "s", "prompt": "/rl good"})
    report = spool.ingest(paths, store)
    assert (report.commands, report.rejected) == (2, 0)
    assert left(paths.spool_incoming) == []


def test_a_command_for_a_turn_never_stored_is_rejected(paths: Paths, store: Store) -> None:
    put(
        paths,
        "00000000000000000001-1-aaaaaaaa.json",
        {
            "v": 1,
            "kind": "command",
            "agent": "codex",
            "session": "s",
            "command": "good",
            "target_turn": "ghost",
            "comment": None,
            "captured_at": "2026-01-01T00:00:00Z",
        },
    )
    report = spool.ingest(paths, store)
    assert report.rejected == 1
    reason = (paths.spool_rejected / "00000000000000000001-1-aaaaaaaa.json.reason.txt").read_text()
    assert "ghost" in reason


def test_invalid_records_move_to_rejected_with_a_reason(paths: Paths, store: Store) -> None:
    put(paths, "00000000000000000001-1-aaaaaaaa.json", b"{not json")
    put(paths, "00000000000000000002-1-bbbbbbbb.json", b"\xff\xfe")
    put(paths, "00000000000000000003-1-cccccccc.json", turn_record(v=9))
    put(paths, "00000000000000000004-1-dddddddd.json", turn_record(turn="ok"))
    put(paths, "notes.txt", b"hello")
    report = spool.ingest(paths, store)
    assert (report.turns, report.rejected) == (1, 4)
    assert left(paths.spool_incoming) == []
    rejected = left(paths.spool_rejected)
    assert "notes.txt" in rejected and "notes.txt.reason.txt" in rejected
    assert (
        "version"
        in (paths.spool_rejected / "00000000000000000003-1-cccccccc.json.reason.txt").read_text()
    )
    assert len(report.messages) == 4
    if os.name == "posix":
        assert (paths.spool_rejected / "notes.txt.reason.txt").stat().st_mode & 0o777 == 0o600
    assert any(e["kind"] == "spool" for e in store.events())


@pytest.mark.skipif(os.name != "posix", reason="POSIX symlinks")
def test_symlinked_records_are_rejected_not_followed(
    paths: Paths, store: Store, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(turn_record()))
    paths.spool_incoming.mkdir(parents=True, exist_ok=True)
    (paths.spool_incoming / "00000000000000000001-1-aaaaaaaa.json").symlink_to(target)
    report = spool.ingest(paths, store)
    assert (report.turns, report.rejected) == (0, 1)
    assert target.exists() and store.list_turns() == []
    assert (paths.spool_rejected / "00000000000000000001-1-aaaaaaaa.json").is_symlink()


@pytest.mark.skipif(os.name != "posix", reason="POSIX symlinks")
def test_a_symlinked_incoming_folder_is_not_read(
    paths: Paths, store: Store, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "00000000000000000001-1-aaaaaaaa.json").write_text(json.dumps(turn_record()))
    os.rmdir(paths.spool_incoming)
    paths.spool_incoming.symlink_to(elsewhere)
    report = spool.ingest(paths, store)
    assert report.turns == 0 and "not a plain folder" in report.messages[0]
    assert left(elsewhere) == ["00000000000000000001-1-aaaaaaaa.json"]


def test_temp_files_are_left_alone_until_stale(paths: Paths, store: Store) -> None:
    fresh = put(paths, ".00000000000000000001-1-aaaaaaaa.json.1.abcd.tmp", b"{")
    stale = put(paths, ".00000000000000000002-1-bbbbbbbb.json.1.abcd.tmp", b"{")
    old = time.time() - 2 * spool.STALE_TEMP_S
    os.utime(stale, (old, old))
    report = spool.ingest(paths, store)
    assert fresh.exists() and not stale.exists() and report.rejected == 1


def test_a_database_error_keeps_the_record_for_the_next_pass(paths: Paths) -> None:
    put(paths, "00000000000000000001-1-aaaaaaaa.json", turn_record(turn="1"))
    put(paths, "00000000000000000002-1-bbbbbbbb.json", turn_record(turn="2"))
    closed = Store.open(paths)
    closed.close()
    report = spool.ingest(paths, closed)
    assert report.turns == 0 and "stays in the spool" in report.messages[0]
    assert len(left(paths.spool_incoming)) == 2 and left(paths.spool_rejected) == []
    with Store.open(paths) as store:
        assert spool.ingest(paths, store).turns == 2


def test_ingest_without_a_spool_folder(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "fresh")
    with Store(tmp_path / "db.sqlite") as store:
        assert spool.ingest(paths, store) == spool.IngestReport()


# -- replays, races and bad records (defects issue) ------------------------------------


def command_record(command: str, target: str, at: str, session: str = "s") -> dict[str, Any]:
    return {
        "v": 1,
        "kind": "command",
        "agent": "codex",
        "session": session,
        "command": command,
        "target_turn": target,
        "comment": None,
        "captured_at": at,
    }


def active_values(store: Store) -> dict[str, int | None]:
    return {t.turn: (t.rating.value if t.rating else None) for t in store.list_turns(limit=10**6)}


def test_a_replayed_command_record_changes_nothing(paths: Paths, store: Store) -> None:
    """Bug pinned: a kill between commit and unlink replayed `/rl good` (and `/rl undo`)."""
    put(paths, "00000000000000000001-1-aaaaaaaa.json", turn_record(turn="t1"))
    good = command_record("good", "t1", "2026-01-02T03:05:00Z")
    undo = command_record("undo", "t1", "2026-01-02T03:06:00Z")
    put(paths, "00000000000000000002-1-bbbbbbbb.json", good)
    put(paths, "00000000000000000003-1-cccccccc.json", undo)
    put(paths, "00000000000000000004-1-dddddddd.json", good | {"captured_at": "2026-01-02T03:07Z"})
    spool.ingest(paths, store)
    (turn,) = store.list_turns()
    history = store.rating_history(turn.id)
    assert [r.active for r in history] == [False, True]
    # The files come back, as after a SIGKILL between COMMIT and unlink.
    put(paths, "00000000000000000002-1-bbbbbbbb.json", good)
    put(paths, "00000000000000000003-1-cccccccc.json", undo)
    report = spool.ingest(paths, store)
    assert (report.commands, report.duplicates) == (0, 2)
    assert store.rating_history(turn.id) == history
    assert left(paths.spool_incoming) == []


def test_two_ingesters_at_once_apply_each_command_once_in_order(paths: Paths) -> None:
    """Bug pinned: the service and a CLI command ingesting together double-applied commands
    and left turns rated good although the user's last word was bad."""
    import threading

    sessions = 150
    for i in range(sessions):
        base = 10_000_000 + i * 10
        put(paths, f"{base:020d}-1-aaaaaaaa.json", turn_record(session=f"s{i}", turn="t"))
        good = command_record("good", "t", "2026-01-02T03:05:00Z", session=f"s{i}")
        put(paths, f"{base + 1:020d}-1-bbbbbbbb.json", good)
        bad = command_record("bad", "t", "2026-01-02T03:06:00Z", session=f"s{i}")
        put(paths, f"{base + 2:020d}-1-cccccccc.json", bad)
    Store.open(paths).close()  # schema first, so both ingesters only write records
    start = threading.Barrier(2)

    def ingester() -> None:
        with Store.open(paths) as own:
            start.wait()
            for _ in range(20):
                spool.ingest(paths, own)

    threads = [threading.Thread(target=ingester) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with Store.open(paths) as store:
        assert set(active_values(store).values()) == {-1}
        (rows,) = store.conn.execute("SELECT COUNT(*) FROM ratings").fetchone()
        assert rows == 2 * sessions
    assert left(paths.spool_incoming) == [] and left(paths.spool_rejected) == []


def test_one_record_that_crashes_ingest_is_rejected_and_the_rest_go_on(
    paths: Paths, store: Store
) -> None:
    """Bug pinned: captured_at 0001-01-01T00:00:00+01:00 raised OverflowError on every pass
    and every later record waited forever."""
    put(paths, "00000000000000000001-1-aaaaaaaa.json",
        turn_record(turn="old", captured_at="0001-01-01T00:00:00+01:00"))
    put(paths, "00000000000000000002-1-bbbbbbbb.json", turn_record(turn="next"))
    report = spool.ingest(paths, store)
    assert (report.turns, report.rejected) == (1, 1)
    reason = (paths.spool_rejected / "00000000000000000001-1-aaaaaaaa.json.reason.txt").read_text()
    assert "captured_at" in reason
    assert [t.turn for t in store.list_turns()] == ["next"]


def test_any_unexpected_error_in_one_record_rejects_only_that_record(
    paths: Paths, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug we have not met yet in one record must not stop capture for every later one."""
    real = spool.scrub_record

    def flaky(rec: dict[str, Any]) -> dict[str, Any]:
        if rec.get("turn") == "boom":
            raise KeyError("something nobody foresaw")
        return real(rec)

    monkeypatch.setattr(spool, "scrub_record", flaky)
    put(paths, "00000000000000000001-1-aaaaaaaa.json", turn_record(turn="boom"))
    put(paths, "00000000000000000002-1-bbbbbbbb.json", turn_record(turn="next"))
    report = spool.ingest(paths, store)
    assert (report.turns, report.rejected) == (1, 1)
    reason = (paths.spool_rejected / "00000000000000000001-1-aaaaaaaa.json.reason.txt").read_text()
    assert "KeyError" in reason and "nobody foresaw" in reason


def test_rejected_records_are_kept_scrubbed(paths: Paths, store: Store) -> None:
    """Bug pinned: unscrubbed text stayed in spool/rejected."""
    put(paths, "00000000000000000001-1-aaaaaaaa.json", turn_record(response="", prompt=GHP))
    report = spool.ingest(paths, store)
    assert report.rejected == 1
    kept = (paths.spool_rejected / "00000000000000000001-1-aaaaaaaa.json").read_text()
    assert GHP not in kept and "REDACTED" in kept


def test_many_records_are_stored_in_batches_with_progress(paths: Paths, store: Store) -> None:
    total = spool.BATCH * 2 + 7
    for i in range(total):
        put(paths, f"{i + 1:020d}-1-aaaaaaaa.json", turn_record(turn=str(i)))
    seen: list[tuple[int, int]] = []
    report = spool.ingest(paths, store, progress=lambda done, n: seen.append((done, n)))
    assert report.turns == total and left(paths.spool_incoming) == []
    assert seen == [(spool.BATCH, total), (2 * spool.BATCH, total), (total, total)]


def test_rl_lesson_adds_the_users_words_for_the_sessions_project(
    paths: Paths, store: Store
) -> None:
    """Issue 24: `/rl lesson <text>` is a lesson for the folder it was typed in (``cwd``); a
    record from an older hook, without one, takes the folder of the session's turns."""
    put(paths, "00000000000000000001-1-aaaaaaaa.json", turn_record(turn="t1", cwd="/work/shop"))
    put(paths, "00000000000000000002-1-aaaaaaaa.json",
        turn_record(turn="t2", session="s2", cwd="/work/blog"))  # fmt: skip
    lesson = command_record("lesson", "t1", "2026-01-02T03:05:00Z")
    put(paths, "00000000000000000003-1-bbbbbbbb.json", lesson | {"comment": "Run one test"})
    no_target = lesson | {"target_turn": None, "session": "s2", "comment": "Be brief"}
    put(paths, "00000000000000000004-1-cccccccc.json", no_target)  # the session's folder
    elsewhere = lesson | {"target_turn": None, "session": "new", "comment": "No emoji"}
    put(paths, "00000000000000000005-1-dddddddd.json", elsewhere)  # no folder: every project
    put(paths, "00000000000000000006-1-eeeeeeee.json", lesson | {"comment": "  "})
    report = spool.ingest(paths, store)
    assert (report.commands, report.rejected) == (4, 1), report.messages
    assert "needs the lesson's words" in report.messages[0]
    added = [(r.text, r.project, r.user_added) for r in store.lesson_rows()]
    assert added == [("Run one test", "/work/shop", True), ("Be brief", "/work/blog", True),
                     ("No emoji", None, True)]  # fmt: skip
    put(paths, "00000000000000000003-1-bbbbbbbb.json", lesson | {"comment": "Run one test"})
    assert spool.ingest(paths, store).duplicates == 1  # a replayed record adds nothing
    assert len(store.lesson_rows()) == 3


def test_rl_lesson_as_a_sessions_first_prompt_is_the_folders_not_every_projects(
    paths: Paths, store: Store
) -> None:
    """Regression (review 3, finding 1): typed before the session had a turn (its first
    prompt, or after /clear), `/rl lesson` found no folder and became a pinned lesson for
    every project and agent. The hook records the folder; it wins over the turns'."""
    put(paths, "00000000000000000001-1-aaaaaaaa.json", turn_record(turn="t1", cwd="/work/shop"))
    first = command_record("lesson", "none", "2026-01-02T03:05:00Z") | {
        "target_turn": None, "session": "fresh", "comment": "Never push to main",
        "cwd": "/work/shop"}
    put(paths, "00000000000000000002-1-bbbbbbbb.json", first)
    moved = command_record("lesson", "t1", "2026-01-02T03:06:00Z") | {
        "comment": "Use the blog's theme", "cwd": "/work/blog"}  # cd'd since the last turn
    put(paths, "00000000000000000003-1-cccccccc.json", moved)
    report = spool.ingest(paths, store)
    assert (report.commands, report.rejected) == (2, 0), report.messages
    assert [(r.text, r.project) for r in store.lesson_rows()] == [
        ("Never push to main", "/work/shop"), ("Use the blog's theme", "/work/blog")]


def test_rl_lesson_with_a_relative_folder_is_not_the_trays_folders(
    paths: Paths, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 4, item 10): a record's ``cwd`` was taken as it was, and a lesson's
    project is keyed by the folder's absolute path (``lessonfiles.key``): "shop" or "."
    became a folder of whatever directory the tray ran in, and the lesson was told to a
    project there. Only an absolute folder counts; otherwise as for a record without one."""
    monkeypatch.chdir(tmp_path)
    put(paths, "00000000000000000001-1-aaaaaaaa.json", turn_record(turn="t1", cwd="/work/shop"))
    relative = command_record("lesson", "t1", "2026-01-02T03:05:00Z") | {
        "comment": "Run one test", "cwd": "shop"}
    put(paths, "00000000000000000002-1-bbbbbbbb.json", relative)
    dot = command_record("lesson", "none", "2026-01-02T03:06:00Z") | {
        "target_turn": None, "session": "fresh", "comment": "Be brief", "cwd": "."}
    put(paths, "00000000000000000003-1-cccccccc.json", dot)
    report = spool.ingest(paths, store)
    assert (report.commands, report.rejected) == (2, 0), report.messages
    assert [(r.text, r.project) for r in store.lesson_rows()] == [
        ("Run one test", "/work/shop"), ("Be brief", None)]


def test_message_ids_from_before_chats_were_kept_still_place_a_reaction(paths: Paths) -> None:
    """Regression (review 2, bug 7): ``turn_messages`` was keyed by channel and message id, so
    the second chat's message 42 was dropped as the first's. m013 adds the chat to the key;
    a row from before it (chat not known) keeps placing a reaction, and a message of the
    same id in a known chat no longer collides with it."""
    import sqlite3

    from rltray.app.store import migrations

    paths.home.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(paths.db, isolation_level=None)
    names = [fn.__name__ for fn in migrations.MIGRATIONS]
    migrations.migrate(conn, migrations.MIGRATIONS[: names.index("m013_turn_message_chats")])
    conn.execute("INSERT INTO turns (source_key, agent, session, turn, captured_at, ingested_at)"
                 " VALUES ('openclaw:s:run-1', 'openclaw', 's', 'run-1', '2026-01-01T00:00:00Z',"
                 " '2026-01-01T00:00:00Z')")
    conn.execute("INSERT INTO turn_messages (agent, channel, message_id, turn_id, sent_at)"
                 " VALUES ('openclaw', 'telegram', '42', 1, '2026-01-01T00:00:00Z')")
    conn.close()
    for i, name in enumerate(("run-2", "run-3")):
        put(paths, f"0{i}.json", turn_record(agent="openclaw", session="s", turn=name,
                                              prompt=f"q{name}", response=f"a{name}"))
    put(paths, "02.json", {"v": 1, "kind": "message", "agent": "openclaw", "session": "s",
                           "turn": "run-2", "channel": "telegram:1001", "message_id": "42",
                           "captured_at": "2026-01-02T03:04:06Z"})
    put(paths, "03.json", {"v": 1, "kind": "message", "agent": "openclaw", "session": "s",
                           "turn": "run-3", "channel": "telegram:2002", "message_id": "42",
                           "captured_at": "2026-01-02T03:04:07Z"})
    with Store.open(paths) as store:
        report = spool.ingest(paths, store)
        assert report.rejected == 0 and report.turns == 2
        old, two, three = (store.turn_by_source_key(f"openclaw:s:{t}").id  # type: ignore[union-attr]
                           for t in ("run-1", "run-2", "run-3"))
        assert store.turn_by_message("openclaw", "telegram:1001", "42") == two
        assert store.turn_by_message("openclaw", "telegram:2002", "42") == three
        assert store.turn_by_message("openclaw", "telegram:3003", "42") == old  # chat not known
        assert store.turn_by_message("openclaw", "telegram", "42") == old
        assert store.messages_of(old) == [("telegram", "42")]
