"""Be a polite background process: low CPU/IO priority, and die with the parent.

Why: training runs while the user works; it must never make the laptop feel
slow (low priority) and must never linger as an orphan burning battery after the
tray quit or crashed (parent watch). ActivityWatch's children do the same.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Mapping

#: POSIX niceness the trainer runs at (19 is the lowest priority; 10 still lets the
#: training finish on a busy machine while any interactive process wins).
NICENESS = 10

#: The tray's pid, which the runner passes: the process whose death stops the trainer.
PARENT_PID_ENV = "RLTRAY_TRAINER_PARENT_PID"


def parent_pid_from_env(env: Mapping[str, str] | None = None) -> int | None:
    """The pid in :data:`PARENT_PID_ENV`, or None (watch the parent process instead)."""
    value = (os.environ if env is None else env).get(PARENT_PID_ENV, "")
    return int(value) if value.strip().isdigit() else None


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

    The parent is ``parent_pid`` when given (the tray's pid, which the runner passes
    in :data:`PARENT_PID_ENV`), else the process that started us. Why the explicit
    pid: under a Windows venv, ``Scripts\\python.exe`` is a redirector that starts
    the real interpreter and outlives the tray, so the trainer's own parent never
    died and the watch never fired.

    Detection: a given pid, and any parent on Windows, by its existence and creation
    time through psutil (a reused pid has a later creation time); otherwise, on POSIX,
    an orphan is re-parented, so ``os.getppid()`` changes.
    """

    def __init__(self, on_death: Callable[[], None], interval_s: float = 1.0,
                 parent_pid: int | None = None) -> None:
        self.on_death = on_death
        self.interval_s = interval_s
        self.explicit = parent_pid is not None
        self.parent_pid = os.getppid() if parent_pid is None else parent_pid
        self._parent_created = self._create_time(self.parent_pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="parent-watch", daemon=True)

    @staticmethod
    def _create_time(pid: int) -> float | None:
        """When ``pid`` started; None when it is gone (a zombie, dead but not yet reaped,
        counts as gone)."""
        try:
            import psutil

            proc = psutil.Process(pid)
            return None if proc.status() == psutil.STATUS_ZOMBIE else proc.create_time()
        except Exception:
            return None

    def parent_alive(self) -> bool:
        """True while the watched process still runs."""
        if sys.platform != "win32" and not self.explicit:
            return os.getppid() == self.parent_pid
        if importlib.util.find_spec("psutil") is None:  # no creation times: does it exist
            return _pid_exists(self.parent_pid)
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


def _pid_exists(pid: int) -> bool:
    """Whether ``pid`` runs (POSIX); True where that cannot be told without psutil."""
    if sys.platform == "win32":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, owned by someone else
    return True
