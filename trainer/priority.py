"""Be a polite background process: low CPU/IO priority, and die with the parent.

Why: training runs while the user works; it must never make the laptop feel
slow (low priority) and must never linger as an orphan burning battery after the
tray quit or crashed (parent watch). ActivityWatch's children do the same.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable

#: POSIX niceness the trainer runs at (19 is the lowest priority; 10 still lets the
#: training finish on a busy machine while any interactive process wins).
NICENESS = 10


def lower_priority() -> str:
    """Lower this process's CPU (and, where possible, IO) priority; say what was done.

    POSIX: ``os.nice`` up to :data:`NICENESS` (never raises it back if already
    lower) and idle-class IO on Linux via psutil. Windows: BELOW_NORMAL priority
    class via psutil. Failures are not fatal: a trainer at normal priority is
    better than no trainer.
    """
    done: list[str] = []
    if sys.platform == "win32":
        try:
            import psutil

            psutil.Process().nice(psutil.BELOW_NORMAL_PRIORITY_CLASS)
            done.append("below-normal priority class")
        except Exception as exc:
            done.append(f"priority unchanged ({type(exc).__name__})")
        return ", ".join(done)
    try:
        current = os.nice(0)
        if current < NICENESS:
            os.nice(NICENESS - current)
        done.append(f"nice {os.nice(0)}")
    except OSError as exc:
        done.append(f"nice unchanged ({exc.strerror})")
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import psutil

            psutil.Process().ionice(psutil.IOPRIO_CLASS_IDLE)
            done.append("idle IO")
    return ", ".join(done)


class ParentWatch:
    """A daemon thread that calls ``on_death`` once when the parent process is gone.

    Detection: on POSIX an orphan is re-parented, so ``os.getppid()`` changes; on
    Windows the parent pid never changes, so the original parent's existence and
    creation time are checked through psutil (a reused pid has a later creation time).
    """

    def __init__(self, on_death: Callable[[], None], interval_s: float = 1.0) -> None:
        self.on_death = on_death
        self.interval_s = interval_s
        self.parent_pid = os.getppid()
        self._parent_created = self._create_time(self.parent_pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="parent-watch", daemon=True)

    @staticmethod
    def _create_time(pid: int) -> float | None:
        try:
            import psutil

            return psutil.Process(pid).create_time()
        except Exception:
            return None

    def parent_alive(self) -> bool:
        """True while the process that started us still runs."""
        if sys.platform != "win32":
            return os.getppid() == self.parent_pid
        created = self._create_time(self.parent_pid)
        return created is not None and created == self._parent_created

    def start(self) -> ParentWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self.parent_alive():
                self.on_death()
                return
