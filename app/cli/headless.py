"""`rltray serve`: the tray process without an icon (servers, CI, no display).

The Service does the work (single-instance lock, spool watcher, notifications,
training gate, local API); this module only runs it in the foreground until
Ctrl+C or SIGTERM and reports what it stored: the first arrival at once (the
hooks work) and then a summary at most every ``SUMMARY_EVERY_S``, never a line
per hook event, which buried everything else in the terminal (issue 22).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rltray.app.errors import ExitCode, UserError

SIGNAL_POLL_S = 0.5  # how soon a SIGTERM that landed on a worker thread is acted on
SUMMARY_EVERY_S = 600.0  # at most one "stored ..." line per this many seconds

if TYPE_CHECKING:
    from rltray.app.cli.context import Context
    from rltray.app.runtime import Runtime
    from rltray.app.spool import IngestReport


def serve(
    ctx: Context,
    once: bool = False,
    stop: threading.Event | None = None,
    open_setup: bool = False,
    platform: str = sys.platform,
) -> int:
    """Run until Ctrl+C or SIGTERM (``stop`` in tests); exit 0 after a clean stop.

    ``open_setup``: a display exists though no tray can show (`rltray run`), so the
    first run still opens the setup wizard, as the tray does. On macOS the main
    thread runs the main run loop while it waits (desktop/runloop.py), which
    notification buttons need.
    """
    from rltray.app import instance
    from rltray.app.desktop.runloop import main_thread_wait

    service = ctx.service(ingest=False)
    if once:
        if instance.service_running(service.paths):
            raise UserError(
                "rltray is already running for this data folder; it stores hook records itself.",
                ExitCode.ALREADY_RUNNING,
            )
        _report(ctx, service.ingest())
        return ExitCode.OK
    stop = stop or threading.Event()
    _install_signal_handlers(stop)
    from rltray.app.runtime import compose
    from rltray.web.server import SettingsWeb

    runtime = compose(service, SettingsWeb())
    summary = IngestSummary(lambda line: ctx.say(line, err=True))

    def on_ingest(report: IngestReport) -> None:
        summary.add(report)
        for message in report.messages:
            ctx.warn(message)

    runtime.on_ingest = on_ingest
    port = runtime.api_port
    where = f"; local API on 127.0.0.1:{port}" if port is not None else ""
    ctx.say(
        f"rltray is running headless; data folder {service.paths.home}{where}. "
        "Press Ctrl+C (or send SIGTERM) to stop.",
        err=True,
    )
    wait, problem = main_thread_wait(stop, platform)
    if problem:
        ctx.warn(problem)
    if service.needs_setup():
        _first_run(ctx, runtime, open_setup)
    try:
        # a timed wait, never a bare one: a signal the kernel hands to another thread only
        # sets Python's flag, and the handler runs when the main thread next wakes; blocked
        # in an untimed wait it never does and SIGTERM is lost (issue 18)
        while not wait(SIGNAL_POLL_S):
            pass
    finally:
        runtime.close()
        summary.flush()
        ctx.say("rltray stopped.", err=True)
    return ExitCode.OK


def _first_run(ctx: Context, runtime: Runtime, open_setup: bool) -> None:
    """Open the setup wizard where a window can show; otherwise name the next step."""
    if open_setup:
        try:
            runtime.open_settings("setup")
            ctx.say("Opened the setup wizard (agents, model, schedule).", err=True)
            return
        except Exception as exc:  # the service works without the window; say how to get it
            ctx.warn(f"could not open the setup wizard ({exc})")
    ctx.say(
        "Next: `rltray setup` opens the setup wizard (agents, model, schedule); "
        "`rltray hooks install` connects your coding agents right away.",
        err=True,
    )


class IngestSummary:
    """Says what ingest stored: the first arrival at once, then at most every ``every_s``.

    Counts pile up between lines and ``flush`` (at stop) says the rest, so nothing
    stored goes unsaid. Called on the runtime's worker thread only.
    """

    def __init__(
        self,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        every_s: float = SUMMARY_EVERY_S,
    ) -> None:
        self._say, self._clock, self._every_s = say, clock, every_s
        self._turns = self._commands = self._rejected = 0
        self._said_at: float | None = None  # None until the first line

    def add(self, report: IngestReport) -> None:
        self._turns += report.turns
        self._commands += report.commands
        self._rejected += report.rejected
        now = self._clock()
        if self._said_at is None or now - self._said_at >= self._every_s:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        if not (self._turns or self._commands or self._rejected):
            return
        counts = f"stored {self._turns} turn(s), {self._commands} command(s)"
        if self._rejected:
            counts += f", rejected {self._rejected}"
        if self._said_at is None:
            minutes = round(self._every_s / 60)
            counts += f" (the hooks work; from now on one summary every {minutes} min at most)"
        else:
            counts += " since the last summary"
        self._say(counts)
        self._turns = self._commands = self._rejected = 0
        self._said_at = self._clock() if now is None else now


def _report(ctx: Context, report: IngestReport) -> None:
    if report.turns or report.commands or report.rejected:
        ctx.say(
            f"ingested {report.turns} turn(s), {report.commands} command(s), "
            f"rejected {report.rejected}",
            err=True,
        )
    for message in report.messages:
        ctx.warn(message)


def _install_signal_handlers(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return

    def handle(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
