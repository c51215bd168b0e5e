"""Rows for a rebuilt rltray.db: walked from the damaged file, read from its pages, or a backup's.

Why three sources, in this order (``store/repair.py`` calls them):

1. ``walk``: SQLite's own reading, table by table in rowid order, a page of
   rows at a time; where a read fails it reads row by row, and past an
   unreadable stretch it seeks forward (doubling, then halving the step) to the
   first rowid it can read again. A table walked without a failure is *whole*:
   nothing is added to it from anywhere else, so a row deleted since the
   backup stays deleted.
2. ``from_pages``: for the tables that are not whole, the rows a scan of the
   file's pages found (``store/pagescan.py``): a damaged root, interior or schema page
   stops the walk but not the scan.
3. ``from_backup``: what the damaged file could not give, from the newest
   intact backup, with ``INSERT OR IGNORE`` on the same keys (the damaged
   file's row is newer, so it wins). A backup predates what the user did
   since, so it never brings back a deleted turn (``deleted_turns`` only ever
   grows, so its tombstones and the damaged file's together name every one),
   nor a rating, tag or command of a turn that is not the same turn in the new
   file, and a rating it holds as active while the new file has a later rating
   of that turn comes in withdrawn, as the later rating withdrew it.

Finally ``forget_deleted`` removes any tombstoned turn that still came in (a
stale page), the way deleting it does.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rltray.app.errors import ExitCode, UserError
from rltray.app.store import migrations
from rltray.app.store.pagescan import Scan, Shape
from rltray.app.store.turns import forget, key_hash

PAGE = 256
_MIN_ROWID, _MAX_ROWID = -(2**63), 2**63 - 1
Row = tuple[Any, ...]
Keep = Callable[[Row], Row | None]  # a row to insert (maybe changed), or None to skip it


@dataclass
class Walk:
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows inserted
    whole: set[str] = field(default_factory=set)  # tables read without one failed read
    skipped: int = 0  # unreadable stretches


def open_source(path: Path) -> sqlite3.Connection:
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


def _refuse_newer(src: sqlite3.Connection) -> None:
    try:
        migrations.pending(src)
    except migrations.SchemaTooNew as exc:
        raise UserError(f"{exc} (nothing was changed by the repair)", ExitCode.DATA) from None
    except sqlite3.DatabaseError:
        pass  # an unreadable migrations table: the rows are still worth reading


def walk(source: Path, out: sqlite3.Connection, tables: dict[str, list[str]]) -> Walk:
    """Copy each table's readable rows from ``source`` into ``out`` through SQLite."""
    done = Walk()
    try:
        src = open_source(source)
    except sqlite3.DatabaseError:
        return done  # not even the header reads: nothing to take
    try:
        _refuse_newer(src)
        for table, wanted in tables.items():
            cols = _source_columns(src, table, wanted)
            if not cols:
                continue
            done.rows[table], gaps = _copy(src, out, table, cols)
            done.skipped += gaps
            if not gaps:
                done.whole.add(table)
    finally:
        src.close()
    return done


def _copy(
    src: sqlite3.Connection,
    out: sqlite3.Connection,
    table: str,
    cols: list[str],
    keep: Keep | None = None,
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
                kept = tuple(row) if keep is None else keep(tuple(row))
                if kept is not None:
                    inserted += out.execute(insert, kept).rowcount
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


def rowids(out: sqlite3.Connection, table: str) -> set[int]:
    return {r[0] for r in out.execute(f'SELECT rowid FROM "{table}"')}


def from_pages(
    found: Scan,
    shapes: dict[str, Shape],
    out: sqlite3.Connection,
    tables: dict[str, list[str]],
    whole: set[str],
) -> dict[str, int]:
    """Insert the scanned rows of every table not read whole; table -> rows added (net).

    A row whose cell the scan found broken is removed even when SQLite read it:
    SQLite does not notice a garbage last overflow page, and returns its bytes
    as the end of the text. Left out, the row is counted as lost, and an intact
    copy can still come from the backup.
    """
    counts: dict[str, int] = {}
    out.execute("BEGIN")
    try:
        for table, cols in tables.items():
            scanned = found.tables.get(table)
            if table in whole or scanned is None or table not in shapes:
                continue
            alias = [c.rowid for c in shapes[table].columns]
            counts[table] = -sum(
                out.execute(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,)).rowcount
                for rowid in scanned.broken
            )
            for rowid, values in scanned.rows.items():
                row = [rowid if a else v for a, v in zip(alias, values, strict=False)]
                names = ", ".join(f'"{c}"' for c in cols[: len(row)])
                sql = (
                    f'INSERT OR IGNORE INTO "{table}" (rowid, {names})'
                    f" VALUES ({', '.join('?' * (len(row) + 1))})"
                )
                counts[table] += out.execute(sql, (rowid, *row)).rowcount
        out.execute("COMMIT")
    except BaseException:
        out.execute("ROLLBACK")
        raise
    return counts


