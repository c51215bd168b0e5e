"""What Ollama's ``latest`` serves for this data folder, and the lock that keeps it honest.

Why this module: the rule is "Ollama's ``<stem>:latest`` serves the store's active
version (the base model when none is active, or when the active one was trained on
another base than the model set up now: :func:`servable`)". Three things broke it: a publish
that ended after a rollback copied its own version to ``latest``; a rollback made
while Ollama was down was never applied; a tray stopped mid-export left the active
version unpublished with nothing to retry it. So:

* every publish and rollback of one data folder runs under :func:`publish_lock`,
  an OS file lock in the data folder (filelock, as the single-instance lock), so
  the tray's threads and a CLI process take turns, and two exports never share work;
* whoever holds the lock points ``latest`` at the version the store says is active
  *then* (re-read under the lock), never at the one it was asked about;
* :func:`write_served` records what ``latest`` serves after each pointing, and
  :func:`needs_settling` compares that record with the store: a cheap check (one
  row, one small file) that the running rltray makes once a minute.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rltray.app import fileio, instance
from rltray.app.training import jobbuild

if TYPE_CHECKING:
    from filelock import BaseFileLock
    from rltray.app.paths import Paths
    from rltray.app.store import Adapter, Store

LOCK_FILE = "publish.lock"
RECORD_FILE = "ollama-latest.json"
RECORD_LIMIT = 64 * 1024


def publish_lock(paths: Paths) -> BaseFileLock:
    """The data folder's publish lock, created 0600; held for a whole publish or rollback.

    ``thread_local=False`` and a fresh object per call: the OS lock is per open file,
    so two threads of the tray exclude each other exactly as two processes do.
    """
    from filelock import FileLock

    return FileLock(
        str(paths.home / LOCK_FILE), mode=0o600, is_singleton=False, thread_local=False
    )


def read_served(paths: Paths) -> dict[str, Any]:
    """The last record of what ``latest`` serves (``{}`` when none or unreadable)."""
    try:
        data = json.loads(fileio.read_regular_file(paths.home / RECORD_FILE, RECORD_LIMIT))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_served(paths: Paths, model: str, version: int | None, tag: str | None = None) -> None:
    """``latest`` of ``model`` now serves ``version`` (``None``: the base); call under the lock.

    ``tag``: the name the export gave ``latest`` (``<stem>:latest``). Kept so the app can
    name it without the export's naming rule, which lives with the trainer: the app
    bundle carries no trainer, and `rltray use` there failed on the import.
    """
    record: dict[str, Any] = {"model": model, "version": version}
    if tag:
        record["tag"] = tag
    fileio.write_private_atomic(paths.home / RECORD_FILE, json.dumps(record).encode())


def write_failure(paths: Paths, model: str, version: int | None, error: str, retry: bool) -> None:
    """Pointing ``latest`` at ``version`` failed; ``retry``: only because Ollama was down.

    Keeps what ``latest`` served before (the agents still get it); a failure that is not
    retried by itself waits for `rltray publish`, since it would fail every minute.
    """
    record = read_served(paths)
    if record.get("model") != model:
        record = {"model": model}
    record["failed"] = {"version": version, "error": error, "retry": retry}
    fileio.write_private_atomic(paths.home / RECORD_FILE, json.dumps(record).encode())


def serves(paths: Paths, model: str, version: int | None) -> bool:
    """Whether this folder last pointed ``latest`` of ``model`` at ``version`` successfully."""
    record = read_served(paths)
    return record.get("model") == model and "version" in record and (
        record["version"] == version
    )


def servable(active: Adapter | None, base_model: str) -> Adapter | None:
    """What ``latest`` serves while ``active`` is the active version: it, or the plain base
    (None) when it was trained on another base than ``base_model``, the model set up now.

    Regression (review r1): after training.base_model and ollama.model changed, the
    running rltray's retry and `rltray publish` merged the old base's version onto the
    new model, a pairing nothing judged (same-shaped siblings load without a complaint).
    """
    return None if jobbuild.other_base(active, base_model) else active


def needs_settling(store: Store, paths: Paths, model: str, base_model: str = "") -> bool:
    """Whether ``latest`` is not known to serve what it should (:func:`servable`) and a
    retry may help.

    No: nothing is published (``model`` empty, or the base is to be served and this folder
    never published a version), the record says it does, or the last attempt for this
    version failed for a reason other than Ollama being down (its publication error, or
    the record's failure) — that one waits for `rltray publish`.
    """
    if not model.strip():
        return False
    active = servable(store.active_adapter(), base_model)
    version = active.version if active is not None else None
    record = read_served(paths)
    if active is None and not record and not any(a.ollama_tag for a in store.list_adapters()):
        return False  # nothing was ever published: no `latest` tag to create for the base
    if serves(paths, model, version):
        return False
    publication = (active.metrics.get("publication") or {}) if active is not None else {}
    if publication.get("error") and not publication.get("waiting_for_ollama"):
        return False
    failed = record.get("failed") or {}
    same = record.get("model") == model and failed.get("version") == version
    return not (same and "version" in failed and not failed.get("retry"))


def publishing(paths: Paths) -> bool:
    """Whether a publish or rollback of this data folder holds the lock right now (it ends
    by pointing ``latest`` at the active version, so a retry would only queue behind it)."""
    return instance.held(publish_lock(paths))
