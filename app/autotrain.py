"""The scheduler's gate: gather the facts, ask ``should_train``, start or stop the trainer.

Kept apart from ``scheduler.py`` (which only decides and ticks) so the
decision stays a pure function and this file is the one place that reads the
clock, idle time, power, settings and the store for it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Protocol

from rltray.app.scheduler import Decision, Facts, should_train

if TYPE_CHECKING:
    from rltray.app.service import Service


class Runtime(Protocol):
    """What the gate needs of the running rltray (``runtime.Runtime``, which calls it)."""

    service: Service

    def manual_run_going(self) -> bool: ...

    def set_gate_reason(self, reason: str) -> None: ...

log = logging.getLogger(__name__)
MIN_GAP_S = 600.0


def decide(runtime: Runtime, now: datetime | None = None) -> Decision:
    """What the gate would do right now, with its reason (the tray's status line)."""
    from rltray.app import config
    from rltray.app.desktop import idle
    from rltray.app.training import remote
    from rltray.app.training.outcome import failure_streak

    service = runtime.service
    settings = service.settings()
    training = settings.training
    recent = service.runs(limit=50)
    finished = [r["finished_at"] for r in recent[:5] if r["finished_at"]]
    # a remote round (issue 26) uses neither this machine's cores nor its battery
    remote_round = remote.enabled(training)
    needs_idle = training.require_idle_minutes > 0 and not remote_round
    facts = Facts(
        now=now or datetime.now(timezone.utc).astimezone(),
        untrained=service.store.counts()["untrained"],
        threshold=training.min_ratings,
        idle_s=idle.idle_seconds() if needs_idle else None,
        on_ac=idle.on_ac_power(),
        quiet_hours=config.parse_quiet_hours(settings.notify.quiet_hours),
        paused=not training.automatic,
        last_run=datetime.fromisoformat(finished[0]) if finished else None,
        running=service.runner().running(),
        idle_needed_s=training.require_idle_minutes * 60.0 if needs_idle else 0.0,
        require_ac=training.require_ac_power and not remote_round,
        min_gap_s=MIN_GAP_S,
        manual_run=runtime.manual_run_going(),
        failures=failure_streak(recent),
        settings_problem=service.settings_problem(),
    )
    return should_train(facts)


def gate(runtime: Runtime) -> None:
    """One tick: start a round when the decision says so, pause a running one when told."""
    service = runtime.service
    try:
        decision = decide(runtime)
    except Exception as exc:  # a broken config or a store hiccup must not kill the scheduler
        log.warning("training gate skipped: %s: %s", type(exc).__name__, exc)
        runtime.set_gate_reason(f"training check failed: {exc}")
        return
    said_before = runtime.gate_reason
    runtime.set_gate_reason(decision.reason)
    runner = service.runner()
    if decision.stop and runner.running():
        if runner.stop(pause=True):  # False: the round is done, its result being recorded
            service.store.log_event("training", f"paused: {decision.reason}")
    elif decision.train and not runner.running():
        from rltray.app.training.jobbuild import NotEnoughRatings
        from rltray.app.training.runner import TrainingBusy

        try:
            run_id = runner.start(reason="scheduled")
        except TrainingBusy as exc:  # another process's round (`rltray train`): it goes on
            runtime.set_gate_reason(str(exc))
            return
        except NotEnoughRatings as exc:
            # The count said enough, but some new ratings cannot be trained (an empty
            # answer, too long for the model): said on the status line, and logged once,
            # not every minute the gate asks again.
            if said_before != str(exc):
                service.store.log_event("training", f"not started: {exc}")
            runtime.set_gate_reason(str(exc))
            return
        except Exception as exc:
            # Said once, not every minute the gate asks again (a trainer environment
            # that is gone fails the same way at every tick until it is mended).
            if said_before != str(exc):
                service.store.log_event("training", f"could not start: {exc}")
            runtime.set_gate_reason(str(exc))
            return
        service.store.log_event("training", f"started run {run_id}: {decision.reason}")
