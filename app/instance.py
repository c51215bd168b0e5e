"""One running rltray service per data folder, and how the CLI finds out whether it runs.

The service (tray or `rltray serve`) holds ``rltray.lock`` for its whole life;
the OS drops the lock when the process dies, so a killed service never blocks
the next start. While the service runs it owns the spool: the CLI leaves
ingest to it and only waits briefly for the spool to drain. (filelock does the
per-OS locking; nothing here is worth writing ourselves.)
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from filelock import BaseFileLock
    from rltray.app.paths import Paths

DRAIN_WAIT_S = 2.0


def service_lock(paths: Paths) -> BaseFileLock:
    """The single-instance lock, created 0600 (the data folder is private, so is its lock)."""
    from filelock import FileLock

    return FileLock(str(paths.lock), mode=0o600, is_singleton=False)


def service_running(paths: Paths) -> bool:
    """Whether another process holds the service lock right now."""
    if not paths.lock.exists():
        return False
    return held(service_lock(paths))


def held(lock: BaseFileLock) -> bool:
    """Whether someone else holds ``lock`` right now (a fresh lock object: not us)."""
    from filelock import Timeout

    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    except OSError:
        return False  # an unreadable lock file: nobody can hold it either
    lock.release()
    return False


def count_records(folder: os.PathLike[str] | str) -> int:
    """Hook records (``*.json``, not hidden temp files) in a spool folder; 0 if unreadable."""
    try:
        with os.scandir(folder) as entries:
            return sum(1 for e in entries if e.name.endswith(".json") and e.name[0] != ".")
    except OSError:
        return 0


def pending_records(paths: Paths) -> int:
    return count_records(paths.spool_incoming)


def wait_for_drain(paths: Paths, timeout: float = DRAIN_WAIT_S) -> int:
    """Give the running service a moment to store what just arrived; records still waiting."""
    deadline = time.monotonic() + timeout
    left = pending_records(paths)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = pending_records(paths)
    return left
