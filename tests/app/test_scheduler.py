"""should_train stepped through a fake clock, and the APScheduler gate firing for real.

Each decision test pins one branch of the gate; the comments name the bug a
wrong answer would be (training while the user types, training forever on
battery, never training after midnight...).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from rltray.app.config import parse_quiet_hours
from rltray.app.scheduler import (
    Decision,
    Facts,
    Scheduler,
    in_quiet_hours,
    quiet_hours_end,
    should_train,
)
from rltray.app.training.outcome import FAILURE_BUDGET, failure_streak

NIGHT = parse_quiet_hours("22:00-08:00")
LUNCH = parse_quiet_hours("12:00-13:30")
IDLE_NEEDED = 600.0


class FakeClock:
    """A wall clock the test moves by hand, as Safe Eyes' core tests do."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def step(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


def decide(now: datetime, **overrides: Any) -> Decision:
    """should_train with every input at a "go" value unless the test overrides it."""
    args: dict[str, Any] = {
        "idle_s": 900.0,
        "on_ac": True,
        "untrained": 40,
        "threshold": 32,
        "quiet_hours": NIGHT,
        "paused": False,
        "last_run": None,
        "running": False,
        "idle_needed_s": IDLE_NEEDED,
        "require_ac": True,
    }
    args.update(overrides)
    return should_train(Facts(now, **args))


AFTERNOON = datetime(2026, 11, 23, 15, 0)


def test_all_conditions_met_starts_training() -> None:
    d = decide(AFTERNOON)
    assert d == Decision(True, False, "training now on 40 new ratings")


def test_below_threshold_waits_and_counts_down() -> None:
    """The status line says how many ratings are missing, singular for one."""
    assert decide(AFTERNOON, untrained=20) == Decision(False, False, "waiting for 12 more ratings")
    assert decide(AFTERNOON, untrained=31).reason == "waiting for 1 more rating"
    assert decide(AFTERNOON, untrained=32).train


def test_paused_never_starts_even_when_everything_else_says_go() -> None:
    assert decide(AFTERNOON, paused=True) == Decision(False, False, "paused")


def test_unknown_idle_never_starts() -> None:
    """Regression: a desktop without any idle provider must not train while the user works."""
    d = decide(AFTERNOON, idle_s=None)
    assert not d.train and not d.stop
    assert d.reason == "idle time unknown on this desktop; training starts only with Train now"


def test_idle_requirement_zero_ignores_unknown_idle() -> None:
    """require_idle_minutes = 0 means "any time": no idle provider must not block it."""
    assert decide(AFTERNOON, idle_s=None, idle_needed_s=0).train
    assert decide(AFTERNOON, idle_s=0.0, idle_needed_s=0).train


def test_idle_stepped_clock_starts_exactly_at_requirement() -> None:
    clock = FakeClock(AFTERNOON)
    idle = 0.0
    seen = []
    for _ in range(4):
        seen.append(decide(clock.now, idle_s=idle))
        clock.step(minutes=5)
        idle += 300.0
    assert [d.train for d in seen] == [False, False, True, True]
    assert seen[0].reason == "waiting until you are idle for 10 min"
    assert seen[1].reason == "waiting until you are idle for 10 min"
    assert not decide(AFTERNOON, idle_s=599.9).train


def test_battery_blocks_start_unless_ac_not_required() -> None:
    assert decide(AFTERNOON, on_ac=False) == Decision(False, False, "on battery")
    assert decide(AFTERNOON, on_ac=False, require_ac=False).train


def test_unknown_power_counts_as_mains() -> None:
    """psutil's None battery is a desktop: refusing it would mean desktops never train."""
    assert decide(AFTERNOON, on_ac=None).train


