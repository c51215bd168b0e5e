"""Where and how far a round's policy moved: the drift set, its KL, the guard's test.

The drift set is the turns drift is measured on (the user's held-out prompts, else
the newest training turns); :meth:`DriftSet.measure` gives the exact per-token KL
against the parent and the base at response and prompt positions, which both the
drift guard (a few turns of both classes after every few optimizer steps) and the
gate (every turn, at the end of the round) read; :mod:`.guard` decides when the
guard measures, where it stops and which step it keeps. Kept out of :mod:`.train`
so the round loop stays a loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rltray.trainer import adapters, data, rounddata
from rltray.trainer.job import TrainJob

#: Training turns used as the drift set when nothing is held out (newest first).
DRIFT_TRAIN_TURNS = 16


SUM_KEYS = ("resp_round", "resp_total", "resp_count", "prompt_round", "prompt_total",
            "prompt_count")


@dataclass
class Measured:
    """Raw KL sums over some turns under one set of weights (sums add over turns),
    with the policy's log-prob rows of those turns when they were asked for."""

    turns: frozenset[int]
    sums: dict[str, float]
    rows: dict[int, np.ndarray] | None


def _spread(items: Sequence[int]) -> list[int]:
    """``items`` in an order whose every prefix covers their range about evenly
    (the middle, then the quarters, then the eighths, ...)."""
    n, out, picked, k = len(items), [], set(), 1
    while len(out) < n:
        for j in range(k):  # once k >= n these positions step by <= 1: every one is hit
            p = (2 * j + 1) * n // (2 * k)
            if p not in picked:
                picked.add(p)
                out.append(items[p])
        k *= 2
    return out


def stratified(idx: Sequence[int], ratings: Mapping[int, int]) -> list[int]:
    """``idx`` reordered so that every prefix takes good and bad turns in turn.

    The drift guard measures the first few turns of this order. It took the
    oldest few held-out turns, which may all be one class; a policy pushed away
    from bad answers drifts differently on good ones, so the guard's sample must
    hold both, each class's turns spread over old and new. Turns without a rating
    count as one class. Good comes first, then bad, while both last.
    """
    classes: dict[int, list[int]] = {}
    for i in idx:
        classes.setdefault(int(ratings.get(i, 0)), []).append(i)
    queues = [_spread(classes[c]) for c in sorted(classes, reverse=True)]
    out: list[int] = []
    for r in range(max((len(q) for q in queues), default=0)):
        out.extend(q[r] for q in queues if r < len(q))
    return out


@dataclass
class DriftSet:
    """Where drift is measured: encoded turns, which of them, and the parent's LoRA.

    The held-out turns when there are any (the user's own prompts, not trained
    on); else the newest training turns (trained on, so their drift reads high:
    the conservative side). ``parent`` is the parent adapter's tensors (``None``
    for a first round: the parent is the base). ``ratings``: each turn's rating,
    so the guard's few turns hold both classes (:func:`stratified`).
    """

    enc: dict[int, Any]
    idx: list[int]
    which: str
    parent: dict[str, np.ndarray] | None
    seconds: float = 0.0  # time the drift guard spent measuring (profile of a round)
    last: Measured | None = None  # what the latest :meth:`measure` call measured
    ratings: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, enc: dict[int, Any], kept: list[int], held_enc: dict[int, Any],
           held_kept: list[int], job: TrainJob, examples: Sequence[Any] = (),
           heldout: Sequence[Any] = ()) -> DriftSet:
        """The drift set of a round; ``examples`` / ``heldout`` give the ratings."""
        parent = None
        if job.parent_adapter is not None:
            parent = adapters.load_adapter_tensors(job.parent_adapter)
        if held_kept:
            rated = {i: heldout[i].rating for i in held_kept if i < len(heldout)}
            return cls(held_enc, list(held_kept), "held-out", parent, ratings=rated)
        idx = list(kept[-DRIFT_TRAIN_TURNS:])
        rated = {i: examples[i].rating for i in idx if i < len(examples)}
        return cls(enc, idx, "training", parent, ratings=rated)

    def sample(self, limit: int | None) -> list[int]:
        """The turns a measurement of ``limit`` turns takes (all for ``None``)."""
        return list(self.idx) if limit is None else stratified(self.idx, self.ratings)[:limit]

    def keep_references(self, backend: Any) -> int:
        """Ask the backend to keep the base's (and parent's) reference states of these
        turns (the last hidden state, from which its head rebuilds the exact logits)
        from the forwards that compute them (the guard's turns first, under a byte
        budget from the free memory): a measurement then runs the policy's forward
        only. How many turns."""
        width = getattr(backend, "reference_width", None)
        store = getattr(backend, "reference", None)
        if store is None or not width:
            return 0
        kinds = ("base",) if self.parent is None else ("base", "parent")
        turns = stratified(self.idx, self.ratings)  # the guard's sample is its prefix
        return store.want([np.asarray(self.enc[i].input_ids) for i in turns], kinds, width)

    def measure(self, backend: Any, hyper: Any, pad_id: int, limit: int | None = None,
                policy_rows: dict[int, np.ndarray] | None = None,
                known: Measured | None = None) -> dict[str, float]:
        """Mean per-token KL to the parent and the base at response and prompt positions.

        ``policy_rows``: filled with each turn's log-prob row under the current
        policy (as :func:`rounddata.logprob_rows` gives it), from the forward the KL
        needs anyway: the gate scores the held-out turns without a forward of its own.
        ``known``: sums the caller already has for some of these turns under the
        weights loaded now (the guard's last measurement); only the rest is run.
        """
        idx = self.sample(limit)
        want = policy_rows is not None
        if known is not None and (not known.turns <= set(idx) or (want and known.rows is None)):
            known = None
        sums = dict(known.sums) if known else dict.fromkeys(SUM_KEYS, 0.0)
        rows: dict[int, np.ndarray] = dict(known.rows or {}) if known else {}
        todo = [i for i in idx if known is None or i not in known.turns]
        size = max(1, int(hyper.batch_size))
        for mb in rounddata.micro_batches(todo, self.enc, size):
            got = backend.drift_sums(data.collate([self.enc[i] for i in mb], pad_id),
                                     self.parent, logprobs=want)
            for k in SUM_KEYS:
                sums[k] += float(got[k])
            if want:
                for r, i in enumerate(mb):
                    n = rounddata.length(self.enc[i]) - 1
                    rows[i] = got["logprobs"][r, :n].astype(np.float32)
        self.last = Measured(frozenset(idx), sums, rows if want else None)
        if policy_rows is not None:
            policy_rows.update(rows)
        rc, pc = max(sums["resp_count"], 1.0), max(sums["prompt_count"], 1.0)
        return {
            "kl_round": sums["resp_round"] / rc,
            "kl_total": sums["resp_total"] / rc,
            "kl_round_general": sums["prompt_round"] / pc,
            "kl_total_general": sums["prompt_total"] / pc,
        }
