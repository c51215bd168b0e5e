"""Deleting a turn is for real (issue 18, part 4): no copy of its text survives anywhere.

Each test attacks one place a deleted turn used to live on: the hook's session
state, the daily backups, the freed pages of the database file, and a later
`rltray doctor --repair` that read it back from a backup (and revived a rating
the user had withdrawn). Real hook processes, real SQLite files, the real CLI.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import dbdamage
import pytest
from rltray.app import cli, spool
from rltray.app.errors import ExitCode
from rltray.app.hooks import capture, capture_core, sessionstate
from rltray.app.paths import Paths
from rltray.app.store import Store, migrations
from rltray.app.store import backup as dbbackup
from rltray.app.store import salvage as dbsalvage

SESSION = "019a4e2c-7b1d-7f00-9c3e-5d2a1b0c9e8f"
PROMPT = "please rename fetch_user to get_user in the billing module"
ANSWER = "Renamed fetch_user to get_user in billing/api.py and billing/models.py."


def run_hook(home: Path, event: str, payload: dict) -> None:
    argv = capture.build_command(event, home, python=sys.executable)
    result = subprocess.run(
        argv, input=json.dumps(payload).encode(), capture_output=True, timeout=30
    )
    assert result.returncode == 0 and result.stderr == b"", result.stderr


def codex_turn(home: Path, session: str, turn: str, prompt: str, answer: str) -> None:
    """The Codex hooks exactly as Codex runs them: the prompt, then the Stop."""
    run_hook(home, "codex-prompt", {"session_id": session, "turn_id": turn, "prompt": prompt})
    run_hook(
        home,
        "codex-stop",
        {"session_id": session, "turn_id": turn, "last_assistant_message": answer},
    )


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def exported_keys() -> set[str]:
    code, out, err = run_cli("export")
    assert code == ExitCode.OK, err
    return {json.loads(line)["source_key"] for line in out.splitlines()}


@pytest.fixture(autouse=True)
def private_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook's fallback log goes to a private temp folder, never the real /tmp."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))


def test_the_state_file_name_is_the_hooks() -> None:
    """sessionstate and the hook must name a session's file alike, or cleanup misses it."""
    folder = Path("/x")
    for agent, event in (("codex", "codex-stop"), ("claude-code", "claude-stop")):
        hook = capture_core.Hook(str(folder), event)
        for session in (SESSION, "ünïcode-session", "a\udcffb"):
            assert sessionstate.state_file(folder, agent, session).name == hook.state_name(session)


@pytest.mark.skipif(os.name != "posix", reason="checks POSIX file modes")
def test_delete_clears_the_turn_from_the_hooks_session_state(paths: Paths) -> None:
    """Regression: spool/sessions/ kept a deleted turn's prompt and answer for 14 days."""
    home = paths.ensure().home
    codex_turn(home, SESSION, "12", PROMPT, ANSWER)
    codex_turn(home, "other-session", "3", "keep this prompt", "keep this answer")
    state = sessionstate.state_file(paths.hook_state, "codex", SESSION)
    other = sessionstate.state_file(paths.hook_state, "codex", "other-session")
    assert "fetch_user" in state.read_text() and "Renamed" in state.read_text()
    other_before = other.read_bytes()
    with Store.open(paths) as store:
        spool.ingest(paths, store)
        turn = store.turn_by_source_key(f"codex:{SESSION}:12")
        assert turn is not None and turn.prompt == PROMPT
        assert store.delete_turns([turn.id]) == 1
    text = state.read_text()
    assert "fetch_user" not in text and "Renamed" not in text
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    kept = json.loads(text)
    assert "last_turn" not in kept and kept["last_turn_at"]  # the rest of the state is kept
    assert other.read_bytes() == other_before
    # `/rl good` no longer targets the deleted turn.
    argv = capture.build_command("codex-prompt", home, python=sys.executable)
    answer = subprocess.run(
        argv,
        input=json.dumps({"session_id": SESSION, "prompt": "/rl good"}).encode(),
        capture_output=True,
        timeout=30,
    )
    assert "no answer has been captured" in json.loads(answer.stdout)["reason"]


def test_a_newer_pending_prompt_survives_deleting_the_previous_turn() -> None:
    state = {
        "prompt": "the next question",
        "prompt_at": 20.0,
        "last_turn": "12",
        "last_turn_preview": "Renamed",
        "last_turn_at": 10.0,
        "written": {"turn": "12", "fields": ["prompt", "response"]},
    }
    turn = sessionstate.SessionTurn("codex", SESSION, "12", PROMPT)
    assert sessionstate.clean(state, turn)
    assert state["prompt"] == "the next question" and "last_turn_preview" not in state


