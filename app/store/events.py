"""The event log: what the service did and why (runs started, notifications that failed)."""

from __future__ import annotations

import json
from typing import Any

from rltray.app.store.base import StoreBase, utc_iso


class Events(StoreBase):
    """Append-only notes shown by `rltray doctor` and the dashboard."""

    # -- events --------------------------------------------------------------

    def log_event(self, kind: str, message: str, data: dict[str, Any] | None = None) -> None:
        blob = None if data is None else json.dumps(data, ensure_ascii=False, default=str)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO events (at, kind, message, data) VALUES (?,?,?,?)",
                (utc_iso(), kind, message, blob),
            )

    def events(self, limit: int = 50) -> list[dict[str, Any]]:
        """Newest first."""
        rows = self._read(
            "SELECT id, at, kind, message, data FROM events ORDER BY at DESC, id DESC LIMIT ?",
            (limit,),
        )
        return [
            {
                "id": i,
                "at": at,
                "kind": k,
                "message": m,
                "data": None if d is None else json.loads(d),
            }
            for i, at, k, m, d in rows
        ]

