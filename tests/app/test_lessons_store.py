"""The lessons' tables (migration m008) over a real SQLite file: decisions, not counts."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from rltray.app.store import Store, StoreError, migrations


def test_m008_adds_the_lessons_tables_to_a_database_of_m007(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db, isolation_level=None)
    upto = [fn.__name__ for fn in migrations.MIGRATIONS].index("m007_graded_ratings") + 1
    migrations.migrate(conn, migrations.MIGRATIONS[:upto])
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'lessons'").fetchone() is None
    conn.close()
    with Store(db) as store:
        assert store.lesson_rows() == [] and store.lesson_agents() == {}
        key = store.add_lesson("Run one test with -k", "/work/shop")
        assert key == "u1"
    names = {r[1] for r in sqlite3.connect(db).execute("PRAGMA table_info(lessons)")}
    assert {"key", "text", "project", "polarity", "scope", "muted", "pinned", "deleted_at"} <= names


def test_an_added_lesson_is_pinned_and_decisions_make_a_row_for_a_group(store: Store) -> None:
    key = store.add_lesson("  Run one\n test with -k ", None, polarity=1)
    (added,) = store.lesson_rows()
    assert (added.key, added.text, added.project, added.polarity) == (key, "Run one test with -k",
                                                                      None, 1)  # fmt: skip
    assert added.user_added and added.pinned
    muted = store.set_lesson("c12", muted=1)
    assert muted.key == "c12" and muted.muted and not muted.user_added and muted.text is None
    edited = store.set_lesson("c12", text="Keep it short")
    assert edited.muted and edited.text == "Keep it short"  # one row, decisions add up
    assert [r.key for r in store.lesson_rows()] == [key, "c12"]


def test_lesson_words_and_decisions_are_checked(store: Store) -> None:
    with pytest.raises(StoreError, match="needs some words"):
        store.add_lesson("   ", None)
    with pytest.raises(StoreError, match="at most 500"):
        store.add_lesson("x" * 501, None)
    with pytest.raises(StoreError, match="has no 'project'"):
        store.set_lesson("c1", project="/elsewhere")
    with pytest.raises(sqlite3.IntegrityError):
        store.set_lesson("c1", scope="somewhere")


def test_evidence_is_active_ratings_with_a_comment_or_a_tag(store: Store, make_turn) -> None:
    ids = [store.add_turn(make_turn())[0] for _ in range(5)]
    commented, tagged, bare, withdrawn, unrated = ids
    store.rate(commented, -1, "cli", comment="too verbose")
    store.rate(tagged, 1, "cli", score=5)
    store.set_turn_tags(tagged, ["verbose", "wrong"])
    store.rate(bare, -1, "cli")
    store.rate(withdrawn, -1, "cli", comment="ran the suite")
    store.set_turn_tags(withdrawn, ["wrong"])
    store.undo("cli", turn_id=withdrawn)
    store.set_turn_tags(unrated, ["wrong"])
    rows = store.lesson_evidence()
    assert [r["turn_id"] for r in rows] == [commented, tagged]
    first, second = rows
    assert (first["value"], first["comment"], first["cwd"], first["tags"]) == (
        -1, "too verbose", "/work/project", [])  # fmt: skip
    assert second["score"] == 5 and [name for _, name in second["tags"]] == ["verbose", "wrong"]


def test_since_when_lessons_are_on_per_agent(store: Store) -> None:
    store.set_lesson_agent("codex", True, at="2026-11-01T00:00:00Z")
    store.set_lesson_agent("codex", True, at="2026-11-20T00:00:00Z")  # kept from the first time
    assert store.lesson_agents() == {"codex": "2026-11-01T00:00:00.000000+00:00"}
    store.set_lesson_agent("codex", False)
    assert store.lesson_agents() == {}


def test_a_sessions_folder_is_its_newest_known_one(store: Store, make_turn) -> None:
    store.add_turn(make_turn(session="s", cwd="/old"))
    store.add_turn(make_turn(session="s", cwd="/new"))
    store.add_turn(make_turn(session="s", cwd=None))
    assert store.session_folder("claude-code", "s") == "/new"
    assert store.session_folder("claude-code", "other") is None