@pytest.mark.parametrize(
    ("hh", "mm", "quiet", "until"),
    [
        (23, 30, True, "08:00"),  # after the start, before midnight
        (22, 0, True, "08:00"),  # the start minute is inside
        (0, 0, True, "08:00"),
        (7, 59, True, "08:00"),  # one minute before the end, after midnight
        (8, 0, False, None),  # the end minute is outside
        (21, 59, False, None),
        (15, 0, False, None),
    ],
)
def test_quiet_hours_over_midnight(hh: int, mm: int, quiet: bool, until: str | None) -> None:
    now = datetime(2026, 11, 23, hh, mm, 30)
    assert in_quiet_hours(now, NIGHT) is quiet
    d = decide(now)
    assert d.train is not quiet
    if until is not None:
        assert d.reason == f"quiet hours until {until}"


def test_quiet_hours_end_is_tomorrow_before_midnight_and_today_after() -> None:
    assert quiet_hours_end(datetime(2026, 11, 23, 23, 30), NIGHT) == datetime(2026, 11, 24, 8, 0)
    assert quiet_hours_end(datetime(2026, 11, 24, 7, 59), NIGHT) == datetime(2026, 11, 24, 8, 0)
    assert quiet_hours_end(datetime(2026, 11, 24, 8, 0), NIGHT) is None
    assert quiet_hours_end(datetime(2026, 11, 24, 8, 0), None) is None


def test_quiet_hours_within_one_day_and_aware_times() -> None:
    tz = timezone(timedelta(hours=2))
    noon = datetime(2026, 11, 23, 12, 45, tzinfo=tz)
    assert in_quiet_hours(noon, LUNCH)
    assert quiet_hours_end(noon, LUNCH) == datetime(2026, 11, 23, 13, 30, tzinfo=tz)
    assert not in_quiet_hours(noon.replace(hour=13, minute=30), LUNCH)
    assert not in_quiet_hours(noon.replace(hour=11, minute=59), LUNCH)
    assert decide(noon, quiet_hours=LUNCH).reason == "quiet hours until 13:30"


def test_no_quiet_hours_trains_at_night() -> None:
    assert decide(datetime(2026, 11, 23, 23, 30), quiet_hours=None).train


def test_min_gap_since_last_run_counts_down() -> None:
    """Regression: a run that fails at once must not restart every minute."""
    clock = FakeClock(AFTERNOON)
    last = clock.now
    assert decide(clock.step(minutes=3), last_run=last).reason == (
        "waiting 7 min more after the last run"
    )
    assert not decide(clock.step(minutes=6, seconds=59), last_run=last).train
    assert decide(clock.step(seconds=1), last_run=last).train
    assert decide(AFTERNOON, last_run=AFTERNOON - timedelta(seconds=30), min_gap_s=60).reason == (
        "waiting 30 s more after the last run"
    )


def test_clock_jumped_back_before_last_run_does_not_block() -> None:
    assert decide(AFTERNOON, last_run=AFTERNOON + timedelta(hours=3)).train


def test_running_keeps_going_while_idle_and_through_quiet_hours() -> None:
    """Quiet hours forbid a start only; a night run must not be cut at 22:00."""
    d = decide(datetime(2026, 11, 23, 22, 0), running=True)
    assert d == Decision(False, False, "training now")
    # inputs that only matter for a start do not stop a run either
    assert not decide(AFTERNOON, running=True, untrained=0, paused=True).stop


def test_running_stops_when_user_comes_back() -> None:
    d = decide(AFTERNOON, running=True, idle_s=2.0)
    assert d == Decision(False, True, "you are back; training stopped until you are idle")


def test_running_stops_when_idle_becomes_unknown() -> None:
    assert decide(AFTERNOON, running=True, idle_s=None).stop


def test_running_stops_on_battery_only_when_ac_required() -> None:
    d = decide(AFTERNOON, running=True, on_ac=False)
    assert d == Decision(False, True, "on battery; training stopped until plugged in")
    assert not decide(AFTERNOON, running=True, on_ac=False, require_ac=False).stop
    assert not decide(AFTERNOON, running=True, on_ac=None).stop


