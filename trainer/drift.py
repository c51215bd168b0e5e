"""Where and how far a round's policy moved: the drift set, its KL, the guard's test.

The drift set is the turns drift is measured on (the user's held-out prompts, else
the newest training turns); :meth:`DriftSet.measure` gives the exact per-token KL
against the parent and the base at response and prompt positions, which both the
drift guard (a few turns after every optimizer step) and the gate (every turn, at
the end of the round) read; :func:`over_cap` is the one test of those numbers
against the caps. Kept out of :mod:`.train` so the round loop stays a loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from rltray.trainer import adapters, data, rounddata
from rltray.trainer.job import TrainJob

#: Training turns used as the drift set when nothing is held out (newest first).
DRIFT_TRAIN_TURNS = 16


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

    @classmethod
    def of(cls, enc: dict[int, Any], kept: list[int], held_enc: dict[int, Any],
           held_kept: list[int], job: TrainJob) -> DriftSet:
        parent = None
        if job.parent_adapter is not None:
            parent = adapters.load_adapter_tensors(job.parent_adapter)
        if held_kept:
            return cls(held_enc, list(held_kept), "held-out", parent)
        return cls(enc, list(kept[-DRIFT_TRAIN_TURNS:]), "training", parent)

    def measure(self, backend: Any, hyper: Any, pad_id: int, limit: int | None = None
                ) -> dict[str, float]:
        """Mean per-token KL to the parent and the base at response and prompt positions."""
        idx = self.idx if limit is None else self.idx[:limit]
        sums = dict.fromkeys(("resp_round", "resp_total", "resp_count", "prompt_round",
                              "prompt_total", "prompt_count"), 0.0)
        size = max(1, int(hyper.batch_size))
        for mb in rounddata.micro_batches(idx, self.enc, size):
            got = backend.drift_sums(data.collate([self.enc[i] for i in mb], pad_id), self.parent)
            for k in sums:
                sums[k] += float(got[k])
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


def over_cap(drift: dict[str, float], hyper: Any, share: float = 1.0) -> str | None:
    """A sentence when a drift passes ``share`` of its cap (the gate's caps), else None."""
    for key, cap_name, where, against in (
        ("kl_round", "kl_cap", "the held-out answers", "the parent"),
        ("kl_total", "kl_cap_total", "the held-out answers", "the base"),
        ("kl_round_general", "kl_cap", "the prompt text", "the parent"),
        ("kl_total_general", "kl_cap_total", "the prompt text", "the base"),
    ):
        cap = float(getattr(hyper, cap_name))
        if not drift[key] <= share * cap:  # NaN counts as over
            limit = f"the {cap:g} cap" if share == 1.0 else f"{share:g} x the {cap:g} cap"
            return f"KL to {against} on {where} {drift[key]:.4g} passed {limit}"
    return None
