"""When to train: one pure decision function, and a small APScheduler wrapper that asks it.

Why this split (Safe Eyes' habit, STYLE.md habit 5): everything that decides
"train now?" is in :func:`should_train`, a pure function of the clock, idle
time, power, pending ratings, quiet hours, pause switch and last run. Tests
step a fake clock through it; APScheduler only supplies the heartbeat. The
service owns the gate callable: it gathers the inputs (``idle.idle_seconds``,
``idle.on_ac_power``, the store's counts, the settings), calls
:func:`should_train` and starts or stops the trainer.

Rules the decision keeps (the tray's status line shows ``Decision.reason``):

* Unknown idle time never starts a run, unless the user asked for no idle
  requirement at all (``idle_needed_s <= 0``, the "0: any time" setting).
* Unknown power (``on_ac is None``) counts as mains power: a desktop with no
  battery, or a platform where psutil cannot tell (DESKTOP-STACK.md §4.3).
* A failure budget: after ``FAILURE_BUDGET`` failed or rejected rounds in a row
  no round starts on its own (a broken trainer was once restarted every 10 idle
  minutes for ever); a round the user starts with Train now resets the count.
* Quiet hours only block a *start* ("no training start", config.py's help
  text); a run that is already going keeps running through them — a quiet
  night is the best time to train.
* A running automatic run is stopped when the reasons it was started for are
  gone: the user is back (idle below the requirement, or idle time no longer
  known) or the laptop went on battery while mains power is required. The
  trainer checkpoints when the runner stops it, so a stop costs little and the next idle
  spell resumes it. Pausing automatic training does not stop a run by itself;
  the tray's Pause/Stop actions do that explicitly. A run the user started
  with Train now (``manual_run=True``) is never stopped by the gate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from rltray.app.training.outcome import FAILURE_BUDGET, budget_message

QuietHours = tuple[tuple[int, int], tuple[int, int]]

GATE_JOB_ID = "rltray-gate"


@dataclass(frozen=True)
class Decision:
    """What the gate should do now, and one short sentence saying why (shown in the tray)."""

    train: bool
    stop: bool
    reason: str


def in_quiet_hours(now: datetime, quiet_hours: QuietHours | None) -> bool:
    """True when ``now``'s local wall-clock minute is inside the window (start in, end out).

    ``quiet_hours`` is ``config.parse_quiet_hours``'s shape, ``((h1, m1), (h2, m2))``;
    a window whose end is earlier than its start crosses midnight.
    """
    if quiet_hours is None:
        return False
    (h1, m1), (h2, m2) = quiet_hours
    start, end, t = h1 * 60 + m1, h2 * 60 + m2, now.hour * 60 + now.minute
    if start < end:
        return start <= t < end
    return t >= start or t < end


def quiet_hours_end(now: datetime, quiet_hours: QuietHours | None) -> datetime | None:
    """When the quiet window ``now`` is in ends (same tzinfo as ``now``); None outside one."""
    if quiet_hours is None or not in_quiet_hours(now, quiet_hours):
        return None
    h2, m2 = quiet_hours[1]
    end = now.replace(hour=h2, minute=m2, second=0, microsecond=0)
    if end <= now:  # past midnight's other side: 23:30 in 22:00-08:00 ends tomorrow
        end += timedelta(days=1)
    return end


def _duration(seconds: float) -> str:
    """Round up to whole minutes from one minute on ("10 min"), else seconds ("45 s")."""
    if seconds >= 60:
        return f"{int(-(-seconds // 60))} min"
    return f"{int(-(-seconds // 1))} s"


@dataclass(frozen=True)
class Facts:
    """What the gate knows at one tick (``autotrain.decide`` gathers them).

    ``now`` and ``last_run`` are local wall-clock times of the same kind (both
    naive or both aware); ``last_run`` is when the previous run ended, so a run
    that fails at once is not retried in a tight loop. ``idle_s`` / ``on_ac``:
    None when the desktop cannot say. ``manual_run``: the running trainer was
    started with Train now and is the user's to stop. ``failures`` counts the
    failed or rejected rounds in a row since the last Train now
    (``outcome.failure_streak``). ``settings_problem``: config.toml does not
    validate (the sentence), so no round starts on its own.
    """

    now: datetime
    untrained: int
    threshold: int
    idle_s: float | None = None
    on_ac: bool | None = None
    quiet_hours: QuietHours | None = None
    paused: bool = False
    last_run: datetime | None = None
    running: bool = False
    idle_needed_s: float = 0.0
    require_ac: bool = False
    min_gap_s: float = 600.0
    manual_run: bool = False
    failures: int = 0
    budget: int = FAILURE_BUDGET
    settings_problem: str | None = None


def should_train(facts: Facts) -> Decision:
    """Decide whether the gate starts a run, stops the running one, or waits — and say why.

    A clock that jumped back before ``last_run`` does not hold training back. At
    ``budget`` failures in a row no round starts on its own any more, however
    long the user stays idle.
    """
    f = facts
    now, idle_s, on_ac, running, manual_run = f.now, f.idle_s, f.on_ac, f.running, f.manual_run
    untrained, threshold, last_run = f.untrained, f.threshold, f.last_run
    idle_needed_s, require_ac = f.idle_needed_s, f.require_ac
    on_mains = on_ac is not False
    idle_matters = idle_needed_s > 0
    if running:
        if manual_run:
            return Decision(False, False, "training now (started with Train now)")
        if require_ac and not on_mains:
            return Decision(False, True, "on battery; training stopped until plugged in")
        if idle_matters and idle_s is None:
            return Decision(False, True, "idle time unknown; training stopped")
        if idle_matters and idle_s is not None and idle_s < idle_needed_s:
            return Decision(False, True, "you are back; training stopped until you are idle")
        return Decision(False, False, "training now")

    if f.paused:
        return Decision(False, False, "paused")
    if f.settings_problem:
        return Decision(False, False, "config.toml has a problem; fix it to train again")
    if f.failures >= f.budget:
        return Decision(False, False, budget_message(f.failures))
    if untrained < threshold:
        missing = threshold - untrained
        return Decision(False, False, f"waiting for {missing} more rating{'s' * (missing != 1)}")
    end = quiet_hours_end(now, f.quiet_hours)
    if end is not None:
        return Decision(False, False, f"quiet hours until {end:%H:%M}")
    if last_run is not None:
        since = (now - last_run).total_seconds()
        if 0 <= since < f.min_gap_s:
            wait = _duration(f.min_gap_s - since)
            return Decision(False, False, f"waiting {wait} more after the last run")
    if require_ac and not on_mains:
        return Decision(False, False, "on battery")
    if idle_matters and idle_s is None:
        return Decision(
            False, False, "idle time unknown on this desktop; training starts only with Train now"
        )
    if idle_matters and idle_s is not None and idle_s < idle_needed_s:
        return Decision(False, False, f"waiting until you are idle for {_duration(idle_needed_s)}")
    return Decision(True, False, f"training now on {untrained} new ratings")


class Scheduler:
    """One APScheduler ``BackgroundScheduler`` running the gate every ``interval_s`` seconds.

    The gate is the service's callable; it runs on the scheduler's single worker
    thread, never on the tray's UI thread, so it may block briefly (a D-Bus idle
    query) but must hand UI changes to the tray's door. Each instance owns its
    own scheduler, job store and worker, so two can run in one process (tests).
    Missed runs (a suspended laptop) coalesce into one; a gate still running
    when the next is due is skipped rather than stacked.

    APScheduler waits on the wall clock: set back an hour (NTP correcting a clock kept
    in local time, or by hand), it ran no gate for that hour, so a round went on while
    the user worked or on battery. A watchdog on the monotonic clock asks for a gate
    when none ran for two intervals.
    """

    def __init__(self, gate: Callable[[], None], *, interval_s: float = 60.0) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self._gate = gate
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._scheduler: BackgroundScheduler | None = None
        self._last_gate = time.monotonic()
        self._watching: threading.Event | None = None  # set: the watchdog stops

    def _timed_gate(self) -> None:
        self._last_gate = time.monotonic()
        self._gate()

    def _watch(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s / 2):
            if time.monotonic() - self._last_gate > 2 * self.interval_s:
                self._last_gate = time.monotonic()  # asked once per silence, not stacked
                self.run_gate_now()

    @property
    def running(self) -> bool:
        """True between start() and shutdown()."""
        return self._scheduler is not None and self._scheduler.running

    def start(self) -> None:
        """Start the heartbeat; the first gate runs one interval from now (see run_gate_now).

        A fresh APScheduler is built on each start because its thread pool cannot
        be reused after shutdown, so start → shutdown → start works.
        """
        with self._lock:
            if self.running:
                return
            self._scheduler = BackgroundScheduler(
                jobstores={"default": MemoryJobStore()},
                executors={"default": ThreadPoolExecutor(max_workers=1)},
                job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
                timezone=timezone.utc,
            )
            self._scheduler.add_job(
                self._timed_gate,
                "interval",
                seconds=self.interval_s,
                id=GATE_JOB_ID,
                name="rltray training gate",
            )
            self._scheduler.start()
            self._last_gate = time.monotonic()
            self._watching = threading.Event()
            threading.Thread(target=self._watch, args=(self._watching,), daemon=True,
                             name="rltray gate watchdog").start()

    def run_gate_now(self) -> bool:
        """Queue one gate run at once (a rating arrived, settings changed); False if not started.

        The run goes through the scheduler, so it never overlaps a gate already
        running; the regular cadence continues one interval after it.
        """
        with self._lock:
            if self._scheduler is None or not self._scheduler.running:
                return False
            self._scheduler.modify_job(GATE_JOB_ID, next_run_time=datetime.now(timezone.utc))
            return True

    def shutdown(self, wait: bool = True) -> None:
        """Stop the heartbeat; with ``wait`` also wait for a gate that is running to return."""
        with self._lock:
            if self._watching is not None:
                self._watching.set()
                self._watching = None
            if self._scheduler is not None and self._scheduler.running:
                self._scheduler.shutdown(wait=wait)
            self._scheduler = None
