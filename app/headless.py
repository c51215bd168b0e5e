"""`rltray serve`: the tray process without an icon (servers, CI, no display).

Holds the single-instance lock, then ingests hook records the moment they
land in the spool (watchdog), with a slow poll as a safety net for file
systems that do not deliver events.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING

from rltray.app.errors import ExitCode, UserError

if TYPE_CHECKING:
    from rltray.app.context import Context
    from rltray.app.spool import IngestReport

POLL_SECONDS = 5.0


def serve(ctx: Context, once: bool = False, stop: threading.Event | None = None) -> int:
    from filelock import Timeout
    from rltray.app import instance
    from rltray.app.paths import Paths

    paths = Paths.from_env(ctx.env).ensure()
    lock = instance.service_lock(paths)
    try:
        # A CLI command may probe the lock for a moment (instance.service_running): wait that out.
        lock.acquire(timeout=1.0)
    except Timeout:
        raise UserError(
            "rltray is already running for this data folder; use `rltray status` to talk to it.",
            ExitCode.ALREADY_RUNNING,
        ) from None
    try:
        service = ctx.service(ingest=False)
        _report(ctx, service.ingest())
        if once:
            return ExitCode.OK
        stop = stop or threading.Event()
        wake = threading.Event()
        _install_signal_handlers(stop, wake)
        observer = _watch(paths.spool_incoming, wake)
        ctx.say(
            f"rltray is running headless; data folder {paths.home}. Press Ctrl+C to stop.",
            err=True,
        )
        service.store.log_event("service", "headless service started")
        try:
            while not stop.is_set():
                wake.wait(POLL_SECONDS)
                wake.clear()
                if stop.is_set():
                    break
                _report(ctx, service.ingest())
        finally:
            if observer is not None:
                observer.stop()
                observer.join(timeout=2)
            service.store.log_event("service", "headless service stopped")
        return ExitCode.OK
    finally:
        lock.release()


def _report(ctx: Context, report: IngestReport) -> None:
    if report.turns or report.commands or report.rejected:
        ctx.say(
            f"ingested {report.turns} turn(s), {report.commands} command(s), "
            f"rejected {report.rejected}",
            err=True,
        )
    for message in report.messages:
        ctx.warn(message)


def _watch(folder: object, wake: threading.Event) -> object | None:
    """Wake the loop on any spool change; None when watching is unavailable."""
    try:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:
        return None

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: object) -> None:
            wake.set()

    observer = Observer()
    observer.schedule(Handler(), str(folder), recursive=False)
    observer.daemon = True
    observer.start()
    return observer


def _install_signal_handlers(stop: threading.Event, wake: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return

    def handle(signum: int, frame: object) -> None:
        stop.set()
        wake.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