@pytest.mark.skipif(os.name != "posix", reason="uses a symlink")
def test_a_state_file_that_is_a_link_is_removed_not_followed(paths: Paths, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"prompt": PROMPT}))
    paths.ensure()
    paths.hook_state.mkdir(parents=True, exist_ok=True)
    link = sessionstate.state_file(paths.hook_state, "codex", SESSION)
    link.symlink_to(target)
    turn = sessionstate.SessionTurn("codex", SESSION, "12", PROMPT)
    assert sessionstate.forget(paths.hook_state, [turn]) == [link]
    assert not link.is_symlink() and json.loads(target.read_text()) == {"prompt": PROMPT}


def test_delete_removes_the_turn_from_every_backup(paths: Paths) -> None:
    """Regression: the daily backups kept a deleted turn (text, rating, tag) for 5 days."""
    with Store.open(paths) as store:
        ids = dbdamage.add_turns(store, 6)
        store.set_turn_tags(ids[2], ["wrong"])
        first = dbbackup.take(store.conn, paths.db)
        second = dbbackup.take(store.conn, paths.db)
        assert dbdamage.marker(2).encode() in first.read_bytes()
        assert store.delete_turns([ids[2]]) == 1
    for copy in (first, second):
        assert dbdamage.marker(2).encode() not in copy.read_bytes()
        conn = sqlite3.connect(copy)
        try:
            keys = {r[0] for r in conn.execute("SELECT source_key FROM turns")}
            assert keys == {f"codex:s:t{n}" for n in range(6) if n != 2}
            assert conn.execute(
                "SELECT COUNT(*) FROM ratings WHERE turn_id = ?", (ids[2],)
            ).fetchone() == (0,)
            assert conn.execute("SELECT COUNT(*) FROM turn_tags").fetchone() == (0,)
            assert conn.execute("SELECT COUNT(*) FROM deleted_turns").fetchone() == (1,)
            assert conn.execute("PRAGMA quick_check").fetchone() == ("ok",)
        finally:
            conn.close()


def test_a_backup_that_cannot_be_cleaned_is_removed(paths: Paths) -> None:
    with Store.open(paths) as store:
        ids = dbdamage.add_turns(store, 3)
        copy = dbbackup.take(store.conn, paths.db)
        copy.write_bytes(b"not a database" * 500)
        store.delete_turns([ids[0]])
    assert not copy.exists()