# -- the backup -----------------------------------------------------------------------


def _tombstones(conn: sqlite3.Connection) -> set[str]:
    try:
        return {r[0] for r in conn.execute("SELECT key_hash FROM deleted_turns")}
    except sqlite3.DatabaseError:
        return set()


def _same_turns(src: sqlite3.Connection, out: sqlite3.Connection, dead: set[str]) -> set[int]:
    """Ids of the turns that are the same turn (same key, not deleted) in ``src`` and ``out``."""
    mine = dict(out.execute("SELECT id, source_key FROM turns").fetchall())
    try:
        theirs = src.execute("SELECT id, source_key FROM turns").fetchall()
    except sqlite3.DatabaseError:
        return set()
    return {i for i, k in theirs if mine.get(i) == k and key_hash(k) not in dead}


def from_backup(
    backup: Path, out: sqlite3.Connection, tables: dict[str, list[str]]
) -> dict[str, int]:
    """Add the backup's rows of ``tables`` that ``out`` lacks (see the module docstring)."""
    counts: dict[str, int] = {}
    try:
        src = open_source(backup)
    except sqlite3.DatabaseError:
        return counts
    try:
        _refuse_newer(src)
        dead = _tombstones(out) | _tombstones(src)
        same: set[int] | None = None  # turn ids naming the same turn in both files
        order = sorted(tables, key=lambda t: (t != "deleted_turns", t != "turns"))
        for table in order:
            cols = _source_columns(src, table, tables[table])
            if not cols:
                continue
            if table not in ("deleted_turns", "turns") and same is None:
                same = _same_turns(src, out, dead)
            keep = _keep(out, table, cols, dead, same or set())
            counts[table], _ = _copy(src, out, table, cols, keep)
    finally:
        src.close()
    return counts


def _keep(
    out: sqlite3.Connection, table: str, cols: list[str], dead: set[str], same: set[int]
) -> Keep | None:
    """The filter a backup's rows of ``table`` pass through (row = rowid, then ``cols``)."""
    at = {c: i + 1 for i, c in enumerate(cols)}
    if table == "turns" and "source_key" in at:
        key = at["source_key"]
        return lambda row: None if key_hash(row[key]) in dead else row
    refs = [
        (at[fk[3]], fk[6].upper())
        for fk in out.execute(f'PRAGMA foreign_key_list("{table}")')
        if fk[2] == "turns" and fk[3] in at
    ]
    later = _later_ratings(out) if table == "ratings" else {}

    def keep(row: Row) -> Row | None:
        values = list(row)
        for i, on_delete in refs:
            if values[i] is not None and values[i] not in same:
                if on_delete != "SET NULL":
                    return None
                values[i] = None
        if later and values[at["withdrawn_at"]] is None:
            newer = later.get(values[at["turn_id"]])
            if newer is not None and newer[0] > values[at["rated_at"]]:
                values[at["withdrawn_at"]], values[at["withdrawn_by"]] = newer
        return tuple(values)

    return keep if refs or later else None


def _later_ratings(out: sqlite3.Connection) -> dict[int, tuple[str, str]]:
    """Turn -> (rated_at, source) of its newest rating already in ``out``."""
    rows = out.execute(
        "SELECT turn_id, MAX(rated_at), source FROM ratings GROUP BY turn_id"
    ).fetchall()
    return {turn: (at, source) for turn, at, source in rows}


def forget_deleted(out: sqlite3.Connection) -> int:
    """Remove every turn whose key has a tombstone, with what deleting it removes; how many."""
    dead = _tombstones(out)
    keys = [k for (k,) in out.execute("SELECT source_key FROM turns") if key_hash(k) in dead]
    if not keys:
        return 0
    out.execute("BEGIN")
    try:
        gone = forget(out, keys)
        out.execute("COMMIT")
    except BaseException:
        out.execute("ROLLBACK")
        raise
    return gone


def in_range(out: sqlite3.Connection, table: str, above: int, upto: int) -> int:
    """Rows of ``table`` in ``out`` whose rowid is in (above, upto]."""
    sql = f'SELECT COUNT(*) FROM "{table}" WHERE rowid > ? AND rowid <= ?'
    return int(out.execute(sql, (above, upto)).fetchone()[0])


def present(out: sqlite3.Connection, table: str, ids: Iterable[int]) -> int:
    """How many of ``ids`` are rowids of ``table`` in ``out``."""
    have = rowids(out, table)
    return sum(1 for i in ids if i in have)
