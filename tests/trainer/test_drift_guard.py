"""The drift guard's schedule and walk-back (``drift.Guard``), on a stand-in policy whose
drift is the one number its weights hold: which steps are measured, and which step a
stop keeps, must follow from the drift alone. The guard on real training runs is in
``test_drift.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from rltray.trainer import drift
from rltray.trainer.presets import Hyper

HYPER = Hyper(kl_cap=0.1, kl_cap_total=0.6)  # guard line: 0.08 for the round's KL


@dataclass
class OneNumberPolicy:
    """Weights ``{"w": [d]}`` whose KL to the parent is ``d`` (the base: ``d`` too)."""

    w: float = 0.0

    def lora_state(self) -> dict[str, np.ndarray]:
        return {"w": np.array([self.w])}

    def set_lora_state(self, state: dict[str, np.ndarray]) -> None:
        self.w = float(state["w"][0])


@dataclass
class CountingDriftSet:
    """Reads the policy's drift and counts how often it was asked."""

    asked: list[float] = field(default_factory=list)
    seconds: float = 0.0
    which: str = "training"
    last: object = None

    def measure(self, backend: OneNumberPolicy, hyper: Hyper, pad_id: int,
                limit: int | None = None, policy_rows: object = None) -> dict[str, float]:
        self.asked.append(backend.w)
        return {"kl_round": backend.w, "kl_total": backend.w,
                "kl_round_general": 0.0, "kl_total_general": 0.0}


def run(drifts: list[float], start: int = 0, start_drift: float = 0.0,
        hyper: Hyper = HYPER) -> tuple[list[float | None], tuple[int, str] | None, float,
                                        list[float]]:
    """Steps start+1, start+2, ... reach ``drifts``; from the round's start (the
    parent, drift 0) or a resume at ``start`` with ``start_drift``. Returns the
    progress lines' KL, the guard's stop, the weights left loaded, what was measured.
    """
    policy, measured = OneNumberPolicy(start_drift), CountingDriftSet()
    guard = drift.Guard(measured, policy, hyper, 0, start)  # type: ignore[arg-type]
    seen: list[float | None] = []
    last = start + len(drifts)
    for step, d in enumerate(drifts, start + 1):
        guard.remember(step - 1)
        policy.w = d
        m, stop = guard.check(step, last=step == last)
        seen.append(m["kl_round"] if m else None)
        if stop is not None:
            return seen, stop, policy.w, measured.asked
    return seen, None, policy.w, measured.asked


@pytest.mark.parametrize(("share", "step", "gap"), [
    (0.25, 1, 1), (0.9, 5, 1), (0.0, 1, 4), (0.01, 1, 4), (0.04, 2, 4), (0.1, 1, 1),
    (0.04, 1, 2), (float("inf"), 3, 1),
])
def test_the_gap_follows_the_projected_drift(share: float, step: int, gap: int) -> None:
    assert drift.steps_to_next_check(share, step, 4) == gap


def test_a_gap_of_one_measures_every_step() -> None:
    assert drift.steps_to_next_check(0.0, 1, 1) == 1
    seen, stop, _, _ = run([0.001, 0.002, 0.003, 0.004], hyper=Hyper(guard_max_gap=1))
    assert None not in seen and stop is None


def test_far_below_the_line_it_skips_steps_but_always_measures_the_last() -> None:
    seen, stop, _, asked = run([0.001, 0.002, 0.003, 0.004, 0.005, 0.006])
    assert stop is None
    assert seen[0] == 0.001 and seen[-1] == 0.006 and None in seen
    assert len(asked) == sum(s is not None for s in seen) < len(seen)


def test_a_jump_between_measurements_keeps_the_newest_step_within_the_line() -> None:
    # measured at step 1 (next due at step 4); steps 2 and 3 unmeasured; 4 is over
    seen, stop, weights, asked = run([0.001, 0.002, 0.05, 0.2])
    assert seen == [0.001, None, None, 0.2]
    kept, why = stop
    assert kept == 3 and weights == 0.05  # step 3 measured on the way back, and kept
    assert "passed 0.8 x the 0.1 cap" in why
    assert asked == [0.001, 0.2, 0.05]


def test_the_walk_back_stops_at_the_last_measured_step_without_measuring_it_again() -> None:
    _, stop, weights, asked = run([0.001, 0.1, 0.2, 0.3])
    assert stop[0] == 1 and weights == 0.001
    assert asked == [0.001, 0.3, 0.2, 0.1]  # step 1 was measured good: not asked again


def test_a_stop_in_the_first_step_goes_back_to_the_parent_unmeasured() -> None:
    _, stop, weights, asked = run([0.5])
    assert stop[0] == 0 and weights == 0.0 and asked == [0.5]


def test_after_a_resume_the_starting_weights_are_measured_before_they_are_kept() -> None:
    """Resumed at step 3 (drift 0.09, over the line): nothing passes, the guard keeps
    the oldest weights it has and leaves the verdict to the gate's full measurement."""
    seen, stop, weights, asked = run([0.2], start=3, start_drift=0.09)
    assert seen == [0.2] and stop[0] == 3 and weights == 0.09
    assert asked == [0.2, 0.09]


def test_large_snapshots_shrink_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots of unmeasured steps stay under the budget: here one fits, so every step."""
    monkeypatch.setattr(drift, "SNAPSHOT_BUDGET_BYTES", 8)  # one float64
    seen, _, _, _ = run([0.001, 0.002, 0.003, 0.004])
    assert None not in seen


def test_the_guard_off_measures_nothing() -> None:
    seen, stop, _, asked = run([0.5, 0.9], hyper=Hyper(guard_turns=0))
    assert seen == [None, None] and stop is None and asked == []