def test_deleted_text_leaves_the_database_file_where_sqlite_keeps_freed_bytes(
    paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: with SQLite's default (macOS, python.org builds), freed pages kept the text.

    Debian's SQLite is built with secure_delete on; every connection here starts
    with it off, as those builds do, so the store must turn it on itself.
    """
    real_connect = sqlite3.connect

    def connect_like_macos(*args, **kwargs):
        conn = real_connect(*args, **kwargs)
        conn.execute("PRAGMA secure_delete = OFF")
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect_like_macos)
    with Store.open(paths) as store:
        ids = dbdamage.add_turns(store, 8, repeat=2000)  # overflow pages too
        dbdamage.checkpoint(paths.db)
        assert dbdamage.pages_holding(paths.db, dbdamage.marker(3))
        store.delete_turns([ids[3]])
        dbdamage.checkpoint(paths.db)
        for path in (paths.db, paths.db.with_name(paths.db.name + "-wal")):
            if path.exists():
                assert dbdamage.marker(3).encode() not in path.read_bytes(), path
        assert store.conn.execute("PRAGMA secure_delete").fetchone() == (1,)


def test_delete_then_repair_then_export_never_shows_the_turn(paths: Paths) -> None:
    """Regression: `doctor --repair` brought a deleted turn back from the backup."""
    with Store.open(paths) as store:
        ids = dbdamage.add_turns(store, 30)
        dbbackup.take(store.conn, paths.db)
        store.delete_turns([ids[4]])
    dbdamage.checkpoint(paths.db)
    dbdamage.overwrite_pages(paths.db, {1})
    _, out, err = run_cli("doctor", "--repair")
    assert "unexpected error" not in err
    keys = exported_keys()
    assert "codex:s:t4" not in keys and len(keys) == 29, out


def test_repair_skips_a_deleted_turn_in_a_backup_the_delete_could_not_reach(
    paths: Paths, tmp_path: Path
) -> None:
    """A copy written while the delete ran (or restored by hand) still holds the turn:
    the tombstones keep it, its rating and its tag out of the repaired file."""
    with Store.open(paths) as store:
        ids = dbdamage.add_turns(store, 30)
        store.set_turn_tags(ids[4], ["wrong"])
        stale = dbbackup.take(store.conn, paths.db)
        shutil.copy(stale, tmp_path / "stale.db")
        store.delete_turns([ids[4]])
    shutil.copy(tmp_path / "stale.db", stale)  # the copy still holds turn 4
    dbdamage.checkpoint(paths.db)
    dbdamage.overwrite_pages(paths.db, {dbdamage.root_page(paths.db, "turns")})
    run_cli("doctor", "--repair")
    assert "codex:s:t4" not in exported_keys()
    with Store.open(paths) as store:
        assert store.conn.execute(
            "SELECT COUNT(*) FROM ratings WHERE turn_id = ?", (ids[4],)
        ).fetchone() == (0,)
        assert store.conn.execute("SELECT COUNT(*) FROM turn_tags").fetchone() == (0,)
        assert store.counts()["turns"] == 29


def test_repair_does_not_revive_a_rating_withdrawn_since_the_backup(paths: Paths) -> None:
    """Regression: the backup's active copy of an undone rating came back active."""
    with Store.open(paths) as store:
        ids = dbdamage.add_turns(store, 10)  # turn 0 is rated good
        dbbackup.take(store.conn, paths.db)
        assert store.undo("cli", turn_id=ids[0]) is not None
    dbdamage.checkpoint(paths.db)
    dbdamage.overwrite_pages(paths.db, {1})
    run_cli("doctor", "--repair")
    with Store.open(paths) as store:
        assert store.active_rating(ids[0]) is None
        (rating,) = store.rating_history(ids[0])
        assert rating.withdrawn_at is not None


def test_a_backup_rating_older_than_one_in_the_new_file_comes_in_withdrawn(
    tmp_path: Path,
) -> None:
    """The rating the damaged file lost was withdrawn by a later one it kept."""

    def database(name: str, ratings: list[tuple]) -> sqlite3.Connection:
        conn = sqlite3.connect(tmp_path / name, isolation_level=None)
        migrations.migrate(conn)
        conn.execute(
            "INSERT INTO turns (id, source_key, agent, session, turn, captured_at, ingested_at)"
            " VALUES (1, 'codex:s:t', 'codex', 's', 't', '2025', '2025')"
        )
        conn.executemany(
            "INSERT INTO ratings (id, turn_id, value, source, rated_at, withdrawn_at,"
            " withdrawn_by) VALUES (?, 1, ?, 'cli', ?, ?, ?)",
            ratings,
        )
        return conn

    database("backup.db", [(1, 1, "2025-01-01", None, None)]).close()
    out = database("new.db", [(2, -1, "2025-01-02", "2025-01-03", "cli")])
    tables = {"ratings": ["id", "turn_id", "value", "source", "rated_at", "withdrawn_at",
                          "withdrawn_by"]}
    assert dbsalvage.from_backup(tmp_path / "backup.db", out, tables) == {"ratings": 1}
    taken = out.execute("SELECT withdrawn_at, withdrawn_by FROM ratings WHERE id = 1").fetchone()
    assert taken == ("2025-01-02", "cli")
    assert out.execute("SELECT COUNT(*) FROM ratings WHERE withdrawn_at IS NULL").fetchone() == (0,)


def test_a_backup_keeps_the_marks_of_turns_deleted_after_it_was_taken(paths: Paths) -> None:
    """Regression: the backup had no row of a turn added after it was taken, so deleting
    that turn marked nothing there; a file restored from it gave the deleted turn's id
    (and its rating's) to the next turn, and an id held by a notification named it."""
    with Store.open(paths) as store:
        dbdamage.add_turns(store, 5)
        backup = dbbackup.take(store.conn, paths.db)
        later = dbdamage.add_turns(store, 2, start=5)
        rated = store.rate(later[-1], -1, "cli")
        store.delete_turns(later)
        live = dict(store.conn.execute("SELECT name, high FROM id_marks"))
    assert live == {"turns": max(later), "ratings": rated.id}
    conn = sqlite3.connect(backup)
    marks = dict(conn.execute("SELECT name, high FROM id_marks"))
    conn.close()
    assert marks == live
