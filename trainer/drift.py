"""Where and how far a round's policy moved: the drift set, its KL, the guard's test.

The drift set is the turns drift is measured on (the user's held-out prompts, else
the newest training turns); :meth:`DriftSet.measure` gives the exact per-token KL
against the parent and the base at response and prompt positions, which both the
drift guard (a few turns after every optimizer step) and the gate (every turn, at
the end of the round) read; :func:`over_cap` is the one test of those numbers
against the caps. Kept out of :mod:`.train` so the round loop stays a loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
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


@dataclass
class DriftSet:
    """Where drift is measured: encoded turns, which of them, and the parent's LoRA.

    The held-out turns when there are any (the user's own prompts, not trained
    on); else the newest training turns (trained on, so their drift reads high:
    the conservative side). ``parent`` is the parent adapter's tensors (``None``
    for a first round: the parent is the base).
    """

    enc: dict[int, Any]
    idx: list[int]
    which: str
    parent: dict[str, np.ndarray] | None
    seconds: float = 0.0  # time the drift guard spent measuring (profile of a round)
    last: Measured | None = None  # what the latest :meth:`measure` call measured

    @classmethod
    def of(cls, enc: dict[int, Any], kept: list[int], held_enc: dict[int, Any],
           held_kept: list[int], job: TrainJob) -> DriftSet:
        parent = None
        if job.parent_adapter is not None:
            parent = adapters.load_adapter_tensors(job.parent_adapter)
        if held_kept:
            return cls(held_enc, list(held_kept), "held-out", parent)
        return cls(enc, list(kept[-DRIFT_TRAIN_TURNS:]), "training", parent)

    def keep_references(self, backend: Any) -> int:
        """Ask the backend to keep the base's (and parent's) logits of these turns
        from the forwards that compute them (the guard's turns first, under a byte
        budget): a measurement then runs the policy's forward only. How many turns."""
        vocab = getattr(backend, "vocab_size", None)
        store = getattr(backend, "reference", None)
        if store is None or not vocab:
            return 0
        kinds = ("base",) if self.parent is None else ("base", "parent")
        return store.want([np.asarray(self.enc[i].input_ids) for i in self.idx], kinds, vocab)

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
        idx = self.idx if limit is None else self.idx[:limit]
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


#: The drift guard stops at this share of each cap. It measures a few turns of the
#: drift set, the gate all of them: on SmolLM2 an aggressive round stopped by the guard
#: at 0.104 on 8 turns kept a step that measured 0.101 on all 16 and was rejected.
GUARD_MARGIN = 0.8


#: Each drift the caps hold: (its key, the cap's hyper field, where, against what).
CAPPED = (
    ("kl_round", "kl_cap", "the held-out answers", "the parent"),
    ("kl_total", "kl_cap_total", "the held-out answers", "the base"),
    ("kl_round_general", "kl_cap", "the prompt text", "the parent"),
    ("kl_total_general", "kl_cap_total", "the prompt text", "the base"),
)


def over_cap(drift: dict[str, float], hyper: Any, share: float = 1.0) -> str | None:
    """A sentence when a drift passes ``share`` of its cap (the gate's caps), else None."""
    for key, cap_name, where, against in CAPPED:
        cap = float(getattr(hyper, cap_name))
        if not drift[key] <= share * cap:  # NaN counts as over
            limit = f"the {cap:g} cap" if share == 1.0 else f"{share:g} x the {cap:g} cap"
            return f"KL to {against} on {where} {drift[key]:.4g} passed {limit}"
    return None


#: The LoRA snapshots the guard may go back to stay under this many bytes: on a 7B
#: model a rank-16 snapshot is ~160 MB, so the gap between measurements shrinks there.
SNAPSHOT_BUDGET_BYTES = 256 * 2**20


def share_of_line(drift: dict[str, float], hyper: Any) -> float:
    """The largest drift as a share of its guard line (``GUARD_MARGIN`` x its cap); NaN -> inf."""
    worst = 0.0
    for key, cap_name, _where, _against in CAPPED:
        share = drift[key] / (GUARD_MARGIN * float(getattr(hyper, cap_name)))
        worst = max(worst, share) if share == share else float("inf")
    return worst


