"""The page reader (dbpages) and scanner (dbpagescan) against SQLite's own reading of real files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import dbdamage
import pytest
from rltray.app.paths import Paths
from rltray.app.store import Store
from rltray.app.store import pages as dbpages
from rltray.app.store import pagescan as dbpagescan

VALUES = [
    None, 0, 1, -1, 127, 128, -129, 32767, 2**23, -(2**23), 2**31, 2**47, -(2**47),
    2**63 - 1, -(2**63), 1.5, -0.25, "", "text ünïcode ✓", "x" * 5000, b"", b"\x00\xff" * 3000,
]


def scanned(db: Path, tables: list[str]) -> dbpagescan.Scan:
    conn = sqlite3.connect(db)
    try:
        shapes = [dbpagescan.shape_of(conn, t) for t in tables]
    finally:
        conn.close()
    with dbpages.open_pages(db) as pages:
        return dbpagescan.scan(pages, shapes)


def test_every_serial_type_decodes_as_sqlite_reads_it(tmp_path: Path) -> None:
    db = tmp_path / "types.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v)")  # no affinity: stored as given
    conn.executemany("INSERT INTO t (v) VALUES (?)", [(v,) for v in VALUES])
    expected = dict(conn.execute("SELECT id, v FROM t").fetchall())
    conn.close()
    found = scanned(db, ["t"]).tables["t"]
    assert {rowid: values[1] for rowid, values in found.rows.items()} == expected
    assert all(values[0] is None for values in found.rows.values())  # the rowid alias
    assert not found.broken and not found.lost


def test_rows_still_in_the_write_ahead_log_are_read(paths: Paths) -> None:
    """The newest rows of a live database sit in the -wal file until a checkpoint."""
    with Store.open(paths) as store:
        dbdamage.add_turns(store, 40)
        dbdamage.checkpoint(paths.db)
        dbdamage.add_turns(store, 25, start=40)  # these only in the log
        assert paths.db.with_name(paths.db.name + "-wal").stat().st_size
        found = scanned(paths.db, ["turns"]).tables["turns"]
        assert len(found.rows) == 65


def test_the_page_size_is_found_without_page_1(tmp_path: Path) -> None:
    db = tmp_path / "small-pages.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA page_size = 1024")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    conn.executemany("INSERT INTO t (v) VALUES (?)", [(f"row {i} " * 20,) for i in range(300)])
    conn.close()
    with open(db, "r+b") as f:
        f.write(b"\xff" * 1024)
    with dbpages.open_pages(db) as pages:
        assert not pages.header_ok and pages.size == 1024
    found = scanned_with_shape(db)
    assert len(found.rows) == 300


def scanned_with_shape(db: Path) -> dbpagescan.Table:
    text = dbpagescan.Column("text", notnull=True)
    shape = dbpagescan.Shape("t", (dbpagescan.Column("integer", rowid=True), text), 2)
    with dbpages.open_pages(db) as pages:
        return dbpagescan.scan(pages, [shape]).tables["t"]


def test_a_record_only_passes_for_a_table_of_its_shape(paths: Paths) -> None:
    """Regression: tags' rows (NULL id, name, time) passed for runs' (text key first)."""
    Store.open(paths).close()
    conn = sqlite3.connect(paths.db)
    try:
        runs, tags = (dbpagescan.shape_of(conn, t) for t in ("runs", "tags"))
    finally:
        conn.close()
    row = (None, "wrong", "2025-01-01T00:00:00+00:00")
    assert tags.matches(row) and not runs.matches(row)


@pytest.mark.parametrize("declared, affinity", [
    ("INTEGER", "integer"), ("BIGINT", "integer"), ("TEXT", "text"), ("VARCHAR(20)", "text"),
    ("", "blob"), ("BLOB", "blob"), ("REAL", "real"), ("DOUBLE", "real"), ("NUMERIC", "numeric"),
])
def test_affinity_follows_sqlites_rules(declared: str, affinity: str) -> None:
    assert dbpagescan.affinity(declared) == affinity


def test_a_cut_overflow_chain_is_a_broken_row_with_its_rowid(tmp_path: Path) -> None:
    db = tmp_path / "chain.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    conn.executemany("INSERT INTO t (v) VALUES (?)", [("short",), ("<long>" * 3000,), ("ok",)])
    conn.close()
    chain = dbdamage.pages_holding(db, "<long>") - dbdamage.pages_holding(db, "short")
    dbdamage.overwrite_pages(db, {max(chain)})
    found = scanned_with_shape(db)
    assert set(found.rows) == {1, 3} and found.broken == {2}


def test_tree_pages_counts_a_b_tree(tmp_path: Path) -> None:
    db = tmp_path / "tree.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO t (v) VALUES (?)", [("x" * 1500,) for _ in range(30)])
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()
    conn.close()
    assert dbpages.tree_pages(db, 1) == 1
    assert dbpages.tree_pages(db, root) == 1 + 15  # an interior root over 15 leaves of two rows
