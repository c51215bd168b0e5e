"""`rltray doctor --repair`: rebuild rltray.db from every readable row, keeping the damaged file.

Why salvage first and the backup second: a backup is up to a day old, while a
damaged file usually still holds most of its pages, the newest turns and
ratings among them. So the repair

1. refuses while the service (tray or `rltray serve`) runs, and holds its lock
   so none starts meanwhile;
2. moves the damaged file and its write-ahead log aside as
   ``rltray.db.damaged-<UTC time>`` (kept, never written again);
3. creates a new file with the current schema;
4. copies every readable row of every table from the damaged file, in rowid
   order, a page of rows at a time; where a read fails it reads row by row,
   and past an unreadable stretch it seeks forward (doubling, then halving the
   step) to the first rowid it can read again;
5. adds from the newest backup that passes ``PRAGMA quick_check`` the rows the
   damaged file could not give (``INSERT OR IGNORE`` on the same keys: a row
   read from the damaged file is newer, so it wins);
6. checks the new file, renames it into place and logs a ``repair`` event.

A missing or 0-byte database takes the same path with nothing to read in
step 4, which is a restore of the newest backup. Rows keep their ids, so
ratings still point at their turns; a rating whose turn was lost is kept and counted.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.app import dbbackup, dbopen, migrations
from rltray.app.errors import ExitCode, UserError

if TYPE_CHECKING:
    from rltray.app.paths import Paths

PAGE = 256
_MIN_ROWID, _MAX_ROWID = -(2**63), 2**63 - 1


@dataclass
class RepairReport:
    db: Path
    problem: str | None  # None: the database was intact and nothing was done
    kept_as: Path | None = None  # where the damaged file now is
    backup: Path | None = None  # the backup rows were added from
    salvaged: dict[str, int] = field(default_factory=dict)  # table -> rows from the damaged file
    restored: dict[str, int] = field(default_factory=dict)  # table -> rows added from the backup
    skipped: int = 0  # unreadable stretches skipped in the damaged file
    orphans: int = 0  # rows whose parent row (a rating's turn) could not be recovered

    def total(self, table: str) -> int:
        return self.salvaged.get(table, 0) + self.restored.get(table, 0)

    def lines(self) -> Iterator[str]:
        """The report as sentences for the terminal."""
        if self.problem is None:
            state = "is intact" if self.db.exists() else "does not exist yet"
            yield f"The database {self.db} {state}; nothing to repair."
            return
        yield f"Repaired {self.db} ({self.problem})."
        if self.kept_as is not None:
            yield f"The damaged file is kept as {self.kept_as}."
        for table in sorted(set(self.salvaged) | set(self.restored)):
            if not self.total(table) and table not in ("turns", "ratings"):
                continue
            from_backup = self.restored.get(table, 0)
            extra = f" ({from_backup} of them from the backup)" if from_backup else ""
            yield f"  {table}: {self.total(table)} rows recovered{extra}"
        if self.backup is not None:
            yield f"Rows the damaged file could not give came from the backup {self.backup}."
        else:
            yield "No intact backup was found, so only the damaged file's readable rows are in."
        if self.skipped:
            yield f"{self.skipped} unreadable stretch(es) of the damaged file were skipped."
        if self.orphans:
            yield f"{self.orphans} row(s) refer to a turn or run that could not be recovered."


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
        migrations.migrate(out)
        tables = _tables(out)
        if damaged is not None and damaged.stat().st_size:
            report.skipped = _take_rows(damaged, out, tables, report.salvaged)
        report.backup = dbbackup.newest_intact(db)
        if report.backup is not None:
            _take_rows(report.backup, out, tables, report.restored)
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


def _open_source(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")  # keep text with a broken byte
    conn.execute("PRAGMA cell_size_check = ON")  # report a bad cell instead of reading garbage
    conn.execute("PRAGMA query_only = ON")
    return conn


def _source_columns(src: sqlite3.Connection, table: str, wanted: list[str]) -> list[str]:
    try:
        have = {r[1] for r in src.execute(f'PRAGMA table_info("{table}")')}
    except sqlite3.DatabaseError:
        return []
    return [c for c in wanted if c in have]


def _take_rows(
    source: Path, out: sqlite3.Connection, tables: dict[str, list[str]], counts: dict[str, int]
) -> int:
    """Copy each table's readable rows into ``out``, counting them; the stretches skipped."""
    try:
        src = _open_source(source)
    except sqlite3.DatabaseError:
        return 0  # not even the header reads: nothing to take
    skipped = 0
    try:
        _refuse_newer(src)
        for table, wanted in tables.items():
            cols = _source_columns(src, table, wanted)
            if cols:
                counts[table], gaps = _copy(src, out, table, cols)
                skipped += gaps
    finally:
        src.close()
    return skipped


def _refuse_newer(src: sqlite3.Connection) -> None:
    try:
        migrations.pending(src)
    except migrations.SchemaTooNew as exc:
        raise UserError(f"{exc} (nothing was changed by the repair)", ExitCode.DATA) from None
    except sqlite3.DatabaseError:
        pass  # an unreadable migrations table: the rows are still worth reading


def _copy(
    src: sqlite3.Connection, out: sqlite3.Connection, table: str, cols: list[str]
) -> tuple[int, int]:
    """Copy every readable row by rowid; (rows inserted, unreadable stretches skipped)."""
    names = ", ".join(f'"{c}"' for c in cols)
    select = f'SELECT rowid, {names} FROM "{table}" WHERE rowid >= ? ORDER BY rowid LIMIT ?'
    marks = ", ".join("?" * (len(cols) + 1))
    insert = f'INSERT OR IGNORE INTO "{table}" (rowid, {names}) VALUES ({marks})'

    def read(start: int, limit: int) -> list[Any] | None:
        try:
            return src.execute(select, (start, limit)).fetchall()
        except (sqlite3.Error, ValueError):
            return None

    inserted = skipped = 0
    start: int | None = _MIN_ROWID
    out.execute("BEGIN")
    try:
        while start is not None:
            rows = read(start, PAGE)
            if rows is None:
                rows = read(start, 1)  # the page holds a bad row: go one by one
            if rows is None:
                skipped += 1
                start = _next_readable(read, start)
                continue
            if not rows:
                break
            for row in rows:
                inserted += out.execute(insert, row).rowcount
            last = rows[-1][0]
            start = last + 1 if last < _MAX_ROWID else None
        out.execute("COMMIT")
    except BaseException:
        out.execute("ROLLBACK")
        raise
    return inserted, skipped


def _next_readable(read: Callable[[int, int], list[Any] | None], bad: int) -> int | None:
    """The smallest rowid after ``bad`` from which a read works again, or None."""
    step = 1
    while bad + step <= _MAX_ROWID:
        if read(bad + step, 1) is not None:
            lo, hi = bad, bad + step  # lo fails, hi works: halve the gap
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if read(mid, 1) is None:
                    lo = mid
                else:
                    hi = mid
            return hi
        step *= 2
    return None


def _log(out: sqlite3.Connection, report: RepairReport) -> None:
    data = {
        "problem": report.problem,
        "kept_as": str(report.kept_as) if report.kept_as else None,
        "backup": str(report.backup) if report.backup else None,
        "salvaged": report.salvaged,
        "restored": report.restored,
        "skipped": report.skipped,
    }
    out.execute(
        "INSERT INTO events (at, kind, message, data) VALUES (?,?,?,?)",
        (
            datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            "repair",
            f"rebuilt the database ({report.problem}); {report.total('turns')} turns recovered",
            json.dumps(data),
        ),
    )
