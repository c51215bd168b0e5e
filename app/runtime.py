"""The runtime: everything a running rltray owns around its Service, started and stopped here.

The house (ARCHITECTURE.md): faces (CLI, tray, web pages, notifications, the
API) -> runtime -> service -> domain -> ground. The service holds the intents
and knows nothing of threads or servers; the runtime owns them all: the
single-instance lock, the worker thread and spool watcher, notifications, the
scheduler and the gate's state (its last reason, the manual run), snooze, the
local API, the settings web server and the settings-window child process.
:func:`compose` is the one place that builds a running rltray.

One worker thread does all store work the outside world triggers (spool
changes, notification buttons), fed by a queue: callbacks from watchdog's and
desktop-notifier's threads only hand work over and never touch the store or
any GUI object themselves.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from rltray.app.autopublish import OllamaReturn
from rltray.app.errors import ExitCode, UserError

if TYPE_CHECKING:
    import subprocess

    from rltray.app.service import Service
    from rltray.app.spool import IngestReport

log = logging.getLogger(__name__)
POLL_SECONDS = 5.0  # safety net for file systems that do not deliver change events


class Served(Protocol):
    """The one HTTP server, as the runtime uses it."""

    port: int

    def launch_url(self, page: str = "") -> str: ...

    def stop(self) -> None: ...


class WebFace(Protocol):
    """The settings web app, handed in by the face that builds the runtime
    (``web.server.SettingsWeb``): the runtime never imports ``web/``."""

    def serve(self, runtime: Runtime, api_token: str | None) -> Served: ...

    def open_window(self, url: str, redirect_dir: str) -> subprocess.Popen[bytes]: ...


def compose(
    service: Service,
    web: WebFace | None = None,
    *,
    notifications: bool = True,
    scheduler: bool = True,
    api: bool = True,
) -> Runtime:
    """Build and start this data folder's running rltray (refuses when another one runs).

    The one composition of the parts: the tray (``cli/tray.py``), the headless service
    and the self-test all start rltray through here; ``Runtime.close()`` takes
    down what this started.
    """
    runtime = Runtime(service, web)
    runtime.start(notifications=notifications, scheduler=scheduler, api=api)
    return runtime


class Runtime:
    """Threads, servers and child processes around one Service; ``close()`` is idempotent.

    A runtime that was never started still serves the settings window (``rltray
    settings`` with no tray running): the web server starts on first use.
    """

    def __init__(self, service: Service, web: WebFace | None = None) -> None:
        self.service = service
        self.web_face = web  # None: no settings app (the API and windows are refused)
        self.running = False  # start() succeeded and stop() has not run
        self.lock: Any = None
        self.notifier: Any = None
        self.scheduler: Any = None
        self.api_port: int | None = None  # the one server's port, once endpoint.json names it
        self.api_token: str | None = None  # the bearer the CLI sends (OS keyring)
        self.api_token_in_file = False  # no keyring: endpoint.json (0600) holds the token
        self.on_ingest: Callable[[IngestReport], None] | None = None  # for the headless log
        self._observer: Any = None
        self._work: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._worker = threading.Thread(target=self._run, name="rltray-worker", daemon=True)
        self._ordinal = 0  # turns seen, for "ask about every Nth turn"
        self._asked_through: int | None = None  # the newest turn id considered for a question
        self._rating_mark: tuple[int, str] | None = None  # store.rating_changes' last mark
        self._runs_told: set[str] | None = None  # finished runs already told (None: not read)
        self.snoozed_until: datetime | None = None
        self.gate_reason = "not checked yet"  # the scheduler gate's last word, for status lines
        self._gate_stale = False  # something it depends on changed since: ask again when read
        self._manual_run: str | None = None  # the run "Train now" started, if any
        self.web: Served | None = None  # the settings web app, started on first use
        self._web_lock = threading.Lock()  # the tray and the API thread may both open it
        self.windows: list[subprocess.Popen[bytes]] = []  # settings windows this runtime opened
        self.ollama_return = OllamaReturn(service)  # publishes once Ollama is back

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
            # a rating reversed, withdrawn or deleted while a round trains on it stops it
            self.service.rating_listeners.append(self._ratings_changed)
            if notifications:
                self._start_notifier()
            self._worker.start()
            self._observer = _watch(self.service.paths.spool_incoming, self._wake)
            self._wake.set()  # store what waited while nobody ran
            if scheduler:
                from rltray.app import autotrain
                from rltray.app.scheduler import Scheduler

                self.scheduler = Scheduler(lambda: autotrain.gate(self))
                self.scheduler.start()
                self._gate_stale = True
                self.service.listeners.append(self._gate_changed)
            if api:
                self._start_api()
            self.running = True
            self.service.store.log_event("service", "service started")
        except BaseException:
            self.stop()
            raise

    def close(self) -> None:
        """Stop what ``start`` started, then the windows and web server it opened."""
        self.stop()
        for window in self.windows:
            if window.poll() is None:
                with contextlib.suppress(OSError):
                    window.terminate()
        self.stop_web()

    def stop(self) -> None:
        self.running = False
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()
        self._unpublish()  # first: a CLI must not find a service that is going away
        with contextlib.suppress(ValueError):
            self.service.listeners.remove(self._gate_changed)
        with contextlib.suppress(ValueError):
            self.service.rating_listeners.remove(self._ratings_changed)
        if self.notifier is not None:
            with contextlib.suppress(ValueError):
                self.service.rating_listeners.remove(self.notifier.withdraw)
        for part, how in (
            (self.scheduler, "shutdown"),
            (self._observer, "stop"),
            (self.notifier, "close"),
        ):
            if part is not None:
                with contextlib.suppress(Exception):
                    getattr(part, how)()
        # The worker's end comes after the notifier closed: a Good pressed while the
        # scheduler wound down is a job queued before it, not thrown away behind it.
        self._work.put(None)
        if self._worker.is_alive():
            self._worker.join(timeout=10)
        runner = self.service.runner_if_started()
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
        # Ends at the queue's end marker (``stop`` puts it last), not when stopping begins:
        # the jobs queued before it (a rating pressed while rltray quits) still run.
        while True:
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
                self._safely(self._notice_outside_ratings)
                self._safely(self.service.lessons.refresh)  # at start, and a lesson's day
                self._safely(self._tell_training_outcomes)
                self._safely(self._backup_if_due)
                self._safely(self._publish_if_ollama_is_back)

    def _safely(self, job: Callable[[], None]) -> None:
        try:
            job()
        except Exception as exc:  # one failure must not stop capture
            log.warning("background job failed: %s: %s", type(exc).__name__, exc)
            with contextlib.suppress(Exception):
                self.service.store.log_event("service", f"{type(exc).__name__}: {exc}")

    def _ingest(self) -> None:
        store = self.service.store
        if self._asked_through is None:  # turns stored before this start are not asked about
            self._asked_through = next(iter(store.turn_ids_after(None)), 0)
        report = self.service.ingest()
        if self.on_ingest is not None:
            self.on_ingest(report)
        # Every turn stored since the last pass, whoever ingested it: this worker, the API's
        # POST /api/ingest, or a CLI command that drained the spool while the tray was busy.
        for turn_id in store.turn_ids_after(self._asked_through):
            self._asked_through = turn_id
            self._ordinal += 1
            self._maybe_ask(turn_id, report.durations.get(turn_id))

    def _notice_outside_ratings(self) -> None:
        """Ratings given by another process (`rltray good`, a second window) reach the
        listeners too: their notifications are withdrawn, the tray redraws."""
        turns, self._rating_mark = self.service.store.rating_changes(self._rating_mark)
        settings_moved = self.service.settings_changed_on_disk()  # `rltray config set`, an editor
        if turns or settings_moved:
            self.service.changed(rated=turns)

    def _publish_if_ollama_is_back(self) -> None:
        self.ollama_return.poll()

    def _backup_if_due(self) -> None:
        """The daily database copy: a service that runs for weeks opens the database once."""
        from rltray.app.store import backup as dbbackup

        self.service.store.backup_if_due(dbbackup.take_if_due)

    # -- notifications ---------------------------------------------------------------

    def _start_notifier(self) -> None:
        from rltray.app.desktop import appicon
        from rltray.app.desktop.notifier import Notifier

        def on_rating(turn_id: int, value: int, comment: str | None) -> None:
            # The press's time, taken now: the job may wait in the queue (a busy database)
            # while the user types `/rl` in the agent, and the last word must win.
            pressed = datetime.now(timezone.utc)
            self.submit(lambda: self._rate_from_notification(turn_id, value, comment, pressed))

        self.notifier = Notifier(on_rating, icon=appicon.install() or "rltray")
        self.notifier.start()
        self.service.rating_listeners.append(self.notifier.withdraw)

    def _rate_from_notification(
        self, turn_id: int, value: int, comment: str | None, pressed: datetime | None = None
    ) -> None:
        """Store a press; one the database cannot take now waits in the spool instead.

        The server took the bubble down when it was pressed, so a press dropped here
        would be lost without a trace: a database held by another process past the
        busy timeout (which ``Service.rate`` already waited out) hands it to the spool,
        whose ingest retries it on every pass of this worker, in or after this run.
        """
        try:
            self.service.rate(turn_id, value, comment=comment, source="notification", at=pressed)
        except sqlite3.DatabaseError as exc:  # DatabaseBusy, DatabaseDamaged: not the press's
            if isinstance(exc, sqlite3.IntegrityError):
                raise
            self._spool_press(turn_id, value, comment, pressed or datetime.now(timezone.utc), exc)

    def _spool_press(
        self, turn_id: int, value: int, comment: str | None, pressed: datetime, why: Exception
    ) -> None:
        """Keep a press the database refused as a spool record; say so when even that fails."""
        from rltray.app import spool
        from rltray.app.words import word

        try:
            turn = self.service.store.get_turn(turn_id)  # a read: WAL lets it past a writer
            if turn is None:  # deleted meanwhile: there is nothing left to rate
                log.info("a press on turn %s was dropped: the turn was deleted", turn_id)
                return
            name = spool.spool_press(self.service.paths, turn, value, comment, pressed)
        except Exception as exc:  # the user must hear that the press is gone
            log.error("a %s pressed for turn %s could not be stored (%s) nor kept in the "
                      "spool (%s)", word(value), turn_id, why, exc)
            if self.notifier is not None:
                self.notifier.tell("rltray", f"Your {word(value)} rating of turn {turn_id} "
                                   f"could not be saved ({why}); rate it again with `rltray "
                                   f"rate {turn_id} {word(value)}`.")  # fmt: skip
            return
        log.warning("the database did not take a %s for turn %s (%s): it waits in the spool "
                    "as %s and is stored once the database is free", word(value), turn_id, why,
                    name)  # fmt: skip

    def _maybe_ask(self, turn_id: int, seconds: float | None = None) -> None:
        if self.notifier is None:
            return
        from rltray.app.desktop.notifier import title_for
        from rltray.app.desktop.notify_policy import should_ask

        turn = self.service.store.get_turn(turn_id)
        if turn is None:
            return
        settings = self.service.settings().notify  # the last valid copy while the file is broken
        ask, _reason = should_ask(
            seconds,
            self._ordinal,
            settings,
            datetime.now().astimezone(),
            self.snoozed_until,
            turn.rating is not None,
        )
        if ask:  # the notifier cuts the answer to a notification's preview
            self.notifier.ask(
                turn.id,
                title_for(turn.agent, turn.cwd),
                turn.response,
                group=f"{turn.agent}:{turn.session}",
                expire_s=settings.expire_minutes * 60 or None,
            )

    def _tell_training_outcomes(self) -> None:
        """Rounds that ended since the last pass (here or in another process) are told.

        Runs that ended before this service started are old news and stay quiet.
        """
        from rltray.app.desktop.notify_policy import should_tell_training
        from rltray.app.training import outcome

        runs = [r for r in self.service.runs(limit=10) if r["finished_at"]]
        if self._runs_told is None:
            self._runs_told = {r["id"] for r in runs}
            return
        news = [r for r in reversed(runs) if r["id"] not in self._runs_told]
        self._runs_told |= {r["id"] for r in news}
        if not news or self.notifier is None:
            return
        tell, _why = should_tell_training(
            self.service.settings().notify, datetime.now().astimezone(), self.snoozed_until
        )
        for run in news if tell else ():
            said = outcome.notice(run)
            if said is not None:
                self.notifier.tell(*said, quiet=True)

    # -- the training gate -------------------------------------------------------------

    def set_gate_reason(self, reason: str) -> None:
        self.gate_reason = reason
        self._gate_stale = False

    def _gate_changed(self) -> None:
        self._gate_stale = True

    def _ratings_changed(self, turn_ids: list[int]) -> None:
        """Tell the runner which turns' ratings changed: a round holding one is cancelled
        (``TrainingRunner.ratings_changed``; it never waits for the trainer)."""
        runner = self.service.runner_if_started()
        if runner is not None:
            runner.ratings_changed(turn_ids)

    def train_now(self, wait: bool = False) -> dict[str, Any]:
        """Start (or resume) a round now, whatever the schedule says (tray, API)."""
        started = self.service.train_now(wait=wait)
        self._manual_run = started["run"]
        return started

    def manual_run_going(self) -> bool:
        """The round Train now started is running, in that very launch: paused and later
        resumed by the scheduler while the user was away, it is the scheduler's round."""
        runner = self.service.runner()
        return runner.running_for_the_user() and runner.progress.get("run_id") == self._manual_run

    # -- what only the running rltray knows ------------------------------------------------

    def status(self) -> dict[str, Any]:
        """``Service.status`` with what this runtime knows: is it running, the gate's reason."""
        return self.service.status(
            service_running=self.running, next_training=self.next_training()
        )

    def training_status(self) -> dict[str, Any]:
        return self.service.training_status(next_training=self.next_training())

    def next_training(self) -> str | None:
        """The gate's reason while this runtime runs the scheduler; None otherwise.

        Asked again when what it depends on changed since the last tick (a rating,
        a finished run, a setting), so the tray never shows "training now" after a
        run or "waiting for 32 more" beside a count that says otherwise. Only the
        reason: starting or stopping a round stays the scheduler's tick.
        """
        if not self.running:
            return None
        if self._gate_stale and self.scheduler is not None:
            from rltray.app import autotrain

            self._gate_stale = False
            try:
                self.gate_reason = autotrain.decide(self).reason
            except Exception as exc:  # the tick reports it the same way
                self.gate_reason = f"training check failed: {exc}"
        return self.gate_reason

    def snooze(self, until: str | None) -> dict[str, Any]:
        """Stop asking for ratings for an hour (``"hour"``), ``"tomorrow"``, or no longer (None).

        Kept by the running rltray only: a restart asks again, which is what
        someone who restarted rltray most likely wants.
        """
        from rltray.app.desktop.notify_policy import snooze_for, snooze_until_tomorrow

        if not self.running:
            raise UserError("rltray is not running, so there are no notifications to snooze.")
        now = datetime.now().astimezone()
        if until is None:
            end = None
        elif until == "hour":
            end = snooze_for(now, 1)
        elif until == "tomorrow":
            end = snooze_until_tomorrow(now)
        else:
            raise UserError(f"Snooze for an 'hour' or until 'tomorrow', not {until!r}.")
        self.snoozed_until = end
        return {"snoozed_until": None if end is None else end.isoformat(timespec="minutes")}

    def snooze_end(self) -> datetime | None:
        """When the snooze ends, while it lasts; None once that time has passed.

        ``snoozed_until`` keeps an ended snooze (nothing clears it at its end), and
        the policy ignores it then; what is shown to the user must ignore it too.
        """
        end = self.snoozed_until
        if end is None:
            return None
        now = datetime.now(end.tzinfo) if end.tzinfo is not None else datetime.now()
        return end if now < end else None

    def health(self) -> dict[str, Any]:
        """For `rltray doctor`: the process, delivery problems, snooze, where the token lives."""
        snoozed = self.snooze_end()
        return {
            "pid": os.getpid(),
            "notifications": None if self.notifier is None else self.notifier.delivery_problems(),
            "snoozed_until": None if snoozed is None else snoozed.isoformat(timespec="minutes"),
            "token_in_file": self.api_token_in_file,
        }

    # -- the settings window -------------------------------------------------------------

    def settings_url(self, page: str = "") -> str:
        """A one-time launch URL of the settings web app ("" dashboard, "setup" the wizard).

        The web server starts on first use and lives until ``close()``.
        """
        return self._web_server().launch_url(page)

    def open_settings(self, page: str = "") -> str:
        """Open the settings window (tray menu, `rltray settings`); returns its launch URL."""
        url = self.settings_url(page)
        self.windows = [w for w in self.windows if w.poll() is None]
        self.windows.append(self._face().open_window(url, str(self.service.paths.launch_pages)))
        return url

    def _web_server(self) -> Served:
        """The one HTTP server (settings pages and the local API), started on first use."""
        with self._web_lock:
            if self.web is None:
                self.web = self._face().serve(self, self.api_token)
            return self.web

    def _face(self) -> WebFace:
        if self.web_face is None:
            raise UserError("This rltray was started without its settings app.")
        return self.web_face

    def stop_web(self) -> None:
        with self._web_lock:
            if self.web is not None:
                self.web.stop()
                self.web = None

    # -- local API ---------------------------------------------------------------------

    def _start_api(self) -> None:
        """Start the one server with the bearer token and name its port in endpoint.json."""
        from rltray.app.fileio import write_private_atomic
        from rltray.app.secrets import Secrets

        secrets = Secrets()
        self.api_token = secrets.ensure("api-token")
        self.api_token_in_file = not secrets.persistent
        port = self._web_server().port
        endpoint: dict[str, Any] = {"port": port, "pid": os.getpid()}
        if self.api_token_in_file:
            endpoint["token"] = self.api_token
        write_private_atomic(self.service.paths.endpoint, json.dumps(endpoint).encode(), 0o600)
        self.api_port = port

    def _unpublish(self) -> None:
        """Remove endpoint.json when it is this process's (a newer service may own it)."""
        if self.api_port is None:
            return
        self.api_port = None
        path = self.service.paths.endpoint
        try:
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()
        except (OSError, ValueError):
            pass


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
