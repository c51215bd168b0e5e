"""How the tray asks the trainer to pause without a console: stdin closing, or a stop file.

Why: the tray used to send SIGTERM, and CTRL_BREAK_EVENT on Windows. A console
control event reaches only processes that share the sender's console, and the
windowed ``rltray.exe`` (and its Run-key start) has none: the send failed, the
failure was swallowed, the trainer trained on for the runner's 60 s and was killed
without a checkpoint. A closed pipe and a file need no console and mean the same on
every OS; the pipe also closes when the tray dies, however it died.

Either of two things stops the trainer (it checkpoints and exits 3, as for SIGTERM):

* end of file on stdin, when ``RLTRAY_TRAINER_STDIN=stop`` (the runner sets it and
  gives the trainer a pipe it closes to stop it). Off otherwise: a trainer started by
  hand or by a test with stdin at /dev/null reads end of file at once;
* the file ``stop`` in the job's folder (``runs/<id>/stop`` for the tray), looked for
  twice a second: what any process can do without a pipe to the trainer. The trainer
  removes it when it acts on it, so running the job again resumes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

STOP_FILE = "stop"
STDIN_ENV = "RLTRAY_TRAINER_STDIN"


def stop_file(job_path: Path | str) -> Path:
    """The stop file of a job: ``stop`` beside its job file."""
    return Path(job_path).parent / STOP_FILE


class StopChannel:
    """Daemon threads that call ``on_stop(reason)`` once, when asked to stop.

    ``stdin`` (a file descriptor) is watched only when given; the stop file always is.
    The descriptor is read with ``os.read``, not through ``sys.stdin``: a daemon thread
    blocked inside a buffered reader holds its lock, and Python aborts at exit when it
    cannot take that lock to close stdin ("could not acquire lock ... at interpreter
    shutdown"): a finished round ended with SIGABRT instead of exit 0.
    """

    def __init__(self, job_path: Path | str, on_stop: Callable[[str], None], *,
                 stdin: int | None = None, interval_s: float = 0.5) -> None:
        self.file = stop_file(job_path)
        self.on_stop = on_stop
        self.stdin = stdin
        self.interval_s = interval_s
        self._closed = threading.Event()
        self._fired = threading.Lock()
        self._threads = [threading.Thread(target=self._watch_file, name="stop-file",
                                          daemon=True)]
        if stdin is not None:
            self._threads.append(threading.Thread(target=self._watch_stdin, name="stop-stdin",
                                                  daemon=True))

    @classmethod
    def from_env(cls, job_path: Path | str, on_stop: Callable[[str], None],
                 env: Mapping[str, str] | None = None) -> StopChannel:
        """The channel this process was started for: stdin too when ``STDIN_ENV`` says stop."""
        env = os.environ if env is None else env
        return cls(job_path, on_stop, stdin=0 if env.get(STDIN_ENV) == "stop" else None)

    def start(self) -> StopChannel:
        for thread in self._threads:
            thread.start()
        return self

    def close(self) -> None:
        self._closed.set()

    def _stop(self, reason: str) -> None:
        if self._closed.is_set() or not self._fired.acquire(blocking=False):
            return
        self.on_stop(reason)

    def _watch_file(self) -> None:
        while not self._closed.wait(self.interval_s):
            if self.file.exists():
                with contextlib.suppress(OSError):
                    self.file.unlink()
                self._stop(f"the stop file {self.file} appeared")
                return

    def _watch_stdin(self) -> None:
        assert self.stdin is not None
        try:
            while os.read(self.stdin, 65536):
                pass  # nothing is said on stdin; only its end counts
        except (OSError, ValueError):
            pass  # a broken pipe ends it too
        self._stop("stdin was closed")
