"""`rltray doctor --repair`: rebuild rltray.db from every row it still holds; keep the damaged file.

Why salvage first and the backup second: a backup is up to a day old, while a
damaged file usually still holds most of its pages, the newest turns and
ratings among them. So the repair

1. refuses while the service (tray or `rltray serve`) runs, and holds its lock
   so none starts meanwhile;
2. moves the damaged file and its write-ahead log aside as
   ``rltray.db.damaged-<UTC time>`` (kept, never written again);
3. scans the pages of the damaged file for rows of rltray's tables
   (``store/pagescan.py``, ``store/pages.py``), before SQLite opens it;
4. creates a new file with the current schema and takes the rows
   (``store/salvage.py``): as SQLite reads them, then, for each table SQLite could
   not read whole, as the page scan found them, then what is still missing
   from the newest backup that passes ``PRAGMA quick_check`` (never a deleted
   turn, nor a rating withdrawn since);
5. counts what the damaged file probably held against what came back, from
   the scan: cells it could not decode, leaf pages that are gone (with the
   rowid range their parent gives), damaged pages it cannot trace;
6. checks the new file, renames it into place and logs a ``repair`` event.

The report says "Repaired" only when nothing was left behind; otherwise it
names each table's shortfall and ``complete`` is false (`rltray doctor
--repair` then exits with the data error code). A missing or 0-byte database
takes the same path with nothing to read, which is a restore of the newest
backup. Rows keep their ids, so ratings still point at their turns; a rating
whose turn was lost is kept and counted.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.app.errors import ExitCode, UserError
from rltray.app.store import backup as dbbackup
from rltray.app.store import migrations
from rltray.app.store import opening as dbopen
from rltray.app.store import pages as dbpages
from rltray.app.store import pagescan as dbpagescan
from rltray.app.store import salvage as dbsalvage

if TYPE_CHECKING:
    from rltray.app.paths import Paths

_HEX = frozenset("0123456789abcdef")


@dataclass
class RepairReport:
    db: Path
    problem: str | None  # None: the database was intact and nothing was done
    kept_as: Path | None = None  # where the damaged file now is
    backup: Path | None = None  # the backup rows were added from
    salvaged: dict[str, int] = field(default_factory=dict)  # table -> rows from the damaged file
    restored: dict[str, int] = field(default_factory=dict)  # table -> rows added from the backup
    skipped: int = 0  # unreadable stretches SQLite could not read in the damaged file
    orphans: int = 0  # rows whose parent row (a rating's turn) could not be recovered
    held: dict[str, int] = field(default_factory=dict)  # table -> rows the file probably held
    left: dict[str, int] = field(default_factory=dict)  # table -> rows left behind (about)
    unknown_loss: set[str] = field(default_factory=set)  # lost a page of an unknown row count
    untraced: int = 0  # damaged pages whose rows, if they held any, could not be traced

    def total(self, table: str) -> int:
        return self.salvaged.get(table, 0) + self.restored.get(table, 0)

    @property
    def complete(self) -> bool:
        """Whether every row the damaged file held is in the new one, as far as can be told."""
        return not any(self.left.values()) and not self.unknown_loss and not self.untraced

    def lines(self) -> Iterator[str]:
        """The report as sentences for the terminal."""
        if self.problem is None:
            state = "is intact" if self.db.exists() else "does not exist yet"
            yield f"The database {self.db} {state}; nothing to repair."
            return
        if self.complete:
            yield f"Repaired {self.db} ({self.problem})."
        else:
            yield f"Repaired {self.db} only in part ({self.problem}): rows were left behind."
        if self.kept_as is not None:
            yield f"The damaged file is kept as {self.kept_as}."
        for table in sorted(set(self.salvaged) | set(self.restored) | set(self.held)):
            yield from self._table_line(table)
        if self.backup is not None:
            yield f"Rows the damaged file could not give came from the backup {self.backup}."
        else:
            yield "No intact backup was found, so only the damaged file's readable rows are in."
        if self.skipped:
            yield f"{self.skipped} unreadable stretch(es) of the damaged file were skipped."
        if self.untraced:
            yield (
                f"{self.untraced} damaged page(s) could not be traced to a table; "
                "any rows they held are lost."
            )
        if self.orphans:
            yield f"{self.orphans} row(s) refer to a turn or run that could not be recovered."

    def _table_line(self, table: str) -> Iterator[str]:
        total, left = self.total(table), self.left.get(table, 0)
        if not (total or left) and table not in {"turns", "ratings"} | self.unknown_loss:
            return
        from_backup = self.restored.get(table, 0)
        extra = f" ({from_backup} of them from the backup)" if from_backup else ""
        if left:
            held = max(self.held.get(table, 0), total + left)
            yield f"  {table}: {total} of about {held} rows recovered{extra}; {left} left behind"
        elif table in self.unknown_loss:
            yield f"  {table}: {total} rows recovered{extra}; a lost page held an unknown number"
        else:
            yield f"  {table}: {total} rows recovered{extra}"


def diagnose(db: Path) -> str | None:
    """What is wrong with the database file, in a few words, or None when it is intact."""
    state = dbopen.lost(db)
    if state is not None or not db.exists():
        return state  # None: a fresh folder, nothing to repair
    try:
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            raise dbopen.translate(exc, db) from exc
        return str(exc)
    except sqlite3.DatabaseError as exc:
        return str(exc)
    if rows and rows[0][0] == "ok":
        return None
    return "; ".join(str(r[0]) for r in rows[:3])


def repair(paths: Paths, now: datetime | None = None) -> RepairReport:
    """Rebuild ``paths.db`` as described above; a report of what was recovered."""
    from filelock import Timeout
    from rltray.app import instance

    lock = instance.service_lock(paths.ensure())
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise UserError(
            "rltray is running for this data folder; quit the tray (or stop `rltray serve`) "
            "first, then run `rltray doctor --repair` again.",
            ExitCode.ALREADY_RUNNING,
        ) from None
    try:
        return _repair(paths.db, now or datetime.now(timezone.utc))
    finally:
        lock.release()


def _repair(db: Path, now: datetime) -> RepairReport:
    problem = diagnose(db)
    report = RepairReport(db, problem)
    if problem is None:
        return report
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    damaged = _move_aside(db, stamp)
    report.kept_as = damaged
    fresh = db.with_name(f"{db.name}.repair-{stamp}")
    for leftover in _family(fresh):
        leftover.unlink(missing_ok=True)
    try:
        _rebuild(db, damaged, fresh, report)
    except BaseException:
        for leftover in _family(fresh):
            leftover.unlink(missing_ok=True)
        if damaged is not None and not db.exists():
            _rename_family(damaged, db)  # put the damaged file back: nothing changed
        raise
    os.replace(fresh, db)
    dbopen.mark_created(db)
    return report


def _rebuild(db: Path, damaged: Path | None, fresh: Path, report: RepairReport) -> None:
    dbopen.create_private(fresh)
    out = sqlite3.connect(fresh, isolation_level=None)
    try:
        out.execute("PRAGMA secure_delete = ON")
        migrations.migrate(out)
        tables = _tables(out)
        whole: set[str] = set()
        found = None
        if damaged is not None and damaged.stat().st_size:
            found = _scan(damaged, fresh, out)  # first: closing SQLite may checkpoint its log
            walked = dbsalvage.walk(damaged, out, tables)
            report.salvaged, report.skipped = walked.rows, walked.skipped
            whole = walked.whole - _short(found, out, walked.whole)
            if found is not None:
                for table, n in dbsalvage.from_pages(*found, out, tables, whole).items():
                    report.salvaged[table] = report.salvaged.get(table, 0) + n
        held = _held(found, out, tables, whole)
        report.backup = dbbackup.newest_intact(db)
        if report.backup is not None:
            rest = {t: c for t, c in tables.items() if t not in whole}
            report.restored = dbsalvage.from_backup(report.backup, out, rest)
        dbsalvage.forget_deleted(out)
        if found is not None and whole != set(tables):
            _count_losses(found[0], out, held, report)
        report.orphans = len(out.execute("PRAGMA foreign_key_check").fetchall())
        problem_now = dbbackup.check(out)
        if problem_now != "ok":
            raise UserError(
                f"The rebuilt database fails its own check ({problem_now}); {db} was not "
                "replaced: report this as a bug.",
                ExitCode.DATA,
            )
        _log(out, report)
    finally:
        out.close()


def _scan(
    damaged: Path, fresh: Path, out: sqlite3.Connection
) -> tuple[dbpagescan.Scan, dict[str, dbpagescan.Shape]] | None:
    """The damaged file's pages read for rows of every table of the schema ``out`` has."""
    names = [
        r[0]
        for r in out.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    shapes = {n: dbpagescan.shape_of(out, n, _ACCEPT.get(n)) for n in names}
    (indexes,) = out.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index'").fetchone()
    try:
        with dbpages.open_pages(damaged) as pages:
            found = dbpagescan.scan(
                pages,
                list(shapes.values()),
                schema_pages=dbpages.tree_pages(fresh),
                indexes=indexes,
            )
    except (OSError, ValueError):
        return None
    return found, shapes


def _is_key_hash(values: tuple[Any, ...]) -> bool:
    """A tombstone's key is a SHA-256 hex digest (``store_turns.key_hash``)."""
    return isinstance(values[0], str) and len(values[0]) == 64 and set(values[0]) <= _HEX


def _is_migration(values: tuple[Any, ...]) -> bool:
    return values[0] in {fn.__name__ for fn in migrations.MIGRATIONS}


# Two tables hold two text columns each: their records are told apart by their keys.
_ACCEPT = {"deleted_turns": _is_key_hash, "migrations": _is_migration}


def _short(
    found: tuple[dbpagescan.Scan, dict[str, dbpagescan.Shape]] | None,
    out: sqlite3.Connection,
    whole: set[str],
) -> set[str]:
    """Tables SQLite read without a failure that still lack rows the pages hold, or that
    hold a row whose cell is broken (SQLite reads past a garbage last overflow page)."""
    if found is None:
        return set()
    short = set()
    for table in whole & found[0].tables.keys():
        scanned = found[0].tables[table]
        if scanned.broken or scanned.rows.keys() - dbsalvage.rowids(out, table):
            short.add(table)
    return short


def _held(
    found: tuple[dbpagescan.Scan, dict[str, dbpagescan.Shape]] | None,
    out: sqlite3.Connection,
    tables: dict[str, list[str]],
    whole: set[str],
) -> dict[str, int]:
    """Rows each table not read whole probably held: those taken, and those the scan missed."""
    if found is None:
        return {}
    held = {}
    for table in tables:
        scanned = found[0].tables.get(table)
        if table in whole or scanned is None:
            continue
        have = dbsalvage.rowids(out, table)
        held[table] = len(have) + len(scanned.broken - have) + scanned.cut
        held[table] += sum(rows for _, _, rows in scanned.lost)
    return held


def _count_losses(
    found: dbpagescan.Scan, out: sqlite3.Connection, held: dict[str, int], report: RepairReport
) -> None:
    """What is still missing after the backup: unreadable cells, and rows of lost leaf pages."""
    report.untraced = found.untraced
    for table, probably in held.items():
        scanned = found.tables[table]
        have = dbsalvage.rowids(out, table)
        left = len(scanned.broken - have) + scanned.cut
        for above, upto, rows in scanned.lost:
            if above is not None and upto is not None:
                rows -= dbsalvage.in_range(out, table, above, upto)
            left += max(0, rows)
        report.held[table] = probably
        if left:
            report.left[table] = left
        if scanned.lost_root:
            report.unknown_loss.add(table)


def _family(db: Path) -> list[Path]:
    """The file and SQLite's companions for it."""
    return [db, *(db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal"))]


def _move_aside(db: Path, stamp: str) -> Path | None:
    """Rename the database and its WAL to ``<name>.damaged-<stamp>``; None when it is missing."""
    if not db.exists():
        return None
    kept = db.with_name(f"{db.name}.damaged-{stamp}")
    n = 1
    while kept.exists():  # never replace an earlier damaged file
        n += 1
        kept = db.with_name(f"{db.name}.damaged-{stamp}-{n}")
    _rename_family(db, kept)
    return kept


def _rename_family(source: Path, target: Path) -> None:
    """Rename a database with its journal and WAL; the WAL index (-shm) is rebuilt on open."""
    for old, new in zip(_family(source), _family(target), strict=True):
        if old.name.endswith("-shm"):
            old.unlink(missing_ok=True)
        elif old.exists():
            os.replace(old, new)


def _tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """The current schema's tables and their columns (the migrations table excluded)."""
    names = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
            " AND name NOT LIKE 'sqlite_%' AND name != 'migrations' ORDER BY rowid"
        )
    ]
    return {n: [r[1] for r in conn.execute(f'PRAGMA table_info("{n}")')] for n in names}


def _log(out: sqlite3.Connection, report: RepairReport) -> None:
    data = {
        "problem": report.problem,
        "kept_as": str(report.kept_as) if report.kept_as else None,
        "backup": str(report.backup) if report.backup else None,
        "salvaged": report.salvaged,
        "restored": report.restored,
        "skipped": report.skipped,
        "held": report.held,
        "left": report.left,
        "unknown_loss": sorted(report.unknown_loss),
        "untraced": report.untraced,
        "complete": report.complete,
    }
    out.execute(
        "INSERT INTO events (at, kind, message, data) VALUES (?,?,?,?)",
        (
            datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            "repair",
            f"rebuilt the database ({report.problem}); {report.total('turns')} turns recovered"
            + ("" if report.complete else ", some rows were left behind"),
            json.dumps(data),
        ),
    )
