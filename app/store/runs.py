"""Training runs: status, timings, metrics (progress while going) and the error of a failed one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rltray.app.store.base import StoreBase, StoreError, _check_choice, utc_iso

RUN_STATUSES = ("queued", "running", "paused", "done", "failed", "cancelled")


@dataclass(frozen=True)
class Run:
    id: str
    status: str
    started_at: str
    finished_at: str | None
    metrics: dict[str, Any]
    error: str | None
    adapter_version: int | None


_RUN_COLS = "id, status, started_at, finished_at, metrics, error, adapter_version"
_ONLY_IF = ("", " AND status = ?")  # indexed by whether a status condition is given


def _run(row: tuple[Any, ...]) -> Run:
    return Run(row[0], row[1], row[2], row[3], json.loads(row[4] or "{}"), row[5], row[6])


class Runs(StoreBase):
    """One row per training run; the runner writes it, the tray and `rltray runs` read it."""

    # -- training runs -------------------------------------------------------

    def add_run(self, run_id: str, *, status: str = "running", at: datetime | None = None) -> Run:
        _check_choice("run status", status, RUN_STATUSES)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO runs (id, status, started_at) VALUES (?,?,?)",
                (run_id, status, utc_iso(at)),
            )
        return self._get_run(run_id)

    def set_run_status(self, run_id: str, status: str, *, only_if: str | None = None) -> Run:
        """Move a run between queued / running / paused without finishing it.

        ``only_if``: change it only while its status is that one (another process may
        have recorded its end meanwhile); the run is returned as it is either way.
        """
        _check_choice("run status", status, RUN_STATUSES)
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE runs SET status = ? WHERE id = ?" + _ONLY_IF[only_if is not None],
                (status, run_id, *([only_if] if only_if is not None else [])),
            )
            if cur.rowcount == 0 and (only_if is None or not self._exists(conn, run_id)):
                raise StoreError(f"There is no training run {run_id!r}.")
        return self._get_run(run_id)

    def finish_run(
        self,
        run_id: str,
        status: str,
        *,
        metrics: dict[str, Any] | None = None,
        error: str | None = None,
        adapter_version: int | None = None,
        at: datetime | None = None,
        only_if: str | None = None,
    ) -> Run:
        """Record how a run ended; ``only_if`` as in :meth:`set_run_status`."""
        _check_choice("run status", status, RUN_STATUSES)
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, metrics = ?, error = ?,"
                " adapter_version = COALESCE(?, adapter_version) WHERE id = ?"
                + _ONLY_IF[only_if is not None],
                (
                    status,
                    utc_iso(at),
                    json.dumps(metrics or {}, default=float),
                    error,
                    adapter_version,
                    run_id,
                    *([only_if] if only_if is not None else []),
                ),
            )
            if cur.rowcount == 0 and (only_if is None or not self._exists(conn, run_id)):
                raise StoreError(f"There is no training run {run_id!r}.")
        return self._get_run(run_id)

    @staticmethod
    def _exists(conn: Any, run_id: str) -> bool:
        return conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None

    def get_run(self, run_id: str) -> Run | None:
        rows = self._read(f"SELECT {_RUN_COLS} FROM runs WHERE id = ?", (run_id,))
        return _run(rows[0]) if rows else None

    def _get_run(self, run_id: str) -> Run:
        run = self.get_run(run_id)
        assert run is not None
        return run

    def list_runs(self, limit: int = 20) -> list[Run]:
        """Newest first."""
        rows = self._read(
            f"SELECT {_RUN_COLS} FROM runs ORDER BY started_at DESC, id DESC LIMIT ?", (limit,)
        )
        return [_run(r) for r in rows]


    def set_run_metrics(self, run_id: str, metrics: dict[str, Any]) -> Run:
        """Replace a going run's metrics (its progress) without finishing it."""
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE runs SET metrics = ? WHERE id = ?",
                (json.dumps(metrics, default=float), run_id),
            )
            if cur.rowcount == 0:
                raise StoreError(f"There is no training run {run_id!r}.")
        return self._get_run(run_id)

