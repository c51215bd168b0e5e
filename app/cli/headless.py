"""`rltray serve`: the tray process without an icon (servers, CI, no display).

The Service does the work (single-instance lock, spool watcher, notifications,
training gate, local API); this module only runs it in the foreground until
Ctrl+C or SIGTERM and reports what it stored.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING

from rltray.app.errors import ExitCode, UserError

SIGNAL_POLL_S = 0.5  # how soon a SIGTERM that landed on a worker thread is acted on

if TYPE_CHECKING:
    from rltray.app.cli.context import Context
    from rltray.app.spool import IngestReport


def serve(ctx: Context, once: bool = False, stop: threading.Event | None = None) -> int:
    from rltray.app import instance

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
    runtime.on_ingest = lambda report: _report(ctx, report)
    port = runtime.api_port
    where = f"; local API on 127.0.0.1:{port}" if port is not None else ""
    ctx.say(
        f"rltray is running headless; data folder {service.paths.home}{where}. "
        "Press Ctrl+C (or send SIGTERM) to stop.",
        err=True,
    )
    try:
        # a timed wait, never a bare one: a signal the kernel hands to another thread only
        # sets Python's flag, and the handler runs when the main thread next wakes; blocked
        # in an untimed wait it never does and SIGTERM is lost (issue 18)
        while not stop.wait(SIGNAL_POLL_S):
            pass
    finally:
        runtime.close()
        ctx.say("rltray stopped.", err=True)
    return ExitCode.OK


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
