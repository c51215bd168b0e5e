"""Helpers that fill a database and then damage chosen pages of it, the way a bad disk does."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from rltray.app.store import Store


def marker(n: int) -> str:
    return f"<turn-{n:04d}>"


def add_turns(store: Store, count: int, start: int = 0, repeat: int = 110) -> list[int]:
    """``count`` turns whose prompts carry a findable marker, every other one rated.

    ``repeat`` markers make the prompt: 110 (~1.2 KB) puts about two turns on a
    4 KB page, 200 (~2.2 KB) one, 2000 (~22 KB) spills onto five overflow pages.
    """
    ids = []
    for n in range(start, start + count):
        turn_id, _ = store.add_turn(
            {
                "agent": "codex",
                "session": "s",
                "turn": f"t{n}",
                "prompt": marker(n) * repeat,
                "response": f"answer {n}",
                "captured_at": f"2025-01-01T00:{n // 60:02d}:{n % 60:02d}Z",
            }
        )
        if n % 2 == 0:
            store.rate(turn_id, 1, "cli")
        ids.append(turn_id)
    return ids


def checkpoint(db: Path) -> None:
    """Move everything from the write-ahead log into the file itself, so pages can be hit."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def page_size(db: Path) -> int:
    header = db.read_bytes()[:100]
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


def pages_holding(db: Path, text: str) -> set[int]:
    """1-based numbers of the pages whose bytes contain ``text``."""
    data, size, needle = db.read_bytes(), page_size(db), text.encode()
    found, at = set(), data.find(needle)
    while at != -1:
        found.add(at // size + 1)
        at = data.find(needle, at + 1)
    return found


def overwrite_pages(db: Path, pages: set[int]) -> None:
    """Fill whole pages with 0xFF (no valid page starts so): SQLite reports them malformed."""
    size = page_size(db)
    with open(db, "r+b") as f:
        for page in pages:
            f.seek((page - 1) * size)
            f.write(b"\xff" * size)


def turn_markers_on(db: Path, pages: set[int], upto: int) -> set[int]:
    """Which of turns 0..upto-1 have their marker on one of ``pages``."""
    return {n for n in range(upto) if pages_holding(db, marker(n)) & pages}


# -- where SQLite keeps each b-tree (its dbstat table, independent of rltray's page scanner) --


def has_dbstat() -> bool:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("SELECT 1 FROM dbstat LIMIT 1").fetchall()
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def stat_pages(db: Path, name: str | None = None, kind: str | None = None) -> set[int]:
    """Pages of b-tree ``name`` (every b-tree when None) of type ``kind``
    (``internal``, ``leaf`` or ``overflow``; any when None), as SQLite's dbstat lists them."""
    conn = sqlite3.connect(db)
    try:
        schema = "sqlite_schema" if conn.execute(
            "SELECT 1 FROM dbstat WHERE name = 'sqlite_schema' LIMIT 1"
        ).fetchone() else "sqlite_master"
        rows = conn.execute(
            "SELECT pageno FROM dbstat WHERE (?1 IS NULL OR name = ?1)"
            " AND (?2 IS NULL OR pagetype = ?2)",
            (schema if name == "schema" else name, kind),
        ).fetchall()
    finally:
        conn.close()
    return {r[0] for r in rows}


def root_page(db: Path, name: str) -> int:
    conn = sqlite3.connect(db)
    try:
        sql = "SELECT rootpage FROM sqlite_master WHERE name = ?"
        (root,) = conn.execute(sql, (name,)).fetchone()
    finally:
        conn.close()
    return int(root)
