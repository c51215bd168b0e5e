"""The drift guard's schedule and walk-back (``drift_guard.Guard``), on a stand-in policy whose
drift is the one number its weights hold: which steps are measured, and which step a
stop keeps, must follow from the drift alone. The guard on real training runs is in
``test_drift.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from rltray.trainer import drift
from rltray.trainer import guard as drift_guard
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
    guard = drift_guard.Guard(measured, policy, hyper, 0, start)  # type: ignore[arg-type]
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
    assert drift_guard.steps_to_next_check(share, step, 4) == gap


def test_a_gap_of_one_measures_every_step() -> None:
    assert drift_guard.steps_to_next_check(0.0, 1, 1) == 1
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
    monkeypatch.setattr(drift_guard, "SNAPSHOT_BUDGET_BYTES", 8)  # one float64
    seen, _, _, _ = run([0.001, 0.002, 0.003, 0.004])
    assert None not in seen


def test_the_guard_off_measures_nothing() -> None:
    seen, stop, _, asked = run([0.5, 0.9], hyper=Hyper(guard_turns=0))
    assert seen == [None, None] and stop is None and asked == []


# ---- a parent far from the base (issue 20 item 6) -----------------------------------


@dataclass
class ParentDriftSet(CountingDriftSet):
    """The policy's drift to the parent is ``w``; to the base the parent's ``at`` plus
    ``2 w`` (a round moving away from the base), on answers and prompt text alike."""

    at: float = 0.5
    parent: object = field(default_factory=dict)  # not None: a round with a parent

    def measure(self, backend: OneNumberPolicy, hyper: Hyper, pad_id: int,
                limit: int | None = None, policy_rows: object = None) -> dict[str, float]:
        self.asked.append(backend.w)
        total = self.at + 2 * backend.w
        return {"kl_round": backend.w, "kl_total": total,
                "kl_round_general": backend.w, "kl_total_general": total}


def run_from_parent(
    at: float, drifts: list[float]
) -> tuple[list[float | None], tuple[int, str] | None, drift_guard.Guard]:
    """A round whose parent is at total drift ``at``; steps reach ``drifts`` this round."""
    policy, measured = OneNumberPolicy(0.0), ParentDriftSet(at=at)
    guard = drift_guard.Guard(measured, policy, HYPER, 0, 0)  # type: ignore[arg-type]
    assert guard.begin() is not None  # the parent is measured before the first step
    seen: list[float | None] = []
    for step, d in enumerate(drifts, 1):
        guard.remember(step - 1)
        policy.w = d
        m, stop = guard.check(step, last=step == len(drifts))
        seen.append(m["kl_total"] if m else None)
        if stop is not None:
            return seen, stop, guard
    return seen, None, guard


def test_a_parent_at_total_drift_0_5_of_a_0_6_cap_can_still_train() -> None:
    """The margin applies to what the round adds: the line is 0.5 + 0.8 x 0.1 = 0.58,
    not 0.8 x 0.6 = 0.48 (which undid every round's first step from such a parent)."""
    seen, stop, guard = run_from_parent(0.5, [0.01, 0.02, 0.03, 0.035])
    assert stop is None and seen[-1] == pytest.approx(0.57)  # under the 0.6 cap
    assert guard.lines.line["kl_total"] == pytest.approx(0.58)
    assert guard.lines.line["kl_round"] == pytest.approx(0.08)  # the round's own: as before


def test_past_the_rooms_line_it_stops_and_says_where_the_line_came_from() -> None:
    _, stop, guard = run_from_parent(0.5, [0.01, 0.05])
    kept, why = stop
    assert kept == 1 and guard.stopped_on == ["kl_total", "kl_total_general"]
    assert "KL to the base on the held-out answers 0.6 passed the guard's line 0.58" in why
    assert "the parent's 0.5 plus 0.8 x the 0.1 left under the 0.6 cap" in why
    assert guard.budget_used_up() is None  # step 1 was kept: the round learned something


def test_a_parent_at_the_total_cap_is_told_the_budget_is_used_up() -> None:
    """No room left: the first step is undone, and the reason says what to do."""
    _, stop, guard = run_from_parent(0.6, [0.01])
    assert stop[0] == 0
    spent = guard.budget_used_up()
    assert spent is not None and "used up" in spent and "0.6 total cap" in spent
    assert "roll back" in spent and "new line of versions from the base" in spent


def test_a_stop_on_the_rounds_own_cap_is_not_a_used_up_budget() -> None:
    _, stop, guard = run_from_parent(0.0, [0.2])
    assert stop[0] == 0 and guard.stopped_on[0] == "kl_round"
    assert guard.budget_used_up() is None


def test_the_guard_samples_both_classes_spread_over_the_set() -> None:
    """Six good held-out turns then two bad: the oldest four were all good."""
    idx = list(range(8))
    ratings = {i: 1 for i in range(6)} | {6: -1, 7: -1}
    sample = drift.stratified(idx, ratings)[:4]
    assert sorted(ratings[i] for i in sample) == [-1, -1, 1, 1]
    assert sorted(drift.stratified(idx, ratings)) == idx  # a reordering, nothing lost
    many = drift.stratified(list(range(16)), {i: 1 if i % 2 else -1 for i in range(16)})[:4]
    assert min(many) < 8 <= max(many)  # each class from old and new turns


def test_the_drift_set_knows_the_ratings_of_its_turns() -> None:
    from types import SimpleNamespace

    held = [SimpleNamespace(rating=r) for r in (1, 1, 1, -1)]
    train = [SimpleNamespace(rating=-1)] * 3
    job = SimpleNamespace(parent_adapter=None)
    ds = drift.DriftSet.of({}, [0, 1, 2], {}, [0, 1, 2, 3], job, train, held)  # type: ignore[arg-type]
    assert ds.which == "held-out" and ds.ratings == {0: 1, 1: 1, 2: 1, 3: -1}
    assert sorted(ds.sample(2)) == [1, 3]  # one good (the middle one), the bad one
    assert ds.sample(None) == [0, 1, 2, 3]


# ---- through a pause (issue 20 item 7) -----------------------------------------------


def run_paused(drifts: list[float], pause_after: int
               ) -> tuple[tuple[int, str] | None, float, list[float]]:
    """:func:`run` with a pause after step ``pause_after``: the guard's state goes
    through JSON (as the checkpoint's state.json holds it) into a new guard."""
    import json

    policy, measured = OneNumberPolicy(), CountingDriftSet()
    guard = drift_guard.Guard(measured, policy, HYPER, 0, 0)  # type: ignore[arg-type]
    for step, d in enumerate(drifts, 1):
        if step == pause_after + 1:
            meta, arrays = guard.state()
            guard = drift_guard.Guard(measured, policy, HYPER, 0, pause_after)  # type: ignore[arg-type]
            guard.restore(json.loads(json.dumps(meta)), {k: v.copy() for k, v in arrays.items()})
        guard.remember(step - 1)
        policy.w = d
        _, stop = guard.check(step, last=step == len(drifts))
        if stop is not None:
            return stop, policy.w, measured.asked
    return None, policy.w, measured.asked


def test_a_guard_restored_from_its_state_walks_back_like_the_unpaused_one() -> None:
    """Measured at step 1 (next due at 4), step 2 crosses the line unmeasured, a pause
    after step 2: the resumed guard keeps step 1, as the unpaused one does (it kept
    step 2, above the line, when the pause lost its snapshots)."""
    drifts = [0.001, 0.09, 0.1, 0.2]
    seen, stop, weights, asked = run(drifts)
    assert seen == [0.001, None, None, 0.2] and stop[0] == 1 and weights == 0.001
    assert run_paused(drifts, 2) == (stop, weights, asked)


# ---- estimates from a sample of positions (issue 25) --------------------------------


@dataclass
class EstimatingDriftSet(CountingDriftSet):
    """Also estimates: the policy's drift, give or take ``error`` (the upper bound)."""

    error: float = 0.01
    estimates: list[float] = field(default_factory=list)

    def estimate(self, backend: OneNumberPolicy, hyper: Hyper, pad_id: int,
                 limit: int | None = None) -> tuple[dict[str, float], dict[str, float]]:
        self.estimates.append(backend.w)
        self.last = None
        d = {"kl_round": backend.w, "kl_total": backend.w,
             "kl_round_general": 0.0, "kl_total_general": 0.0}
        return d, {k: v + self.error for k, v in d.items()}


def run_estimating(drifts: list[float], error: float = 0.01
                   ) -> tuple[drift_guard.Guard, EstimatingDriftSet, tuple[int, str] | None]:
    policy, measured = OneNumberPolicy(), EstimatingDriftSet(error=error)
    guard = drift_guard.Guard(measured, policy, Hyper(kl_cap=0.1, kl_cap_total=0.6,
                                                      guard_max_gap=1), 0, 0)
    stop = None
    for step, d in enumerate(drifts, 1):
        guard.remember(step - 1)
        policy.w = d
        _m, stop = guard.check(step, last=step == len(drifts))
        if stop is not None:
            break
    return guard, measured, stop


def test_far_below_the_line_an_estimate_settles_the_check_but_never_the_last_step() -> None:
    guard, drift, stop = run_estimating([0.01, 0.02, 0.03, 0.04])
    assert stop is None
    assert drift.estimates == [0.01, 0.02, 0.03, 0.04][:len(drift.estimates)]
    assert guard.estimated == 3 and drift.asked == [0.04]  # the last step: exact


def test_an_estimate_whose_upper_bound_reaches_the_line_is_measured_exactly() -> None:
    # line 0.08: 0.075 + 0.01 reaches it, so the exact number decides (and passes)
    guard, drift, stop = run_estimating([0.02, 0.075, 0.079, 0.079])
    assert stop is None and guard.estimated == 1 and drift.asked == [0.075, 0.079, 0.079]
    # past the line: the exact measurement stops it, never the estimate
    guard, drift, stop = run_estimating([0.02, 0.09, 0.1])
    assert stop is not None and stop[0] == 1 and drift.asked[0] == 0.09
