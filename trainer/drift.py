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

#: An estimate takes every ``SAMPLE_STRIDE``-th real position of each turn (a
#: systematic sample: every part of a turn, prompt and answer, is in it).
SAMPLE_STRIDE = 4

#: Standard errors between an estimate and what it may stand for: an estimate
#: counts as within a line only when estimate + ``SAMPLE_Z`` x its standard error is.
SAMPLE_Z = 3.0

#: Fewest sampled positions per mask (answer, prompt) an estimate is trusted on.
SAMPLE_MIN = 30

#: Each measured drift's per-position array and mask in :meth:`DriftSet.estimate`.
_ESTIMATED = (("kl_round", "round_pos", "resp"), ("kl_total", "total_pos", "resp"),
              ("kl_round_general", "round_pos", "prompt"),
              ("kl_total_general", "total_pos", "prompt"))


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

    def estimate(self, backend: Any, hyper: Any, pad_id: int, limit: int | None = None,
                 stride: int = SAMPLE_STRIDE
                 ) -> tuple[dict[str, float], dict[str, float]] | None:
        """The drifts :meth:`measure` gives, from every ``stride``-th position of the
        same turns, and for each the estimate plus ``SAMPLE_Z`` standard errors (the
        sample's own spread, finite-population corrected); None when a mask has
        fewer than ``SAMPLE_MIN`` sampled positions (then only :meth:`measure` will do).

        Why: the policy's body runs over every position either way (causal), but
        the output head, rebuilding the policy's and each reference's logits, is a
        large share of a drift measurement (SmolLM2: 28M of its 135M matmul
        parameters, three times) and runs only at the sampled positions. Which
        positions is fixed by the turn (offset = its index mod ``stride``), so a
        resumed round samples the same ones. Sets :attr:`last` to None: an estimate
        is never reused where the exact sums are needed (the gate).
        """
        idx = self.sample(limit)
        size = max(1, int(hyper.batch_size))
        taken: dict[str, list[np.ndarray]] = {k: [] for k, *_ in _ESTIMATED}
        full = {"resp": 0.0, "prompt": 0.0}
        for mb in rounddata.micro_batches(idx, self.enc, size):
            batch = data.collate([self.enc[i] for i in mb], pad_id)
            real = np.asarray(batch.attention_mask)[:, 1:] > 0
            cols = np.arange(real.shape[1])[None, :]
            offsets = np.array([i % stride for i in mb])[:, None]
            positions = real & ((cols + offsets) % stride == 0)
            got = backend.drift_sums(batch, self.parent, positions=positions)
            resp = np.asarray(batch.response_mask, dtype=bool)[:, 1:] & real
            masks = {"resp": resp, "prompt": real & ~resp}
            for where, m in masks.items():
                full[where] += float(m.sum())
            for key, arr, where in _ESTIMATED:
                taken[key].append(np.asarray(got[arr])[masks[where] & positions])
        self.last = None
        drift, upper = {}, {}
        for key, _arr, where in _ESTIMATED:
            x = np.concatenate(taken[key]) if taken[key] else np.zeros(0)
            if x.size < SAMPLE_MIN:
                return None
            fpc = max(0.0, 1.0 - x.size / max(full[where], 1.0))
            se = float(np.sqrt(x.var(ddof=1) / x.size * fpc))
            drift[key] = float(x.mean())
            upper[key] = drift[key] + SAMPLE_Z * se
        return drift, upper

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
