"""Adapter versions: which exists, which is active, what it scored and where it is published."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from rltray.app.store.base import StoreBase, StoreError, _check_choice, utc_iso

ADAPTER_STATUSES = ("candidate", "active", "rejected", "rolled-back", "superseded")


@dataclass(frozen=True)
class Adapter:
    version: int
    base_model: str
    parent_version: int | None
    status: str
    path: str
    metrics: dict[str, Any]
    ollama_tag: str | None
    baseline: float | None
    created_at: str
    #: sha256 of the weights and config (file name -> hex digest) as the result was applied,
    #: checked before the version is made active again; None for a version from before
    #: they were recorded (migration m014)
    files: dict[str, str] | None = None


_ADAPTER_COLS = (
    "version, base_model, parent_version, status, path, metrics, ollama_tag, baseline,"
    " created_at, files"
)


def _adapter(row: tuple[Any, ...]) -> Adapter:
    files = json.loads(row[9]) if row[9] else None
    return Adapter(
        row[0], row[1], row[2], row[3], row[4], json.loads(row[5] or "{}"), row[6], row[7], row[8],
        files if isinstance(files, dict) else None,
    )


class Adapters(StoreBase):
    """The versions the runner registered; exactly one (or none) is active."""

    # -- adapters ------------------------------------------------------------

    def add_adapter(
        self,
        base_model: str,
        path: str | os.PathLike[str],
        *,
        parent_version: int | None = None,
        status: str = "candidate",
        metrics: dict[str, Any] | None = None,
        ollama_tag: str | None = None,
        baseline: float | None = None,
        version: int | None = None,
        files: dict[str, str] | None = None,
    ) -> Adapter:
        """Register an adapter folder; the version is the next integer unless given.

        ``files``: the sha256 of its weights and config (``versions.file_digests``).
        """
        _check_choice("adapter status", status, ADAPTER_STATUSES)
        if status == "active":
            raise StoreError(
                "Register an adapter as a candidate, then activate it with set_adapter_status."
            )
        with self._write() as conn:
            if version is None:
                (version,) = conn.execute(
                    "SELECT COALESCE(MAX(version), 0) + 1 FROM adapters"
                ).fetchone()
            conn.execute(
                "INSERT INTO adapters (version, base_model, parent_version, status, path, metrics,"
                " ollama_tag, baseline, created_at, files) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    version,
                    base_model,
                    parent_version,
                    status,
                    str(path),
                    json.dumps(metrics or {}, default=float),
                    ollama_tag,
                    baseline,
                    utc_iso(),
                    None if files is None else json.dumps(files, sort_keys=True),
                ),
            )
        return self._get_adapter(int(version))

    def set_adapter_status(self, version: int, status: str) -> Adapter:
        """Change an adapter's status; activating one marks the previous active one superseded.

        (Rolling back is two calls: the current version to ``rolled-back``, then
        the older one to ``active``.)
        """
        _check_choice("adapter status", status, ADAPTER_STATUSES)
        with self._write() as conn:
            if (
                conn.execute("SELECT 1 FROM adapters WHERE version = ?", (version,)).fetchone()
                is None
            ):
                raise StoreError(f"There is no adapter version {version}.")
            if status == "active":
                conn.execute(
                    "UPDATE adapters SET status = 'superseded'"
                    " WHERE status = 'active' AND version != ?",
                    (version,),
                )
            conn.execute("UPDATE adapters SET status = ? WHERE version = ?", (status, version))
        return self._get_adapter(version)

    def set_adapter_ollama_tag(self, version: int, tag: str | None) -> Adapter:
        with self._write() as conn:
            if (
                conn.execute(
                    "UPDATE adapters SET ollama_tag = ? WHERE version = ?", (tag, version)
                ).rowcount
                == 0
            ):
                raise StoreError(f"There is no adapter version {version}.")
        return self._get_adapter(version)

    def set_adapter_publication(
        self, version: int, tag: str | None, publication: dict[str, Any]
    ) -> Adapter:
        """Record where a version is published (kept in its metrics JSON, key ``publication``).

        ``tag`` replaces ``ollama_tag`` when given; a failed attempt (``{"error": …}``)
        keeps the tag an earlier success set.
        """
        with self._write() as conn:
            row = conn.execute(
                "SELECT metrics FROM adapters WHERE version = ?", (version,)
            ).fetchone()
            if row is None:
                raise StoreError(f"There is no adapter version {version}.")
            metrics = json.loads(row[0] or "{}")
            metrics["publication"] = publication
            conn.execute(
                "UPDATE adapters SET metrics = ?, ollama_tag = COALESCE(?, ollama_tag)"
                " WHERE version = ?",
                (json.dumps(metrics, default=float), tag, version),
            )
        return self._get_adapter(version)

    def get_adapter(self, version: int) -> Adapter | None:
        rows = self._read(f"SELECT {_ADAPTER_COLS} FROM adapters WHERE version = ?", (version,))
        return _adapter(rows[0]) if rows else None

    def _get_adapter(self, version: int) -> Adapter:
        adapter = self.get_adapter(version)
        assert adapter is not None
        return adapter

    def active_adapter(self) -> Adapter | None:
        rows = self._read(f"SELECT {_ADAPTER_COLS} FROM adapters WHERE status = 'active'")
        return _adapter(rows[0]) if rows else None

    def list_adapters(self) -> list[Adapter]:
        """Newest version first."""
        return [
            _adapter(r)
            for r in self._read(f"SELECT {_ADAPTER_COLS} FROM adapters ORDER BY version DESC")
        ]

    def delete_adapter(self, version: int) -> Adapter:
        """Remove an old version's row (never the active one); returns what it was.

        Versions trained on top of it take its parent as theirs, so the lineage
        stays a chain and rolling back from them skips the deleted one.
        """
        with self._write() as conn:
            row = conn.execute(
                f"SELECT {_ADAPTER_COLS} FROM adapters WHERE version = ?", (version,)
            ).fetchone()
            if row is None:
                raise StoreError(f"There is no adapter version {version}.")
            gone = _adapter(row)
            if gone.status == "active":
                raise StoreError(
                    f"v{version} is in use; activate another version before deleting it."
                )
            conn.execute(
                "UPDATE adapters SET parent_version = ? WHERE parent_version = ?",
                (gone.parent_version, version),
            )
            conn.execute("DELETE FROM adapters WHERE version = ?", (version,))
        return gone
