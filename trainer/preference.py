"""Held-out preference statistics: AUROC, the exact Mann-Whitney distribution, the
paired test of a round's change and its verdict.

Why a module of its own: the publish gate (:mod:`.evaluate`) asks one question of
these numbers — is the new adapter measurably worse or better on the user's
held-out ratings? — and answering it honestly at 4 + 4 to 64 + 64 ratings takes
exact small-sample statistics that deserve their own tests
(``tests/trainer/test_gate_power.py``) and their own power table
(``bench/gate_power.py``). Pure python, so the tray can import it without numpy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


def _three(x: float) -> str:
    return f"{x:.3f}"


def missing(x: Any) -> bool:
    """True for None, NaN and anything that is not a number (a score not computed)."""
    if x is None:
        return True
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return True


def auroc(scores: Iterable[float | None], labels: Iterable[float | bool | None]) -> float:
    """Area under the ROC curve of ``scores`` for ``labels`` (Mann–Whitney U).

    A label counts as positive when it is > 0 (``+1``, ``1``, ``True``) and as
    negative otherwise (``-1``, ``0``, ``False``). Pairs whose score or label is
    None or NaN are dropped (an example with no tokens left has no implicit
    reward). Tied scores across the classes count 0.5, so a constant scorer gets
    exactly 0.5. Raises ValueError naming the counts when a class is missing,
    because AUROC is undefined then and a silent 0.5 would hide it.
    """
    scores = list(scores)
    labels = list(labels)
    if len(scores) != len(labels):
        raise ValueError(f"auroc needs one label per score, got {len(scores)} and {len(labels)}")
    pairs = [
        (float(s), float(y) > 0)
        for s, y in zip(scores, labels, strict=True)
        if not missing(s) and not missing(y)
    ]
    n_pos = sum(1 for _, y in pairs if y)
    n_neg = len(pairs) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError(
            f"AUROC needs both classes, got {n_pos} positive and {n_neg} negative scored examples"
        )
    # Mid-ranks (1-based) over tied groups; U = R_pos − P(P+1)/2.
    pairs.sort(key=lambda p: p[0])
    rank_sum_pos = 0.0
    i = 0
    while i < len(pairs):
        j = i
        while j + 1 < len(pairs) and pairs[j + 1][0] == pairs[i][0]:
            j += 1
        mid_rank = (i + j) / 2.0 + 1.0
        rank_sum_pos += mid_rank * sum(1 for k in range(i, j + 1) if pairs[k][1])
        i = j + 1
    u = rank_sum_pos - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)



#: One-sided level below which a drop counts as *measurably worse* (a rejection).
#: Larger than the usual 0.05 on purpose: the two errors do not cost the same. A
#: good round rejected by chance is retried (its ratings are not retired) and costs
#: one round's compute; a worse model accepted is what the user then talks to. At
#: 0.05 an 8 + 8 held-out set rejects a round-1 adapter whose true AUROC is 0.25
#: only about half the time, at 0.2 81%, at 0.25 84%; the price is that a round
#: that changed nothing the held-out set sees (true 0.5) is rejected about one time
#: in five (``bench/gate_power.py`` prints both).
ALPHA_WORSE = 0.25
#: One-sided level below which a gain counts as *measurably better* (a claim shown
#: to the user, so held to the usual standard).
ALPHA_BETTER = 0.05
#: Largest good x bad product tested with the exact Mann-Whitney distribution;
#: above it (more than 64 + 64) the normal approximation is as good.
EXACT_MAX_PAIRS = 64 * 64


@functools.lru_cache(maxsize=256)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings of m positives among n negatives give U = u.

    The Mann-Whitney U has the Gaussian binomial coefficient
    ``prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i)`` as its generating function;
    multiplying and dividing truncated power series gives the exact counts in
    O(m * m * n) integer steps (0.2 ms at 8 + 8, 20 ms at 64 + 64), once per size.
    """
    size = m * n + 1
    counts = [1] + [0] * (size - 1)
    for i in range(1, m + 1):
        k = n + i
        for u in range(size - 1, k - 1, -1):
            counts[u] -= counts[u - k]
        for u in range(i, size):
            counts[u] += counts[u - i]
    return tuple(counts)


