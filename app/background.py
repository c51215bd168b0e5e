"""What a running service owns besides the store: lock, spool watcher, notifications,
the training gate and the local API, each started and stopped in one place.

One worker thread does all store work the outside world triggers (spool
changes, notification buttons), fed by a queue: callbacks from watchdog's and
desktop-notifier's threads only hand work over and never touch the store or
any GUI object themselves.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rltray.app.errors import ExitCode, UserError

if TYPE_CHECKING:
    from rltray.app.service import Service
    from rltray.app.spool import IngestReport

log = logging.getLogger(__name__)
POLL_SECONDS = 5.0  # safety net for file systems that do not deliver change events


class Background:
    """Started by ``Service.start()``; ``stop()`` is safe to call twice."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.lock: Any = None
        self.notifier: Any = None
        self.scheduler: Any = None
        self.api: Any = None
        self.on_ingest: Callable[[IngestReport], None] | None = None  # for the headless log
        self._observer: Any = None
        self._work: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._worker = threading.Thread(target=self._run, name="rltray-worker", daemon=True)
        self._ordinal = 0  # turns seen, for "ask about every Nth turn"
        self.snoozed_until: datetime | None = None

    # -- lifecycle ---------------------------------------------------------------

    def start(self, *, notifications: bool, scheduler: bool, api: bool) -> None:
        from filelock import Timeout
        from rltray.app import instance

        self.lock = instance.service_lock(self.service.paths)
        try:
            self.lock.acquire(timeout=1.0)  # a CLI may probe the lock for a moment
        except Timeout:
            self.lock = None
            raise UserError(
                "rltray is already running for this data folder; use `rltray status` to "
                "talk to it.",
                ExitCode.ALREADY_RUNNING,
            ) from None
        try:
            self.service.runner().reconcile()
            if notifications:
                self._start_notifier()
            self._worker.start()
            self._observer = _watch(self.service.paths.spool_incoming, self._wake)
            self._wake.set()  # store what waited while nobody ran
            if scheduler:
                from rltray.app import autotrain
                from rltray.app.scheduler import Scheduler

                self.scheduler = Scheduler(lambda: autotrain.gate(self.service))
                self.scheduler.start()
            if api:
                self._start_api()
            self.service.store.log_event("service", "service started")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()
        self._work.put(None)
        for part, how in (
            (self.api, "stop"),
            (self.scheduler, "shutdown"),
            (self._observer, "stop"),
            (self.notifier, "close"),
        ):
            if part is not None:
                with contextlib.suppress(Exception):
                    getattr(part, how)()
        if self._worker.is_alive():
            self._worker.join(timeout=10)
        runner = self.service._runner
        if runner is not None and runner.running():
            runner.close()  # pause: the trainer checkpoints and resumes next time
        if self.lock is not None:
            with contextlib.suppress(Exception):
                self.service.store.log_event("service", "service stopped")
            self.lock.release()
            self.lock = None

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the worker thread (any thread may call this)."""
        self._work.put(job)
        self._wake.set()

    # -- the worker ----------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()
            while True:
                try:
                    job = self._work.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    return
                self._safely(job)
            if not self._stopping.is_set():
                self._safely(self._ingest)
                self._safely(self._backup_if_due)

    def _safely(self, job: Callable[[], None]) -> None:
        try:
            job()
        except Exception as exc:  # one failure must not stop capture
            log.warning("background job failed: %s: %s", type(exc).__name__, exc)
            with contextlib.suppress(Exception):
                self.service.store.log_event("service", f"{type(exc).__name__}: {exc}")

    def _ingest(self) -> None:
        report = self.service.ingest()
        if self.on_ingest is not None:
            self.on_ingest(report)
        for turn_id in report.new_turns:
            self._ordinal += 1
            self._maybe_ask(turn_id, report.durations.get(turn_id))
        if report.turns or report.commands:
            self.service.changed()

    def _backup_if_due(self) -> None:
        """The daily database copy: a service that runs for weeks opens the database once."""
        from rltray.app import dbbackup

        store = self.service.store
        with store._lock:  # the backup reads through the store's own connection
            dbbackup.take_if_due(store.conn, store.path)

    # -- notifications ---------------------------------------------------------------

    def _start_notifier(self) -> None:
        from rltray.app.notifier import Notifier

        def on_rating(turn_id: int, value: int, comment: str | None) -> None:
            self.submit(lambda: self._rate_from_notification(turn_id, value, comment))

        self.notifier = Notifier(on_rating)
        self.notifier.start()

    def _rate_from_notification(self, turn_id: int, value: int, comment: str | None) -> None:
        self.service.rate_turn(turn_id, value, comment=comment, source="notification")

    def _maybe_ask(self, turn_id: int, seconds: float | None = None) -> None:
        if self.notifier is None:
            return
        from rltray.app import config
        from rltray.app.notifier import preview, title_for
        from rltray.app.notify_policy import should_ask

        turn = self.service.store.get_turn(turn_id)
        if turn is None:
            return
        settings = config.load_config(self.service.paths).notify
        ask, _reason = should_ask(
            seconds,
            self._ordinal,
            settings,
            datetime.now().astimezone(),
            self.snoozed_until,
            turn.rating is not None,
        )
        if ask:
            self.notifier.ask(turn.id, title_for(turn.agent, turn.cwd), preview(turn.response))

    # -- local API ---------------------------------------------------------------------

    def _start_api(self) -> None:
        from rltray.app.api import ApiServer
        from rltray.app.secrets import Secrets

        secrets = Secrets()
        token = secrets.ensure("api-token")
        self.api = ApiServer(self.service, token, token_in_file=not secrets.persistent)
        self.api.start()


def _watch(folder: object, wake: threading.Event) -> Any:
    """Wake the worker on any spool change; None when watching is unavailable."""
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
