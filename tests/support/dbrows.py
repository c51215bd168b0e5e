"""What a data folder holds, to compare before and after a refused request.

Reads every table of the real database file through a connection of its own
(so nothing the app caches hides a write) as a row count and a digest of the
rows (an UPDATE changes no count), and the text of config.toml; a refused
request must leave all of it exactly as it was.
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any


def stored(paths: Any) -> dict[str, Any]:
    """``{table: (rows, digest)}`` of ``paths.db``, and ``"config.toml"``: its text or None."""
    conn = sqlite3.connect(f"file:{paths.db}?mode=ro", uri=True)
    try:
        tables = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " ORDER BY name"
        ).fetchall()
        found: dict[str, Any] = {}
        for (table,) in tables:
            rows = conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid').fetchall()
            found[table] = (len(rows), hashlib.sha256(repr(rows).encode()).hexdigest()[:16])
    finally:
        conn.close()
    found["config.toml"] = paths.config.read_text("utf-8") if paths.config.exists() else None
    return found