def mann_whitney_p(u: float, m: int, n: int) -> tuple[float, float]:
    """(P(U <= u), P(U >= u)) under the null that ranks do not depend on the class.

    ``u`` is the observed U (``auroc x m x n``; ties count 1/2, so it may end in .5).
    Exact for ``m x n <= EXACT_MAX_PAIRS``, where the distribution of untied
    ranks is used and a half-integer ``u`` is rounded *away* from the tail
    (conservative: a tie never makes a result look stronger). Above that, the
    normal approximation with continuity correction.
    """
    if m < 1 or n < 1:
        raise ValueError(f"the rank test needs both classes, got {m} and {n}")
    if m * n > EXACT_MAX_PAIRS:
        mean, sd = m * n / 2.0, math.sqrt(m * n * (m + n + 1) / 12.0)
        low = 0.5 * math.erfc(-((u + 0.5 - mean) / sd) / math.sqrt(2.0))
        high = 0.5 * math.erfc(((u - 0.5 - mean) / sd) / math.sqrt(2.0))
        return min(1.0, low), min(1.0, high)
    counts = _u_counts(min(m, n), max(m, n))
    total = math.comb(m + n, m)
    lo_u, hi_u = math.ceil(u - 1e-9), math.floor(u + 1e-9)
    low = sum(counts[: max(0, min(lo_u, m * n)) + 1])
    high = sum(counts[max(0, hi_u) :]) if hi_u <= m * n else 0
    return low / total, high / total


@dataclass(frozen=True)
class PreferenceTest:
    """What the held-out ratings say about this round's change (see :func:`preference_test`).

    ``change_auroc``: the share of (good, bad) held-out pairs whose score *change*
    puts the good answer above the bad one (0.5: the change ignores the ratings).
    ``p_worse`` / ``p_better``: exact one-sided p-values of that share under the
    null that the change does not depend on the rating.
    """

    change_auroc: float
    p_worse: float
    p_better: float
    good: int
    bad: int
    auroc_new: float
    auroc_parent: float


def preference_test(
    new: Sequence[float | None],
    parent: Sequence[float | None] | None,
    labels: Sequence[float],
) -> PreferenceTest:
    """The paired, exact test of a round's held-out preference.

    ``new`` and ``parent`` are the per-answer implicit rewards of the new adapter
    and of the parent on the *same* held-out answers (``parent=None``: the base,
    whose reward is identically 0). The test ranks each answer's change
    ``new - parent`` and compares good with bad with the exact Mann-Whitney
    distribution. Why the change: the parent's own spread is common to both
    scores and cancels (scoring them as independent samples doubled the noise),
    and in round 1 the change *is* the new score, so the test is the new AUROC
    against exactly 0.5 — the base has no sampling error to add. Answers with a
    missing score (no response tokens) are left out.
    """
    parent = [0.0] * len(new) if parent is None else list(parent)
    if not (len(new) == len(parent) == len(labels)):
        raise ValueError(
            f"preference_test needs one score per label, got {len(new)}, {len(parent)} "
            f"and {len(labels)}"
        )
    rows = [
        (float(q), float(p), float(y) > 0)
        for q, p, y in zip(new, parent, labels, strict=True)
        if not missing(q) and not missing(p) and not missing(y)
    ]
    ys = [y for _, _, y in rows]
    good = sum(ys)
    area = auroc([q - p for q, p, _ in rows], ys)  # raises when a class is missing
    p_worse, p_better = mann_whitney_p(area * good * (len(rows) - good), good, len(rows) - good)
    return PreferenceTest(
        change_auroc=area, p_worse=p_worse, p_better=p_better, good=good,
        bad=len(rows) - good, auroc_new=auroc([q for q, _, _ in rows], ys),
        auroc_parent=auroc([p for _, p, _ in rows], ys),
    )  # fmt: skip


def judge_preference(test: PreferenceTest, tolerance: float) -> tuple[str, str]:
    """(``worse`` | ``better`` | ``unchanged``, the sentence saying why) for a test result.

    *Worse* (a rejection) needs both a drop beyond ``tolerance`` — the change
    ranks good above bad in fewer than ``0.5 - tolerance`` of the pairs — and
    evidence for it (``p_worse <= ALPHA_WORSE``). *Better* needs
    ``p_better <= ALPHA_BETTER``. Anything else is *not measurably worse*, and
    the sentence says whether the drop was inside the tolerance or the held-out
    ratings were too few to tell.
    """
    told = (
        f"held-out AUROC {_three(test.auroc_parent)} -> {_three(test.auroc_new)}; the round's "
        f"change ranks good above bad in {_three(test.change_auroc)} of the pairs "
        f"({test.good} good x {test.bad} bad held out"
    )
    drop = 0.5 - test.change_auroc
    if drop > tolerance and test.p_worse <= ALPHA_WORSE:
        return "worse", (
            f"{told}, exact p = {test.p_worse:.3g} <= {ALPHA_WORSE:g}): measurably worse, "
            f"beyond the {tolerance:g} tolerance"
        )
    if test.p_better <= ALPHA_BETTER:
        return "better", f"{told}, exact p = {test.p_better:.3g}): measurably better"
    if 0 < drop <= tolerance:
        return "unchanged", (
            f"{told}): not measurably worse; a drop within the {tolerance:g} tolerance"
        )
    if drop > 0:
        return "unchanged", (
            f"{told}, exact p = {test.p_worse:.3g}): not measurably worse; too few held-out "
            "ratings to tell a drop this size from chance"
        )
    return "unchanged", (
        f"{told}, exact p = {test.p_better:.3g}): not measurably worse, nor measurably better"
    )
