"""`rltray doctor --repair`: salvage what is readable, add the rest from a backup, keep the file."""

from __future__ import annotations

import io
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import dbdamage
import pytest
from rltray.app import cli, instance
from rltray.app.errors import ExitCode, UserError
from rltray.app.paths import Paths
from rltray.app.store import Store
from rltray.app.store import backup as dbbackup
from rltray.app.store import opening as dbopen
from rltray.app.store import repair as dbrepair
from rltray.app.store import salvage as dbsalvage


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, " ".join(out.getvalue().split()), " ".join(err.getvalue().split())


def source_keys(paths: Paths) -> set[str]:
    with Store.open(paths) as s:
        return {row["source_key"] for row in s.iter_export()}


def kept_files(paths: Paths) -> list[Path]:
    return sorted(paths.home.glob("rltray.db.damaged-*"))


@pytest.fixture
def damaged(paths: Paths) -> tuple[Paths, set[int]]:
    """Turns 0-19 backed up, 20-29 only in the file; then pages holding turns 5 and 25 overwritten.

    Returns the paths and the turn numbers whose rows sat on the overwritten pages.
    """
    with Store.open(paths) as s:
        dbdamage.add_turns(s, 20)
        dbbackup.take(s.conn, paths.db)
        dbdamage.add_turns(s, 10, start=20)
    dbdamage.checkpoint(paths.db)
    hit = dbdamage.pages_holding(paths.db, dbdamage.marker(5))
    hit |= dbdamage.pages_holding(paths.db, dbdamage.marker(25))
    lost = dbdamage.turn_markers_on(paths.db, hit, 30)
    dbdamage.overwrite_pages(paths.db, hit)
    return paths, lost


def test_repair_salvages_readable_rows_and_fills_the_rest_from_the_backup(damaged) -> None:
    """Regression: a damaged database could only be restored by hand, if a copy existed at all.

    The turns newer than the backup whose page was overwritten are gone for good:
    the report says how many and never "Repaired" alone (regression: it did).
    """
    paths, lost = damaged
    assert 5 in lost and 25 in lost
    code, out, err = run_cli("doctor", "--repair")
    assert "unexpected error" not in err
    gone = len([n for n in lost if n >= 20])
    assert f"Repaired {paths.db} only in part (" in out and "rows were left behind" in out
    assert code == ExitCode.DATA, out + err  # every check passes, but rows were lost
    (kept,) = kept_files(paths)
    assert f"The damaged file is kept as {kept}." in out
    keys = source_keys(paths)
    # Every turn the backup had is back, and every newer turn whose page survived.
    expected = {f"codex:s:t{n}" for n in range(30) if n < 20 or n not in lost}
    assert keys == expected
    with Store.open(paths) as s:
        assert s.integrity_check() == "ok"
        (event,) = [e for e in s.events() if e["kind"] == "repair"]
        assert event["data"]["kept_as"] == str(kept)
        rated = {t.turn for t in s.list_turns(limit=100) if t.rating is not None}
        assert rated == {f"t{n}" for n in range(0, 30, 2) if f"codex:s:t{n}" in keys}
    backed_up = len([n for n in lost if n < 20])
    assert (
        f"turns: {len(expected)} of about 30 rows recovered ({backed_up} of them from the "
        f"backup); {gone} left behind"
    ) in out


def test_repair_reads_past_an_unreadable_stretch_without_a_backup(damaged) -> None:
    paths, lost = damaged
    for backup in dbbackup.backups(paths.db):
        backup.unlink()
    report = dbrepair.repair(paths)
    assert report.backup is None and report.skipped >= 1
    assert report.salvaged["turns"] == 30 - len(lost)
    assert source_keys(paths) == {f"codex:s:t{n}" for n in range(30) if n not in lost}


@pytest.mark.parametrize("how", ["empty", "missing", "garbage"])
def test_a_lost_or_garbage_file_is_restored_from_the_newest_backup(paths: Paths, how: str) -> None:
    with Store.open(paths) as s:
        dbdamage.add_turns(s, 12)
        dbbackup.take(s.conn, paths.db)
    for suffix in ("-wal", "-shm"):
        paths.db.with_name(paths.db.name + suffix).unlink(missing_ok=True)
    if how == "missing":
        paths.db.unlink()
    else:
        paths.db.write_bytes(b"" if how == "empty" else b"\x00garbage" * 4096)
    code, out, err = run_cli("doctor", "--repair")
    if how == "garbage":  # nothing in it can be read, so nothing says the backup holds it all
        assert code == ExitCode.DATA, out + err
        assert "only in part" in out and "could not be traced to a table" in out
    else:  # an empty or missing file held nothing: the backup is all there is
        assert code == ExitCode.OK, out + err
        assert f"Repaired {paths.db} (" in out
    assert "turns: 12 rows recovered (12 of them from the backup)" in out
    assert len(source_keys(paths)) == 12
    assert len(kept_files(paths)) == (0 if how == "missing" else 1)


