"""The Store over a real SQLite file: schema, migrations, turns, ratings history, runs, adapters."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from rltray.app.paths import Paths
from rltray.app.store import Store, StoreError, migrations
from rltray.app.store import turns as store_turns


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# -- opening and migrations --------------------------------------------------


def test_a_new_database_is_private_wal_and_fully_migrated(paths: Paths) -> None:
    with Store.open(paths) as s:
        assert s.schema_version() == len(migrations.MIGRATIONS)
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert s.conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
        assert s.integrity_check() == "ok"
        s.log_event("test", "a write creates the WAL files")
        if os.name == "posix":
            for suffix in ("", "-wal", "-shm"):
                db_file = paths.db.with_name(paths.db.name + suffix)
                assert stat.S_IMODE(db_file.stat().st_mode) == 0o600, suffix
    if os.name == "posix":
        assert stat.S_IMODE(paths.home.stat().st_mode) == 0o700
    names = [r[0] for r in raw(paths.db).execute("SELECT name FROM migrations ORDER BY rowid")]
    assert names == [fn.__name__ for fn in migrations.MIGRATIONS]


def test_reopening_applies_nothing_twice(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    Store(db).close()
    conn = raw(db)
    assert migrations.migrate(conn) == []
    assert conn.execute("SELECT COUNT(*) FROM migrations").fetchone()[0] == len(
        migrations.MIGRATIONS
    )


@pytest.mark.parametrize("done", range(len(migrations.MIGRATIONS)))
def test_upgrade_from_each_older_schema_keeps_data(tmp_path: Path, done: int) -> None:
    db = tmp_path / "old.db"
    conn = raw(db)
    conn.execute("PRAGMA foreign_keys = ON")
    migrations.migrate(conn, migrations.MIGRATIONS[:done])
    assert len(migrations.applied(conn)) == done
    if done >= 1:  # the first schema already had turns and ratings
        conn.execute(
            "INSERT INTO turns (source_key, agent, session, turn, prompt, response, context,"
            " captured_at, ingested_at) VALUES ('codex:s:t', 'codex', 's', 't', 'p', 'r', '[]',"
            " '2024-01-01T00:00:00.000000+00:00', '2024-01-01T00:00:01.000000+00:00')"
        )
        conn.execute(
            "INSERT INTO ratings (turn_id, value, source, rated_at)"
            " VALUES (1, 1, 'cli', '2024-01-01T00:00:02.000000+00:00')"
        )
    conn.close()

    with Store(db) as s:
        assert s.schema_version() == len(migrations.MIGRATIONS)
        if done >= 1:
            turn = s.turn_by_source_key("codex:s:t")
            assert turn is not None and turn.rating is not None and turn.rating.value == 1
            assert turn.rating.trained_run_id is None
        s.add_run("r1")
        turn_id, _ = s.add_turn({"agent": "codex", "session": "s", "turn": "new", "prompt": "q"})
        rating = s.rate(turn_id, -1, "cli")
        assert s.mark_trained([rating.id], "r1") == 1
        s.log_event("test", "upgraded")
        assert s.counts()["untrained"] == (1 if done >= 1 else 0)
        assert s.integrity_check() == "ok"


def test_a_database_from_a_newer_rltray_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    Store(db).close()
    raw(db).execute("INSERT INTO migrations VALUES ('m999_future', '2030-01-01')")
    with pytest.raises(migrations.SchemaTooNew, match="newer rltray"):
        Store(db)


def test_close_is_idempotent_and_a_closed_store_says_so(tmp_path: Path) -> None:
    s = Store(tmp_path / "x.db")
    s.close()
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.counts()


# -- turns -------------------------------------------------------------------


def test_add_turn_stores_every_field(store: Store, make_turn) -> None:
    rec = make_turn(agent="codex", session="abc", turn="t9", captured_at="2025-03-04T05:06:07Z")
    turn_id, inserted = store.add_turn(rec)
    assert inserted
    turn = store.get_turn(turn_id)
    assert turn is not None
    assert (turn.source_key, turn.agent, turn.session, turn.turn) == (
        "codex:abc:t9",
        "codex",
        "abc",
        "t9",
    )
    assert (turn.prompt, turn.response, turn.context) == (
        rec["prompt"],
        rec["response"],
        rec["context"],
    )
    assert (turn.cwd, turn.model, turn.rating) == ("/work/project", "claude-test", None)
    assert turn.captured_at == "2025-03-04T05:06:07.000000+00:00"
    assert store.turn_by_source_key("codex:abc:t9") == turn
    assert store.get_turn(turn_id + 100) is None


def test_duplicate_turn_fills_only_empty_fields(store: Store, make_turn) -> None:
    # Codex: notify arrives first without context/cwd/model, then Stop has them.
    notify = make_turn(
        agent="codex", turn="T", prompt="", response="answer", context=[], cwd=None, model=None
    )
    stop = make_turn(
        agent="codex",
        turn="T",
        prompt="question",
        response="different answer",
        context=[{"role": "user", "content": "ctx"}],
        cwd="/repo",
        model="gpt-x",
    )
    first, inserted = store.add_turn(notify)
    second, again = store.add_turn(stop)
    assert inserted and not again and first == second
    turn = store.get_turn(first)
    assert turn is not None
    assert turn.prompt == "question"  # was empty: filled
    assert turn.response == "answer"  # was full: kept
    assert turn.context == [{"role": "user", "content": "ctx"}]
    assert (turn.cwd, turn.model) == ("/repo", "gpt-x")
    assert store.counts()["turns"] == 1


def test_list_turns_newest_first_with_filters(store: Store, make_turn) -> None:
    ids = [store.add_turn(make_turn(agent=a))[0] for a in ("codex", "claude-code", "codex")]
    store.rate(ids[0], 1, "cli")
    assert [t.id for t in store.list_turns()] == ids[::-1]
    assert [t.id for t in store.list_turns(limit=1, offset=1)] == [ids[1]]
    assert [t.id for t in store.list_turns(rated=True)] == [ids[0]]
    assert [t.id for t in store.list_turns(rated=False)] == [ids[2], ids[1]]
    assert [t.id for t in store.list_turns(agent="codex")] == [ids[2], ids[0]]
    rated = store.list_turns(rated=True)[0]
    assert rated.rating is not None and rated.rating.value == 1


def test_newest_turn_is_the_last_captured_rated_or_not(store: Store, make_turn) -> None:
    """Bug pinned: `rltray good` after `/rl good` silently rated an older answer."""
    assert store.newest_turn() is None
    a = store.add_turn(make_turn(agent="codex"))[0]
    b = store.add_turn(make_turn())[0]
    store.rate(b, 1, "agent")
    assert store.newest_turn().id == b  # type: ignore[union-attr]
    assert store.newest_turn(agent="codex").id == a  # type: ignore[union-attr]


def test_latest_rating_includes_withdrawn_ones(store: Store, make_turn) -> None:
    t1, t2 = (store.add_turn(make_turn())[0] for _ in range(2))
    assert store.latest_rating() is None
    store.rate(t1, 1, "cli")
    second = store.rate(t2, -1, "cli")
    store.undo("cli")
    latest = store.latest_rating()
    assert latest is not None and latest.id == second.id and not latest.active


def test_a_failed_savepoint_rolls_back_alone_inside_a_batch(store: Store, make_turn) -> None:
    with store.batch():
        kept = store.add_turn(make_turn())[0]
        with pytest.raises(RuntimeError), store.savepoint():
            store.add_turn(make_turn(turn="lost"))
            raise RuntimeError("boom")
    assert store.get_turn(kept) is not None
    assert store.turn_by_source_key("claude-code:session-1:lost") is None


# -- ratings -----------------------------------------------------------------


def test_rerating_withdraws_the_previous_rating_and_keeps_history(store: Store, make_turn) -> None:
    t = store.add_turn(make_turn())[0]
    first = store.rate(t, 1, "notification", comment="nice")
    second = store.rate(t, -1, "web")
    assert store.active_rating(t) == second
    history = store.rating_history(t)
    assert [r.id for r in history] == [first.id, second.id]
    assert history[0].withdrawn_at == second.rated_at and history[0].withdrawn_by == "web"
    assert history[0].comment == "nice" and history[1].active
    counts = store.counts()
    assert (counts["good"], counts["bad"], counts["unrated"]) == (0, 1, 0)


def test_undo_withdraws_the_newest_active_rating(store: Store, make_turn) -> None:
    t1, t2 = (store.add_turn(make_turn())[0] for _ in range(2))
    base = datetime(2025, 1, 1, tzinfo=timezone.utc)
    store.rate(t2, 1, "cli", at=base)
    store.rate(t1, -1, "cli", at=base + timedelta(minutes=1))
    undone = store.undo("tray")
    assert undone is not None and undone.turn_id == t1 and undone.withdrawn_by == "tray"
    assert store.active_rating(t1) is None and store.active_rating(t2) is not None
    assert store.rating_history(t1)[0].withdrawn_at is not None  # kept, not deleted


def test_undo_of_a_given_turn_and_when_nothing_is_rated(store: Store, make_turn) -> None:
    t1, t2 = (store.add_turn(make_turn())[0] for _ in range(2))
    assert store.undo("cli") is None
    store.rate(t1, 1, "cli")
    store.rate(t2, 1, "cli")
    assert store.undo("cli", turn_id=t1).turn_id == t1  # type: ignore[union-attr]
    assert store.undo("cli", turn_id=t1) is None
    assert store.active_rating(t2) is not None


@pytest.mark.parametrize(
    ("value", "source", "message"),
    [(0, "cli", r"\+1 \(good\)"), (True, "cli", "not True"), (1, "email", "Unknown rating source")],
)
def test_bad_ratings_are_refused_in_one_sentence(store, make_turn, value, source, message) -> None:
    t = store.add_turn(make_turn())[0]
    with pytest.raises(StoreError, match=message):
        store.rate(t, value, source)
    assert store.rating_history(t) == []


def test_rating_an_unknown_turn_fails(store: Store) -> None:
    with pytest.raises(StoreError, match="no turn 42"):
        store.rate(42, 1, "cli")


def test_the_database_allows_one_active_rating_per_turn(store: Store, make_turn) -> None:
    t = store.add_turn(make_turn())[0]
    store.rate(t, 1, "cli")
    with pytest.raises(sqlite3.IntegrityError):
        store.conn.execute(
            "INSERT INTO ratings (turn_id, value, source, rated_at) VALUES (?, -1, 'cli', 'x')",
            (t,),
        )


# -- counts, export, training ------------------------------------------------


def test_counts_and_untrained(store: Store, make_turn) -> None:
    ids = [
        store.add_turn(make_turn(agent=a))[0] for a in ("codex", "codex", "claude-code", "codex")
    ]
    r1 = store.rate(ids[0], 1, "cli")
    store.rate(ids[1], -1, "cli")
    store.rate(ids[2], 1, "cli")
    store.add_run("run-1")
    assert store.mark_trained([r1.id], "run-1") == 1
    c = store.counts()
    assert {k: c[k] for k in ("turns", "good", "bad", "unrated", "untrained")} == {
        "turns": 4,
        "good": 2,
        "bad": 1,
        "unrated": 1,
        "untrained": 2,
    }
    assert c["by_agent"]["codex"]["turns"] == 3
    assert c["by_agent"]["codex"]["last_captured_at"] == store.get_turn(ids[3]).captured_at  # type: ignore[union-attr]
    # Re-rating a trained turn makes a new, untrained judgement.
    store.rate(ids[0], -1, "cli")
    assert store.counts()["untrained"] == 3
    examples = store.training_examples(untrained_only=True)
    assert sorted(e["turn_id"] for e in examples) == [ids[0], ids[1], ids[2]]
    assert len(store.training_examples()) == 3


def test_mark_trained_needs_a_known_run(store: Store, make_turn) -> None:
    r = store.rate(store.add_turn(make_turn())[0], 1, "cli")
    with pytest.raises(StoreError, match="no training run"):
        store.mark_trained([r.id], "missing")


def test_export_pages_through_every_turn(store, make_turn, monkeypatch) -> None:
    monkeypatch.setattr(store_turns, "_EXPORT_PAGE", 2)
    ids = [store.add_turn(make_turn())[0] for _ in range(5)]
    store.rate(ids[3], -1, "web", comment="wrong file")
    rows = list(store.iter_export())
    assert [r["id"] for r in rows] == ids
    assert rows[3]["rating"]["value"] == -1 and rows[3]["rating"]["comment"] == "wrong file"
    assert rows[3]["rating"]["source"] == "web" and rows[3]["rating"]["rated_at"]
    assert rows[0]["rating"] is None
    json.dumps(rows)  # export is plain JSON


# -- runs, adapters, events --------------------------------------------------


def test_run_lifecycle(store: Store) -> None:
    run = store.add_run("r1")
    assert run.status == "running" and run.finished_at is None
    assert store.set_run_status("r1", "paused").status == "paused"
    done = store.finish_run("r1", "done", metrics={"auroc": 0.8}, adapter_version=1)
    assert (done.status, done.metrics, done.adapter_version) == ("done", {"auroc": 0.8}, 1)
    assert done.finished_at is not None
    store.add_run("r2")
    assert [r.id for r in store.list_runs()] == ["r2", "r1"]
    with pytest.raises(StoreError, match="Unknown run status"):
        store.finish_run("r2", "exploded")
    with pytest.raises(StoreError, match="no training run"):
        store.finish_run("nope", "failed", error="x")


def test_adapters_versions_activation_and_rollback(store: Store, tmp_path: Path) -> None:
    v1 = store.add_adapter("base/m", tmp_path / "v0001", baseline=0.1, metrics={"kl": 0.01})
    v2 = store.add_adapter("base/m", tmp_path / "v0002", parent_version=v1.version)
    assert (v1.version, v2.version, v1.status) == (1, 2, "candidate")
    assert store.active_adapter() is None
    store.set_adapter_status(1, "active")
    store.set_adapter_status(2, "active")
    assert store.get_adapter(1).status == "superseded"  # type: ignore[union-attr]
    assert store.active_adapter().version == 2  # type: ignore[union-attr]
    # Rollback: current one rolled back, the previous one active again.
    store.set_adapter_status(2, "rolled-back")
    store.set_adapter_status(1, "active")
    assert [(a.version, a.status) for a in store.list_adapters()] == [
        (2, "rolled-back"),
        (1, "active"),
    ]
    tagged = store.set_adapter_ollama_tag(1, "rltray-m:v1")
    assert (tagged.ollama_tag, tagged.baseline, tagged.metrics) == (
        "rltray-m:v1",
        0.1,
        {"kl": 0.01},
    )
    with pytest.raises(StoreError, match="no adapter version 9"):
        store.set_adapter_status(9, "rejected")
    with pytest.raises(StoreError, match="Unknown adapter status"):
        store.set_adapter_status(1, "great")


def test_events_newest_first(store: Store) -> None:
    store.log_event("ingest", "2 turns", {"turns": 2})
    store.log_event("train", "started")
    events = store.events()
    assert [(e["kind"], e["data"]) for e in events] == [("train", None), ("ingest", {"turns": 2})]
    assert len(store.events(limit=1)) == 1


# -- concurrency -------------------------------------------------------------


def test_threads_share_one_store(store: Store, make_turn) -> None:
    records = [make_turn(session=f"thread-{i}") for i in range(40)]
    errors: list[BaseException] = []

    def work(chunk: list[dict]) -> None:
        try:
            for rec in chunk:
                turn_id, _ = store.add_turn(rec)
                store.rate(turn_id, 1, "tray")
                store.counts()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(records[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.counts()["good"] == 40


WRITER = textwrap.dedent(
    """
    import sys
    from rltray.app.store import Store
    db, worker, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with Store(db) as s:
        inserted_shared = 0
        for i in range(n):
            tid, _ = s.add_turn({"agent": "codex", "session": worker, "turn": str(i),
                                 "prompt": "p" * 2000, "response": "r",
                                 "captured_at": "2025-01-01T00:00:00Z"})
            s.rate(tid, 1 if i % 2 else -1, "agent")
            _, new = s.add_turn({"agent": "codex", "session": "shared", "turn": str(i),
                                 "prompt": "", "response": worker})
            inserted_shared += new
            s.log_event("worker", worker)
        print(inserted_shared)
    """
)


def test_several_processes_write_the_same_file(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    workers, per_worker = 4, 15
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), f"w{i}", str(per_worker)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    shared_inserted = 0
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        shared_inserted += int(out.strip())
    with Store(db) as s:
        counts = s.counts()
        assert counts["turns"] == workers * per_worker + per_worker
        assert counts["good"] + counts["bad"] == workers * per_worker
        assert shared_inserted == per_worker  # each shared turn inserted exactly once
        assert len(s.events(limit=1000)) == workers * per_worker
        assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