def test_running_manual_run_is_never_stopped_by_the_gate() -> None:
    """Regression: Train now is clicked at the keyboard; idle 0 must not kill that run."""
    d = decide(AFTERNOON, running=True, idle_s=0.0, on_ac=False, manual_run=True)
    assert d == Decision(False, False, "training now (started with Train now)")


def test_running_with_no_idle_requirement_ignores_activity() -> None:
    assert not decide(AFTERNOON, running=True, idle_s=0.0, idle_needed_s=0).stop


# -- the failure budget (issue 20 item 13) -------------------------------------

FAILED = {"status": "failed", "metrics": {}, "error": "the trainer exited with code 1"}
REJECTED = {"status": "done", "metrics": {"accepted": False, "reasons": ["too far"]}}
ACCEPTED = {"status": "done", "metrics": {"accepted": True}, "adapter_version": 1}


def idle_afternoon(clock: FakeClock, runs: list[dict[str, Any]], hours: float) -> int:
    """Step the gate every minute of an idle afternoon; each round it starts fails at once.

    Returns how many rounds it started; ``runs`` (newest first) gains one per round.
    """
    started = 0
    last_run = None
    for _ in range(int(hours * 60)):
        d = decide(clock.now, last_run=last_run, failures=failure_streak(runs))
        if d.train:
            started += 1
            runs.insert(0, dict(FAILED if started % 2 else REJECTED))
            last_run = clock.now
        clock.step(minutes=1)
    return started


def test_failure_budget_stops_a_trainer_that_always_fails_until_train_now() -> None:
    """Regression: a broken trainer was restarted every 10 idle minutes for ever."""
    clock, runs = FakeClock(AFTERNOON), []
    assert idle_afternoon(clock, runs, hours=3) == FAILURE_BUDGET == 3
    clock.step(days=2)
    d = decide(clock.now, failures=failure_streak(runs))
    assert d == Decision(
        False, False, "automatic training stopped after 3 failed or rejected rounds in a row; "
        "Train now tries again"
    )  # fmt: skip
    assert decide(clock.now, failures=failure_streak(runs), paused=True).reason == "paused"
    # Train now: the user's round resets the count, even when it fails too.
    runs.insert(0, {**FAILED, "metrics": {"by_hand": True}})
    assert failure_streak(runs) == 1 and decide(clock.now, failures=1).train
    assert idle_afternoon(clock, runs, hours=3) == 2  # two more tries, then it stops again
    runs.insert(0, {"status": "cancelled", "metrics": {}})  # the user stopped one: no verdict
    assert failure_streak(runs) == 3


def test_failure_streak_counts_failed_and_rejected_rounds_until_an_accepted_one() -> None:
    paused = {"status": "paused", "metrics": {}}
    assert failure_streak([]) == 0
    assert failure_streak([REJECTED, paused, FAILED, ACCEPTED, FAILED, FAILED]) == 2
    assert failure_streak([FAILED, FAILED, REJECTED]) == 3
    kept = {"status": "done", "metrics": {"accepted": True, "kept_as": "candidate"}}
    assert failure_streak([FAILED, kept, FAILED]) == 1  # a candidate was trained fine


# -- the APScheduler wrapper ---------------------------------------------------


class Counter:
    """A gate that counts its calls and records the thread it ran on."""

    def __init__(self) -> None:
        self.calls = 0
        self.threads: set[str] = set()
        self.fired = threading.Event()
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.calls += 1
            self.threads.add(threading.current_thread().name)
        self.fired.set()