def test_repair_with_no_backup_and_a_lost_file_starts_a_new_database_on_request(
    paths: Paths,
) -> None:
    Store.open(paths).close()
    paths.db.unlink()
    assert run_cli("status")[0] == ExitCode.DATA
    report = dbrepair.repair(paths)
    assert report.problem == "missing" and report.backup is None
    assert "No intact backup was found" in " ".join(report.lines())
    assert run_cli("status")[0] == ExitCode.OK


def test_an_intact_database_is_left_alone(paths: Paths, make_turn) -> None:
    with Store.open(paths) as s:
        s.add_turn(make_turn())
    before = paths.db.read_bytes()
    report = dbrepair.repair(paths)
    assert report.problem is None
    assert list(report.lines()) == [f"The database {paths.db} is intact; nothing to repair."]
    assert paths.db.read_bytes() == before and kept_files(paths) == []


def test_repair_refuses_while_the_service_runs(damaged) -> None:
    paths, _ = damaged
    lock = instance.service_lock(paths)
    lock.acquire()
    try:
        with pytest.raises(UserError, match="quit the tray") as err:
            dbrepair.repair(paths)
    finally:
        lock.release()
    assert err.value.exit_code == ExitCode.ALREADY_RUNNING
    assert kept_files(paths) == []


def test_a_failed_repair_puts_the_damaged_file_back(damaged, monkeypatch) -> None:
    paths, _ = damaged
    before = paths.db.read_bytes()

    def boom(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(dbrepair.dbbackup, "newest_intact", boom)
    with pytest.raises(OSError, match="disk full"):
        dbrepair.repair(paths)
    assert paths.db.read_bytes() == before
    assert kept_files(paths) == [] and not list(paths.home.glob("rltray.db.repair-*"))


def test_two_repairs_in_one_second_keep_both_damaged_files(paths: Paths) -> None:
    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    Store.open(paths).close()
    for _ in range(2):
        paths.db.write_bytes(b"garbage" * 1000)
        dbrepair._repair(paths.db, now)
    assert [p.name for p in kept_files(paths)] == [
        "rltray.db.damaged-20250102T030405Z",
        "rltray.db.damaged-20250102T030405Z-2",
    ]


def test_doctor_on_a_damaged_database_reports_it_and_never_crashes(damaged, monkeypatch) -> None:
    """Regression: `rltray doctor` itself crashed on a damaged database."""
    monkeypatch.setenv("COLUMNS", "400")
    code, out, err = run_cli("doctor")
    assert code == ExitCode.NOT_AVAILABLE
    assert "crashed" not in out and "unexpected error" not in err
    assert "database: rltray doctor --repair" in out
    assert "permissions" not in out


def test_doctor_on_a_garbage_file_blames_the_file_not_permissions(
    paths: Paths, monkeypatch
) -> None:
    """Regression: with the whole file garbage, doctor said to check permissions."""
    Store.open(paths).close()
    paths.db.write_bytes(b"garbage!" * 1000)
    monkeypatch.setenv("COLUMNS", "400")
    code, out, _ = run_cli("doctor")
    assert code == ExitCode.NOT_AVAILABLE
    assert f"The database {paths.db} is damaged (file is not a database)" in out
    assert "database: rltray doctor --repair" in out
    assert "permissions" not in out
    assert "hook records" in out and "settings" in out  # the other checks still ran


def test_next_readable_finds_the_first_rowid_after_a_bad_stretch() -> None:
    bad = range(10, 300)
    probes: list[int] = []

    def read(start: int, limit: int) -> list | None:
        probes.append(start)
        return None if start in bad else []

    assert dbsalvage._next_readable(read, 10) == 300
    assert len(probes) < 30
    assert dbsalvage._next_readable(lambda s, n: None, 0) is None


def test_copy_skips_only_the_unreadable_rows() -> None:
    src = sqlite3.connect(":memory:", isolation_level=None)
    src.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    src.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(1, 1001)])
    real = src

    class Flaky:
        """Reads fail whenever the range they cover includes rows 400-450."""

        def execute(self, sql: str, params: tuple[int, int]):
            start = params[0]
            rows = real.execute(sql, params).fetchall()
            if any(400 <= r[0] <= 450 for r in rows) or 400 <= start <= 450:
                raise sqlite3.DatabaseError("database disk image is malformed")
            return real.execute(sql, params)

    out = sqlite3.connect(":memory:", isolation_level=None)
    out.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    inserted, skipped = dbsalvage._copy(Flaky(), out, "t", ["id", "v"])  # type: ignore[arg-type]
    ids = [r[0] for r in out.execute("SELECT id FROM t ORDER BY id")]
    assert skipped == 1
    assert ids == [i for i in range(1, 1001) if not 400 <= i <= 450]
    assert inserted == len(ids)


