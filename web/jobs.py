"""Long set-up steps the wizard starts and then polls: run commands, report their real progress.

The jobs: creating a separate trainer environment (a venv with torch or mlx), minutes
of pip; checking a remote training machine step by step, up to a minute or two. The
window must not wait on a request that long, so a job runs in a thread (commands one
``Popen`` at a time, or a function of this process) and the page polls
``/api/jobs/<id>``. pip is run with ``--progress-bar raw``, whose ``Progress N of M``
lines are its real download progress."""

from __future__ import annotations

import re
import subprocess
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)")
TAIL = 40


@dataclass
class Job:
    id: str
    title: str
    status: str = "running"  # running | done | failed
    step: str = ""
    percent: float | None = None
    lines: list[str] = field(default_factory=list)
    error: str | None = None
    result: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status,
            "step": self.step,
            "percent": self.percent,
            "log": self.lines[-TAIL:],
            "error": self.error,
            "result": self.result,
        }


class Jobs:
    """The web app's running and finished jobs (kept in memory for the app's lifetime)."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def running(self, title: str) -> Job | None:
        with self._lock:
            return next(
                (j for j in self._jobs.values() if j.title == title and j.status == "running"),
                None,
            )

    def start(
        self,
        title: str,
        steps: Sequence[tuple[str, Sequence[str]]],
        on_done: Callable[[Job], None] | None = None,
    ) -> Job:
        """Run each (label, argv) in order; the first failing one fails the job."""
        job = Job(uuid.uuid4().hex[:12], title)
        with self._lock:
            self._jobs[job.id] = job
        thread = threading.Thread(
            target=self._run, args=(job, list(steps), on_done), name="rltray-job", daemon=True
        )
        thread.start()
        return job

    def start_call(self, title: str, label: str, work: Callable[[Job], None]) -> Job:
        """Run ``work(job)`` in a thread: it fills ``job.result`` (and ``job.lines``, if it
        has a log) as it goes; raising fails the job with the exception's sentence. For
        work done in this process (the remote check reads the keyring the app holds)."""
        job = Job(uuid.uuid4().hex[:12], title, step=label)
        with self._lock:
            self._jobs[job.id] = job

        def go() -> None:
            try:
                work(job)
                job.percent, job.status = 100.0, "done"
            except Exception as exc:  # the page shows it; the app goes on
                job.error, job.status = str(exc) or type(exc).__name__, "failed"

        threading.Thread(target=go, name="rltray-job", daemon=True).start()
        return job

    def _run(
        self,
        job: Job,
        steps: list[tuple[str, Sequence[str]]],
        on_done: Callable[[Job], None] | None,
    ) -> None:
        try:
            for label, argv in steps:
                job.step, job.percent = label, None
                code = self._command(job, argv)
                if code != 0:
                    job.error = f"{label} failed (exit code {code}); the log below says why."
                    job.status = "failed"
                    return
            if on_done is not None:
                on_done(job)
            job.percent = 100.0
            job.status = "done"
        except Exception as exc:  # the page shows it; the app goes on
            job.error = f"{type(exc).__name__}: {exc}"
            job.status = "failed"

    def _command(self, job: Job, argv: Sequence[str]) -> int:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                bufsize=1,
            )
        except OSError as exc:
            job.lines.append(f"could not run {argv[0]}: {exc}")
            return 127
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            match = _PROGRESS.match(line)
            if match:
                done, total = int(match.group(1)), int(match.group(2))
                job.percent = round(100.0 * done / total, 1) if total else None
                continue
            if line:
                job.lines.append(line)
                del job.lines[:-TAIL]
        return proc.wait()