def wait_for(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_gate_fires_on_interval_and_shutdown_stops_it() -> None:
    gate = Counter()
    sched = Scheduler(gate, interval_s=0.2)
    sched.start()
    try:
        assert wait_for(lambda: gate.calls >= 3), f"gate ran {gate.calls} times in 5 s"
        assert threading.main_thread().name not in gate.threads
    finally:
        sched.shutdown(wait=True)
    assert not sched.running
    after = gate.calls
    time.sleep(0.6)
    assert gate.calls == after


def test_two_schedulers_do_not_interfere() -> None:
    """No module-level state: each fires its own gate; stopping one leaves the other running."""
    fast, slow = Counter(), Counter()
    a = Scheduler(fast, interval_s=0.2)
    b = Scheduler(slow, interval_s=60)
    a.start()
    b.start()
    try:
        assert wait_for(lambda: fast.calls >= 2)
        assert slow.calls == 0  # its interval has not come; a's firing did not run b's gate
        assert b.run_gate_now()
        assert slow.fired.wait(5)
        a.shutdown()
        stopped_at = fast.calls
        b.run_gate_now()
        assert wait_for(lambda: slow.calls >= 2)
        time.sleep(0.5)
        assert fast.calls == stopped_at
        assert b.running and not a.running
    finally:
        a.shutdown()
        b.shutdown()


def test_run_gate_now_before_start_does_nothing_and_restart_works() -> None:
    gate = Counter()
    sched = Scheduler(gate, interval_s=60)
    assert sched.run_gate_now() is False
    sched.start()
    sched.shutdown()
    sched.start()  # a fresh APScheduler: its old thread pool cannot be reused
    try:
        assert sched.run_gate_now()
        assert gate.fired.wait(5)
    finally:
        sched.shutdown()


def test_slow_gate_is_not_stacked() -> None:
    """max_instances=1: a gate slower than the interval never runs twice at once."""
    active = 0
    most = 0
    lock = threading.Lock()

    def slow_gate() -> None:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        time.sleep(0.5)
        with lock:
            active -= 1

    sched = Scheduler(slow_gate, interval_s=0.1)
    sched.start()
    try:
        time.sleep(1.2)
    finally:
        sched.shutdown(wait=True)
    assert most == 1


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        Scheduler(lambda: None, interval_s=0)


def test_the_status_line_follows_a_rating_without_waiting_for_the_next_tick(
    service: Any, start_runtime: Any
) -> None:
    """The running rltray's "next training" line is the gate's answer for the data as it
    is now: a rating given between two ticks (60 s apart) changes it at once."""
    service.set_setting("training.min_ratings", 4)
    service.set_setting("training.require_idle_minutes", 0)
    rec = {"agent": "codex", "session": "s1", "prompt": "p", "response": "r", "context": [],
           "cwd": "/w", "captured_at": "2026-11-22T10:00:00Z"}  # fmt: skip
    ids = [service.store.add_turn({**rec, "turn": f"t{i}"})[0] for i in range(3)]
    runtime = start_runtime(service, notifications=False, api=False)
    assert runtime.status()["training"]["next_training"] == "waiting for 4 more ratings"
    service.rate(ids[0], 1)
    service.rate(ids[1], -1)
    assert runtime.status()["training"]["next_training"] == "waiting for 2 more ratings"
    service.set_automatic(False)
    assert runtime.status()["training"]["next_training"] == "paused"


def test_a_wall_clock_set_back_does_not_silence_the_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: APScheduler waits on the wall clock; set back (NTP fixing a clock kept
    in local time), it ran no gate for as long as the step, so a round went on while
    the user worked or on battery. Scaled down: interval 0.2 s, clock set back 30 s."""
    from datetime import datetime as real_datetime
    from datetime import timedelta

    import apscheduler.schedulers.base as aps_base
    from rltray.app import scheduler as scheduler_module

    offset = [0.0]

    class Shifted(real_datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[override]
            return real_datetime.now(tz) + timedelta(seconds=offset[0])

    monkeypatch.setattr(aps_base, "datetime", Shifted)
    monkeypatch.setattr(scheduler_module, "datetime", Shifted)
    gate = Counter()
    sched = Scheduler(gate, interval_s=0.2)
    sched.start()
    try:
        assert wait_for(lambda: gate.calls >= 2)
        offset[0] = -30.0
        before = gate.calls
        assert wait_for(lambda: gate.calls >= before + 3, timeout=5.0), gate.calls
    finally:
        sched.shutdown()
