"""The gate's preference test: exact Mann-Whitney p-values and its power by simulation.

The power targets are issue 20's: at 8 good + 8 bad held-out ratings, an adapter
whose true held-out AUROC is 0.25 is rejected at least 80% of the time and one at
0.75 accepted at least 80%. The simulation is ``bench/gate_power.py``'s (the
bench prints the whole table); seeds are fixed, so the rates are the same on
every run. Pure python + numpy: no model.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import pytest
from rltray.trainer import preference as pref

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import gate_power

TRIALS = 1000


def brute_u_counts(m: int, n: int) -> list[int]:
    counts = [0] * (m * n + 1)
    for pos in itertools.combinations(range(m + n), m):
        neg = [i for i in range(m + n) if i not in pos]
        counts[sum(1 for p in pos for q in neg if p > q)] += 1
    return counts


@pytest.mark.parametrize(("m", "n"), [(1, 1), (2, 3), (3, 2), (4, 4), (3, 6), (5, 5)])
def test_exact_u_distribution_matches_enumeration(m: int, n: int) -> None:
    assert list(pref._u_counts(min(m, n), max(m, n))) == brute_u_counts(m, n)


def test_mann_whitney_p_values() -> None:
    assert pref.mann_whitney_p(0, 4, 4) == (1 / 70, 1.0)  # the most extreme of 70 orderings
    assert pref.mann_whitney_p(16, 4, 4) == (1.0, 1 / 70)
    low, high = pref.mann_whitney_p(32, 8, 8)
    assert low == high and 0.5 < low < 0.55  # the centre of a symmetric distribution
    # a tie (U ends in .5) never makes the result stronger than either untied neighbour
    assert pref.mann_whitney_p(2.5, 4, 4)[0] == pref.mann_whitney_p(3, 4, 4)[0]
    assert pref.mann_whitney_p(2.5, 4, 4)[1] == pref.mann_whitney_p(2, 4, 4)[1]
    # exact and normal approximation agree where they meet
    exact = pref.mann_whitney_p(1800, 64, 64)[0]
    approx = pref.mann_whitney_p(1800 * 65 / 64, 65, 64)[0]
    assert math.isclose(exact, approx, rel_tol=0.05)


def test_round_one_tests_against_exactly_one_half() -> None:
    """The base's reward is 0 for every answer: its AUROC has no sampling error to add."""
    labels = [1] * 4 + [-1] * 4
    worst = pref.preference_test([-1, -2, -3, -4, 1, 2, 3, 4], None, labels)
    assert worst.auroc_parent == 0.5 and worst.change_auroc == 0.0
    assert worst.p_worse == pytest.approx(1 / 70)
    # the old test (Hanley-McNeil SEs in quadrature) accepted AUROC 0.0625 at 4 + 4
    nearly = pref.preference_test([-1, -2, -3, 1.5, 1, 2, 3, 4], None, labels)
    assert nearly.change_auroc == 0.0625
    assert pref.judge_preference(nearly, 0.05)[0] == "worse"


def test_rounds_after_the_first_are_paired_on_the_same_answers() -> None:
    """A spread the parent already has cancels: only the round's change is tested."""
    labels = [1] * 4 + [-1] * 4
    parent = [5.0, -3.0, 2.0, -6.0, 4.0, -5.0, 1.0, 6.0]  # wide, unrelated to the change
    change = [0.2, 0.3, 0.1, 0.4, -0.1, -0.2, -0.3, -0.4]
    new = [p + c for p, c in zip(parent, change, strict=True)]
    test = pref.preference_test(new, parent, labels)
    assert test.change_auroc == 1.0 and test.p_better == pytest.approx(1 / 70)
    assert pref.judge_preference(test, 0.05)[0] == "better"


def test_at_8_plus_8_a_worse_adapter_is_rejected_and_a_better_one_accepted() -> None:
    """Issue 20's targets, round 1 (parent = base) and round >= 2 (paired with a parent)."""
    assert gate_power.rates(0.25, 8, TRIALS)["worse"] >= 0.8
    assert gate_power.rates(0.75, 8, TRIALS)["worse"] <= 0.2
    assert gate_power.rates(0.25, 8, TRIALS, parent=0.7)["worse"] >= 0.8
    assert gate_power.rates(0.75, 8, TRIALS, parent=0.7)["worse"] <= 0.2


def test_more_held_out_ratings_give_more_power() -> None:
    rejected = [gate_power.rates(0.35, n, 400)["worse"] for n in (4, 16, 32)]
    assert rejected == sorted(rejected) and rejected[-1] > 0.9
    better = [gate_power.rates(0.75, n, 400)["better"] for n in (4, 16, 32)]
    assert better == sorted(better) and better[-1] > 0.9
