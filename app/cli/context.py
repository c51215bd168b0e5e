"""What a command needs from the outside world (environment, streams), injectable for tests.

Kept apart from ``cli.py`` so the modules a command calls (doctor, hooks,
headless) can take a Context without importing the argument parser back.
Every piece of captured or user text goes through ``say`` as plain text:
rich never reads it as markup, so an answer containing ``[/api/orders]``
prints as written instead of crashing the command after it saved a rating.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, TYPE_CHECKING, Any

from rltray.app import instance

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text
    from rltray.app.service import Service

PROGRESS_FROM = 300  # waiting records worth a progress bar


class Context:
    """One command's environment; opens the data folder on first use and closes it at the end."""

    def __init__(
        self,
        env: dict[str, str] | None = None,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
        stdin: IO[str] | None = None,
    ) -> None:
        self.env = dict(os.environ if env is None else env)
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.stdin = stdin or sys.stdin
        self._service: Service | None = None
        self._out: Console | None = None
        self._err: Console | None = None

    @property
    def out(self) -> Console:
        if self._out is None:
            self._out = _console(self.stdout)
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:
            self._err = _console(self.stderr)
        return self._err

    def say(self, *parts: str | tuple[str, str], err: bool = False) -> None:
        """Print one line built from plain strings and ``(text, style)`` pairs; no markup read."""
        from rich.text import Text

        line = Text()
        for part in parts:
            if isinstance(part, tuple):
                line.append(part[0], style=part[1])
            else:
                line.append(part)
        (self.err if err else self.out).print(line, soft_wrap=True)

    def warn(self, message: str) -> None:
        self.say((message, "yellow"), err=True)

    def confirm(self, question: str) -> bool:
        """Ask ``question [y/N]`` on a terminal; anything but y or yes, or no terminal, is no.

        No terminal means no: a script or a pipe never answers yes by accident.
        """
        isatty = getattr(self.stdin, "isatty", None)
        if isatty is None or not isatty():
            return False
        self.stdout.write(f"{question} [y/N] ")
        self.stdout.flush()
        return self.stdin.readline().strip().lower() in ("y", "yes")

    def service(self, ingest: bool = True) -> Service:
        """Open the data folder once; make sure waiting hook records are stored first.

        When the service runs it owns the spool: wait briefly for it to drain,
        then store whatever is still left ourselves (a record stored twice is a
        no-op), so `rltray good` never rates an answer older than the one just shown.
        """
        if self._service is None:
            from rltray.app.paths import Paths
            from rltray.app.service import Service

            self._service = Service(Paths.from_env(self.env))
            if ingest:
                self._ingest(self._service)
        return self._service

    def _ingest(self, service: Service) -> None:
        paths = service.paths
        if instance.service_running(paths) and not instance.wait_for_drain(paths):
            return
        waiting = instance.pending_records(paths)
        if waiting >= PROGRESS_FROM:
            report = self._ingest_with_progress(service, waiting)
        else:
            report = service.ingest()
        for message in report.messages:
            self.warn(message)

    def _ingest_with_progress(self, service: Service, waiting: int) -> Any:
        from rich.progress import Progress

        self.warn(f"Storing {waiting} waiting hook records first…")
        with Progress(console=self.err, transient=True) as bar:
            task = bar.add_task("storing", total=waiting)
            return service.ingest(
                progress=lambda done, total: bar.update(task, completed=done, total=total)
            )

    def close(self) -> None:
        if self._service is not None:
            self._service.close()
            self._service = None

    def print_json(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def _console(stream: IO[str]) -> Console:
    from rich.console import Console

    return Console(file=stream, highlight=False, soft_wrap=True)


def plain(text: str) -> Text:
    """Captured text as a rich Text, so table cells never interpret it as markup."""
    from rich.text import Text

    return Text(text)
