"""Helpers that fill a database and then damage chosen pages of it, the way a bad disk does."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from rltray.app.store import Store


def marker(n: int) -> str:
    return f"<turn-{n:04d}>"


def add_turns(store: Store, count: int, start: int = 0) -> list[int]:
    """``count`` turns whose prompts carry a findable marker, about two per 4 KB page."""
    ids = []
    for n in range(start, start + count):
        turn_id, _ = store.add_turn(
            {
                "agent": "codex",
                "session": "s",
                "turn": f"t{n}",
                "prompt": marker(n) * 110,  # ~1.5 KB
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
