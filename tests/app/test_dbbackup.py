"""Rotating backups of rltray.db: daily on open, always before an upgrade, private, at most KEEP."""

from __future__ import annotations

import os
import sqlite3
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import dbdamage
import pytest
from rltray.app.errors import DatabaseDamaged
from rltray.app.paths import Paths
from rltray.app.store import Store, migrations
from rltray.app.store import backup as dbbackup
from rltray.app.store import opening as dbopen


def turns_in(db: Path) -> int:
    conn = sqlite3.connect(db.absolute().as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
    finally:
        conn.close()


def test_a_new_database_gets_its_first_backup_on_the_next_open_then_daily(
    paths: Paths, make_turn
) -> None:
    with Store.open(paths) as s:
        s.add_turn(make_turn())
    assert dbbackup.backups(paths.db) == []  # nothing worth copying when it was created
    Store.open(paths).close()
    first = dbbackup.backups(paths.db)
    assert len(first) == 1
    Store.open(paths).close()
    assert dbbackup.backups(paths.db) == first  # not again the same day
    later = datetime.now(timezone.utc) + timedelta(hours=25)
    assert dbbackup.due(paths.db, now=later)
    assert turns_in(first[0]) == 1


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_backups_are_private(paths: Paths) -> None:
    with Store.open(paths) as s:
        backup = dbbackup.take(s.conn, paths.db)
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert stat.S_IMODE(dbbackup.folder(paths.db).stat().st_mode) == 0o700
    assert backup.parent == paths.backups / "db"


def test_a_backup_is_one_self_contained_file(paths: Paths, make_turn) -> None:
    with Store.open(paths) as s:
        s.add_turn(make_turn())
        backup = dbbackup.take(s.conn, paths.db)
    assert not backup.with_name(backup.name + "-wal").exists()
    conn = sqlite3.connect(backup)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    assert turns_in(backup) == 1


def test_only_the_newest_keep_backups_stay(paths: Paths) -> None:
    with Store.open(paths) as s:
        taken = [dbbackup.take(s.conn, paths.db, keep=3) for _ in range(6)]
    assert dbbackup.backups(paths.db) == taken[:-4:-1]  # newest first


def test_a_backup_is_taken_before_migrating_a_used_database(tmp_path: Path) -> None:
    db = tmp_path / "rltray.db"
    conn = sqlite3.connect(db, isolation_level=None)
    migrations.migrate(conn, migrations.MIGRATIONS[:1])
    conn.execute(
        "INSERT INTO turns (source_key, agent, session, turn, captured_at, ingested_at)"
        " VALUES ('codex:s:t', 'codex', 's', 't', '2024-01-01', '2024-01-01')"
    )
    conn.close()
    with Store(db) as s:
        assert s.schema_version() == len(migrations.MIGRATIONS)
    (backup,) = dbbackup.backups(db)
    old = sqlite3.connect(backup)
    assert [r[0] for r in old.execute("SELECT name FROM migrations")] == [
        migrations.MIGRATIONS[0].__name__
    ]
    old.close()


def test_an_upgrade_backs_up_even_when_the_daily_copy_is_fresh(tmp_path: Path) -> None:
    db = tmp_path / "rltray.db"
    conn = sqlite3.connect(db, isolation_level=None)
    migrations.migrate(conn, migrations.MIGRATIONS[:2])
    dbbackup.take(conn, db)
    conn.close()
    Store(db).close()
    assert len(dbbackup.backups(db)) == 2


def test_a_damaged_database_is_never_copied_over_the_good_backups(paths: Paths) -> None:
    with Store.open(paths) as s:
        dbdamage.add_turns(s, 10)
        good = dbbackup.take(s.conn, paths.db)
    dbdamage.checkpoint(paths.db)
    dbdamage.overwrite_pages(paths.db, dbdamage.pages_holding(paths.db, dbdamage.marker(9)))
    conn = sqlite3.connect(paths.db, isolation_level=None)
    with pytest.raises(DatabaseDamaged):
        dbbackup.take(conn, paths.db)
    conn.close()
    assert dbbackup.backups(paths.db) == [good]


def test_newest_intact_skips_a_damaged_backup(paths: Paths) -> None:
    with Store.open(paths) as s:
        older = dbbackup.take(s.conn, paths.db)
        newer = dbbackup.take(s.conn, paths.db)
    newer.write_bytes(b"not a database at all" * 200)
    assert dbbackup.newest_intact(paths.db) == older


def test_a_backup_that_cannot_be_written_never_blocks_opening(paths: Paths) -> None:
    Store.open(paths).close()
    folder = dbbackup.folder(paths.db)
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()
    folder.write_text("a file where the backups folder should be")
    with Store.open(paths) as s:
        assert s.counts()["turns"] == 0


def test_stale_temporary_copies_are_cleared(paths: Paths) -> None:
    with Store.open(paths) as s:
        dbbackup.take(s.conn, paths.db)
    stale = dbbackup.folder(paths.db) / ".rltray-20200101T000000000000Z.db.1.tmp"
    stale.write_bytes(b"half a copy")
    os.utime(stale, (0, 0))
    assert stale in dbbackup.prune(paths.db)
    assert not stale.exists()


def test_backup_names_sort_by_time_and_parse_back(paths: Paths) -> None:
    with Store.open(paths) as s:
        backup = dbbackup.take(s.conn, paths.db)
    when = dbbackup.taken_at(backup)
    assert when is not None and abs(datetime.now(timezone.utc) - when) < timedelta(minutes=1)
    assert dbopen.used_before(paths.db)


def test_doctor_shows_the_backups_and_warns_when_the_newest_is_old(
    paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from rltray.app import cli

    with Store.open(paths) as s:
        backup = dbbackup.take(s.conn, paths.db)
    monkeypatch.setenv("COLUMNS", "400")

    def doctor() -> str:
        out = io.StringIO()
        cli.main(["doctor"], stdout=out, stderr=io.StringIO())
        return out.getvalue()

    assert "1 backup(s), newest" in doctor()
    backup.rename(backup.with_name("rltray-20200101T000000000000Z.db"))
    monkeypatch.setattr(dbbackup, "due", lambda *a, **k: False)  # no fresh copy on this open
    assert f"database: check free space and permissions of {dbbackup.folder(paths.db)}" in doctor()


def test_take_if_due_is_for_long_running_services(paths: Paths) -> None:
    with Store.open(paths) as s:
        first = dbbackup.take_if_due(s.conn, paths.db)
        assert first is not None
        assert dbbackup.take_if_due(s.conn, paths.db) is None
        assert dbbackup.take_if_due(s.conn, paths.db, every_s=0) not in (None, first)