def test_the_marker_survives_a_repair(damaged) -> None:
    paths, _ = damaged
    dbrepair.repair(paths)
    assert dbopen.marker(paths.db).exists()


def test_repair_in_a_folder_never_used_changes_nothing(paths: Paths) -> None:
    report = dbrepair.repair(paths)
    (line,) = report.lines()
    assert line == f"The database {paths.db} does not exist yet; nothing to repair."
    assert not paths.db.exists()


# -- the seven page-damage patterns (issue 18, part 3) ----------------------------------
#
# 600 turns one per leaf page (so the turns b-tree has a root and two interior pages
# under it), 300 of them rated, and 4 more whose prompts spill onto overflow pages.
# No backup: every row that comes back comes from the damaged file. Before the page
# scan, a damaged root, interior or schema page lost every row below it while the
# repair said "Repaired"; a lost leaf or overflow page was not reported at all.

TURNS, BIG, RATED = 600, 4, 302


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("template") / "rltray.db"
    with Store(db) as s, s.batch():
        dbdamage.add_turns(s, TURNS, repeat=200)
        dbdamage.add_turns(s, BIG, start=TURNS, repeat=2000)
    dbdamage.checkpoint(db)
    return db


def _only(db: Path, n: int, pages: set[int]) -> set[int]:
    """Of ``pages``, those holding turn ``n``'s text and no other turn's."""
    others = set().union(*(dbdamage.pages_holding(db, dbdamage.marker(m)) for m in (n - 1, n + 1)))
    return (dbdamage.pages_holding(db, dbdamage.marker(n)) & pages) - others


def _overflow(db: Path) -> set[int]:
    """The middle overflow page of one big turn's chain and the last of another's."""
    overflow = dbdamage.stat_pages(db, "turns", "overflow")
    chains = [sorted(_only(db, n, overflow)) for n in (601, 602)]
    return {chains[0][len(chains[0]) // 2], chains[1][-1]}


PATTERNS = {
    # name: (pages to overwrite, turns lost, ratings lost)
    "turns root": (lambda db: {dbdamage.root_page(db, "turns")}, 0, 0),
    "every interior page": (lambda db: dbdamage.stat_pages(db, kind="internal"), 0, 0),
    "page 1": (lambda db: {1}, 0, 0),
    "the schema pages": (lambda db: dbdamage.stat_pages(db, "schema"), 0, 0),
    "ratings root": (lambda db: {dbdamage.root_page(db, "ratings")}, 0, 0),
    "three turn leaves": (
        lambda db: set().union(
            *(_only(db, n, dbdamage.stat_pages(db, "turns", "leaf")) for n in (100, 301, 450))
        ),
        3,
        0,
    ),
    "overflow chains": (_overflow, 2, 0),
}


@pytest.mark.skipif(not dbdamage.has_dbstat(), reason="this SQLite lacks the dbstat table")
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_each_page_damage_pattern_recovers_every_row_it_can_and_says_what_was_lost(
    template: Path, paths: Paths, pattern: str
) -> None:
    """Regression (issue 18): one damaged turns root lost every turn, and said "Repaired"."""
    pick, turns_lost, ratings_lost = PATTERNS[pattern]
    paths.ensure()
    paths.db.write_bytes(template.read_bytes())
    hit = pick(paths.db)
    assert hit and (pattern != "three turn leaves" or len(hit) == 3)
    dbdamage.overwrite_pages(paths.db, hit)
    assert dbrepair.diagnose(paths.db) is not None
    code, out, err = run_cli("doctor", "--repair")
    assert "unexpected error" not in err
    with Store.open(paths) as s:
        counts = s.counts()
        rated = counts["good"] + counts["bad"]
        assert s.integrity_check() == "ok"
    assert counts["turns"] == TURNS + BIG - turns_lost, out
    assert rated == RATED - ratings_lost, out
    # Every damaged page is accounted for (a cut chain's tail is the lost row's, not more rows).
    assert "could not be traced" not in out
    if turns_lost:
        assert f"Repaired {paths.db} only in part (" in out
        assert (
            f"turns: {TURNS + BIG - turns_lost} of about {TURNS + BIG} rows recovered; "
            f"{turns_lost} left behind"
        ) in out
        assert code == ExitCode.DATA
    else:
        assert f"Repaired {paths.db} (" in out and "left behind" not in out
        assert f"turns: {TURNS + BIG} rows recovered" in out
        assert code == ExitCode.OK, out