def steps_to_next_check(share: float, step: int, most: int) -> int:
    """Optimizer steps until the guard measures again.

    Within a round the LoRA moves about the same distance each step and KL is
    quadratic in a small move, so drift at share ``r`` of the line after ``step``
    steps reaches the line near step ``step / sqrt(r)``. The guard measures again
    half-way there, and every step once a quarter of the line is used. Growth that
    beats the projection costs only the steps since the last good measurement
    (:meth:`Guard.check` walks back to the newest step within the line).
    """
    if most <= 1 or share >= 0.25:
        return 1
    if share <= 0:
        return most
    return max(1, min(most, int(step * (share ** -0.5 - 1) / 2)))


class Guard:
    """The drift guard within one round: when to measure, and where to go back to.

    Measuring after every step cost up to 2.4x the step on MLX and a fifth of a
    torch round; far below the cap it measures every few steps instead, keeping a
    LoRA snapshot of each unmeasured step, so a stop still keeps the newest step
    whose measured drift is within the line. The weights a round starts from count
    as within it (the parent: no drift this round); after a resume they are
    measured like any other snapshot when the guard has to walk back to them.
    """

    def __init__(self, drift: DriftSet, backend: Any, hyper: Any, pad_id: int,
                 start_step: int) -> None:
        self.drift, self.backend, self.hyper, self.pad_id = drift, backend, hyper, pad_id
        self.turns = int(getattr(hyper, "guard_turns", 4))
        self.most = max(1, int(getattr(hyper, "guard_max_gap", 4)))
        self._snapshots: list[tuple[int, dict[str, np.ndarray], bool]] = []
        self._known_good = start_step if start_step == 0 else None
        self._good_sums: Measured | None = None  # the known-good step's measurement
        self._due = start_step + 1
        #: The guard's measurement of the weights loaded now (None once they change):
        #: the gate's final measurement reuses it for the turns it covers.
        self.current: Measured | None = None
        # the gate scores held-out turns from the same forward, so keep their rows
        self._rows = drift.which == "held-out"

    def remember(self, step: int) -> None:
        """Snapshot the weights of ``step`` (called before the next optimizer step)."""
        self.current = None  # the step about to run changes the weights
        if self.turns <= 0:
            return
        lora = self.backend.lora_state()
        self._snapshots.append((step, lora, step == self._known_good))
        size = sum(int(v.nbytes) for v in lora.values())
        self.most = max(1, min(self.most, SNAPSHOT_BUDGET_BYTES // max(size, 1)))

    def check(self, step: int, last: bool
              ) -> tuple[dict[str, float] | None, tuple[int, str] | None]:
        """Measure when due (always after the round's last step).

        Returns the measurement (``None`` when not due) and, when it passed the
        line, ``(step kept, why)`` with the kept step's weights already loaded.
        """
        if self.turns <= 0 or not (last or step >= self._due):
            return None, None
        measured = self._measure()
        why = over_cap(measured, self.hyper, GUARD_MARGIN)
        if why is None:
            self._snapshots.clear()
            self._known_good = step
            self._good_sums = self.current = self.drift.last
            self._due = step + steps_to_next_check(share_of_line(measured, self.hyper),
                                                   step, self.most)
            return measured, None
        return measured, (self._walk_back(), why)

    def _measure(self) -> dict[str, float]:
        t0 = time.monotonic()
        try:
            return self.drift.measure(self.backend, self.hyper, self.pad_id, self.turns,
                                      policy_rows={} if self._rows else None)
        finally:
            self.drift.seconds += time.monotonic() - t0

    def _walk_back(self) -> int:
        """Load the newest snapshot within the line (measuring the unmeasured); its step."""
        for step, lora, good in reversed(self._snapshots):
            self.backend.set_lora_state(lora)
            if good:
                self.current = self._good_sums
                return step
            if over_cap(self._measure(), self.hyper, GUARD_MARGIN) is None:
                self.current = self.drift.last
                return step
        self.current = self.drift.last  # nothing passed: the oldest, for the gate to judge
        return self._snapshots[0][0]
