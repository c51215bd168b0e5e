"""One training round, written once for every backend.

``train(backend, examples, heldout, job, hyper, emit, should_stop, objective=MISPO)``
is a plain function (habit 12): the model sits behind the
:class:`~.backends.base.Backend` door, the maths in :mod:`.objective` (the
objective is passed in: a benchmark's baseline names its own), the verdict in
:mod:`.evaluate`, the folder format in :mod:`.adapters`; ``emit`` receives every
progress line as a dict. What the phases below share is one :class:`~.round.Round`.
The round:

1. encode every example (skips reported, never silently lost);
2. round-start log-probs once: ``o`` (the parent policy, or the example's own
   behaviour log-probs when it was written by the local model) and ``f`` (base);
   the parent's held-out AUROC;
3. advantages from the job's EMA baseline (no batch z-normalisation), class
   weights, then ``epochs`` passes over **all** kept examples in a seeded order,
   one optimizer step per ``step_examples`` examples (micro-batches of
   ``batch_size``, weights normalised over the step);
   The **drift guard** measures the exact KL to the parent and to the base on a
   few turns of the drift set (below; good and bad alike) after every step, or
   every few steps while the drift is far below its line (``guard.Guard``; the
   line of the drift to the base starts where the parent left it); when either
   passes it the round stops early and keeps the newest step within it, so no
   preset can run a model off a cliff between two gate checks;
4. (:mod:`.finish`) the new held-out AUROC, exact drift against the parent and the base on the
   drift set (the held-out turns, else the newest training turns) at response
   and prompt positions, sanity, the gate's verdict; the adapter folder; the EMA
   baseline, updated only when the gate accepts and only over the fresh ratings
   the round retires (a guard stop inside the first epoch leaves the examples the
   kept weights never saw unseen: ``TrainResult.unseen_ids``).

``should_stop()`` is polled in the round start's passes, between optimizer steps and
between the finish's measurements; a stop saves a checkpoint (:mod:`.checkpoint`)
and returns ``paused``. The end of the steps is checkpointed too, so a pause or a
hard kill in the finish resumes at the finish. Running the same job again resumes
from it and ends bit-identical to a run that never paused.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rltray.trainer import (
    adapters,
    capability,
    checkpoint,
    data,
    rounddata,
)
from rltray.trainer.backends.base import Backend
from rltray.trainer.drift import DriftSet
from rltray.trainer.finish import FinishPaused, finish
from rltray.trainer.guard import Guard
from rltray.trainer.job import Example, JobError, TrainJob, TrainResult
from rltray.trainer.objective import (
    MISPO,
    Objective,
    advantages,
    class_weights,
    step_weights,
)
from rltray.trainer.presets import Hyper
from rltray.trainer.round import Emit, Round


@dataclass(frozen=True)
class Outcome:
    """How :func:`train` ended: ``done`` with a result, or ``paused`` at a checkpoint."""

    status: str
    result: TrainResult | None = None
    checkpoint: Path | None = None


def train(
    backend: Backend,
    examples: Sequence[Example],
    heldout: Sequence[Example] | None,
    job: TrainJob,
    hyper: Hyper,
    emit: Emit,
    should_stop: Callable[[], bool] = lambda: False,
    objective: Objective = MISPO,
) -> Outcome:
    """Run one round on a loaded ``backend``; see the module docstring for the steps.

    ``objective`` is what the round optimises (:mod:`.objective`; MIS-PO unless a
    benchmark asks for a baseline such as ``objective.REINFORCE``). One that fixes
    loss parameters replaces ``hyper`` by its own and hands that to the backend
    (``backend.hyper``: the backend's loss reads it at every step).
    """
    started = time.monotonic()
    if objective.loss_fields:
        hyper = backend.hyper = objective.loss_hyper(hyper)
    heldout = list(heldout or [])
    if not examples:
        raise JobError("the round has no training examples")
    pad_id = rounddata.pad_id(backend.tokenizer)
    enc, kept = rounddata.encode_all(backend.tokenizer, examples, hyper, emit, "training")
    if not kept:
        raise JobError(
            f"none of the {len(examples)} training examples has any response token left "
            f"after fitting to max_seq_len={hyper.max_seq_len}"
        )
    held_enc, held_kept = rounddata.encode_all(backend.tokenizer, heldout, hyper, emit, "held-out")
    data_hash = adapters.examples_hash(
        [e.to_dict() for e in examples] + [{"heldout": e.to_dict()} for e in heldout]
    )
    drift = DriftSet.of(enc, kept, held_enc, held_kept, job, examples, heldout)
    drift.keep_references(backend)
    width = max(len(e.input_ids) for e in [*(enc[i] for i in kept),
                                            *(held_enc[i] for i in held_kept)])
    sequences = backend.sequences_per_pass(width, int(hyper.batch_size))
    if sequences < int(hyper.batch_size):
        emit({"type": "log", "message": f"{sequences} sequence(s) per forward pass, not "
              f"batch_size {hyper.batch_size}: on this CPU a batch's activations would not "
              "fit the memory budget, and batching buys a CPU no speed"})  # fmt: skip
    if backend.tight:
        emit({"type": "log", "message": "this round runs lean to fit the memory free now "
              "(or as RLTRAY_TRAINER_RECOMPUTE asks): it recomputes what it would keep and "
              "hands freed memory back at once, slower but in less memory"})  # fmt: skip
    rnd = Round(
        backend=backend, job=job, hyper=hyper, objective=objective, examples=examples,
        heldout=heldout,
        enc=enc, kept=kept, held_enc=held_enc, held_kept=held_kept, pad_id=pad_id,
        data_hash=data_hash, drift=drift, emit=emit, should_stop=should_stop, started=started,
        sequences=sequences,
    )  # fmt: skip
    state = _resume_or_start(rnd)
    if state is None:
        return Outcome("paused", checkpoint=None)
    rnd.guard = _guard(rnd, state)
    how = state.stopped_early if state.steps_done else _optimise(rnd, state)
    if how != "paused" and not state.steps_done:
        state.steps_done, state.stopped_early = True, how
        _save(rnd, state)  # a kill during the finish resumes at the finish
    if how == "paused":
        return Outcome("paused", checkpoint=_save(rnd, state))
    try:
        result = finish(rnd, state, stopped_early=how)
    except FinishPaused:
        rnd.emit({"type": "log", "message": "paused in the checks after the last step; "
                  "resuming runs only those checks"})  # fmt: skip
        return Outcome("paused", checkpoint=job.checkpoint_dir)
    checkpoint.remove(job.checkpoint_dir)
    return Outcome("done", result=result)


def _save(rnd: Round, state: checkpoint.RoundState) -> Path:
    """Checkpoint the round where it is, with its drift guard's state."""
    return checkpoint.save_with_guard(rnd.job.checkpoint_dir, state, rnd.backend, rnd.guard)


def _resume_or_start(rnd: Round) -> checkpoint.RoundState | None:
    """The round's state: its checkpoint's when one of this very round is there, else
    a new one from the round start (``None`` when asked to stop during it)."""
    ck_dir, emit = rnd.job.checkpoint_dir, rnd.emit
    state = checkpoint.load(ck_dir) if ck_dir.exists() else None
    fingerprint = round_fingerprint(rnd.job, rnd.hyper, rnd.backend, rnd.objective)
    if state is not None and (
        state.job_id != rnd.job.id or state.data_hash != rnd.data_hash
        or state.fingerprint != fingerprint
    ):  # fmt: skip
        emit({"type": "log", "message": "discarding a checkpoint of a different round"})
        checkpoint.remove(ck_dir)
        state = None
    if state is not None:
        rnd.backend.load_checkpoint(checkpoint.backend_dir(ck_dir))
        emit({"type": "log", "message": "resumed after the last optimizer step, at the "
              "round's checks" if state.steps_done else
              f"resumed at optimizer step {state.global_step}"})  # fmt: skip
        return state
    checkpoint.remove(ck_dir)
    t_start = time.monotonic()
    rnd.backend.reference.parent_loaded = True  # no step yet: the policy is the parent
    try:
        state = _round_start(rnd)
    finally:
        rnd.backend.reference.parent_loaded = False
    if state is None:
        return None
    state.fingerprint = fingerprint
    state.metrics["round_start_s"] = round(time.monotonic() - t_start, 3)
    for name in ("auroc_parent", "heldout_good", "heldout_bad"):
        emit({"type": "metric", "name": name, "value": state.metrics.get(name)})
    return state


def _guard(rnd: Round, state: checkpoint.RoundState) -> Guard:
    """The round's drift guard: as the checkpoint left it, or new at the round's start
    (where it measures the parent's drift to the base: the total lines start there)."""
    guard = Guard(rnd.drift, rnd.backend, rnd.hyper, rnd.pad_id, state.global_step)
    if state.guard:
        guard.restore(state.guard, state.guard_arrays)
    elif state.global_step == 0 and (parent := guard.begin()) is not None:
        rnd.emit({"type": "log", "message": (
            f"drift guard: the parent is at KL {parent['kl_total']:.4g} to the base on "
            f"{rnd.drift.which} answers; this round may take it to "
            f"{guard.lines.line['kl_total']:.4g} (total cap {float(rnd.hyper.kl_cap_total):g})")})
    return guard


def round_fingerprint(
    job: TrainJob, hyper: Hyper, backend: Backend, objective: Objective = MISPO
) -> str:
    """sha256 of what, besides the data, decides a round's numbers (for resume checks).

    The objective is part of it only when it is not MIS-PO, so a MIS-PO round's
    fingerprint (and so its checkpoints) stays what it was before objectives were named.
    """
    import dataclasses
    import hashlib
    import json

    hyper_d = dataclasses.asdict(hyper) if dataclasses.is_dataclass(hyper) else vars(hyper)
    spec = {
        "hyper": hyper_d, "seed": job.seed, "base": str(job.base_model), "rev": job.revision,
        "parent": str(job.parent_adapter), "baseline": job.baseline, "backend": backend.name,
    }  # fmt: skip
    if objective.name != MISPO.name:
        spec["objective"] = objective.name
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


def _round_start(rnd: Round) -> checkpoint.RoundState | None:
    """Round-start log-probs (behaviour ``o``, base ``f``), the parent's held-out metrics
    and the capability reference, as a new state at step 0 (``None`` if stopped)."""
    enc, kept, held_enc, held_kept = rnd.enc, rnd.kept, rnd.held_enc, rnd.held_kept
    backend, size, pad_id, stop = rnd.backend, rnd.size, rnd.pad_id, rnd.should_stop
    base = rounddata.logprob_rows(backend, enc, kept, size, pad_id, adapter=False, should_stop=stop)
    h_base = rounddata.logprob_rows(
        backend, held_enc, held_kept, size, pad_id, adapter=False, should_stop=stop
    )
    if rnd.job.parent_adapter is None:
        # A fresh LoRA has B = 0, so the policy *is* the base, bit for bit: half of the
        # round-start passes would recompute the same numbers.
        pol, h_pol = base, h_base
    else:
        pol = rounddata.logprob_rows(
            backend, enc, kept, size, pad_id, adapter=True, should_stop=stop
        )
        h_pol = rounddata.logprob_rows(
            backend, held_enc, held_kept, size, pad_id, adapter=True, should_stop=stop
        )
    if pol is None or base is None or h_base is None or h_pol is None:
        return None
    old = [rounddata.behaviour_row(enc[i], pol[i]) for i in kept]
    metrics = rounddata.heldout_metrics(
        held_enc, held_kept, rnd.heldout, h_pol, h_base, "auroc_parent"
    )
    # The capability check's reference: the base's greedy answers to a few of the round's
    # prompts and their NLL under base and parent (capability.py), kept in the checkpoint;
    # the answers are kept between rounds too (base_answers.py), the NLLs are not.
    prompts = capability.choose_prompts(held_enc, held_kept, enc, kept, int(rnd.hyper.ref_prompts))
    reference = capability.round_start(
        backend, prompts, rnd.hyper, pad_id, has_parent=rnd.job.parent_adapter is not None,
        keep_answers=True,
    )
    if reference.get("answers_kept"):
        rnd.emit({"type": "log", "message": (
            "the base model's answers for the capability check came from an earlier round "
            f"({reference['answers_kept']} prompt set(s); their NLL is measured afresh)"
        )})
    return checkpoint.RoundState(
        job_id=rnd.job.id,
        data_hash=rnd.data_hash,
        kept=kept,
        held_kept=held_kept,
        old=old,
        base=[base[i] for i in kept],
        held_base=[h_base[i] for i in held_kept],
        metrics=metrics,
        reference=reference,
    )


# ---- the optimisation loop ----------------------------------------------------------


def _pad_rows(rows: Sequence[np.ndarray], width: int) -> np.ndarray:
    out = np.zeros((len(rows), width), dtype=np.float32)
    for r, row in enumerate(rows):
        out[r, : len(row)] = row
    return out


def _optimise(rnd: Round, state: checkpoint.RoundState) -> str:
    """Run the remaining optimizer steps.

    Returns ``"paused"`` when asked to stop (state = the position), ``""`` when all
    steps ran, or the drift guard's sentence when it stopped the round early (the
    weights are then those of the newest step within the guard's line).
    """
    hyper, guard, emit, kept = rnd.hyper, rnd.guard, rnd.emit, state.kept
    ratings = [rnd.examples[i].value for i in kept]  # a graded rating's reward, else +1 / -1
    adv = advantages(ratings, rnd.job.baseline, float(hyper.adv_clip))
    cls_w = class_weights(ratings, adv)
    per_step = max(1, int(hyper.step_examples))
    steps_per_epoch = math.ceil(len(kept) / per_step)
    total = int(hyper.epochs) * steps_per_epoch
    elapsed_before = state.elapsed_s
    resumed_at = time.monotonic()
    periodic = checkpoint.Periodic()  # a hard kill loses at most its interval
    while state.epoch < int(hyper.epochs):
        if not state.order:
            state.order = rounddata.epoch_order(len(kept), rnd.job.seed, state.epoch)
        while state.step < steps_per_epoch:
            if rnd.should_stop():
                state.elapsed_s = elapsed_before + time.monotonic() - resumed_at
                return "paused"
            t0 = time.monotonic()
            chunk = state.order[state.step * per_step : (state.step + 1) * per_step]
            agg = _accumulate(rnd, state, chunk, adv, cls_w)
            guard.remember(state.global_step)
            step = rnd.backend.step()
            state.step += 1
            state.global_step += 1
            dt = max(time.monotonic() - t0, 1e-9)
            # The guard measures a few turns of the drift set (``hyper.guard_turns``, a
            # cheap sample of what the gate measures on all of them) every step or
            # every few while drift is far below its line; 0 turns turn it off.
            measured, stop = guard.check(state.global_step, last=state.global_step == total)
            emit(
                {
                    "type": "progress",
                    "step": state.global_step,
                    "total": total,
                    "epoch": state.epoch + 1,
                    **agg.line(),
                    "grad_norm": step["grad_norm"],
                    "tokens_per_s": round(agg.seq_tokens / dt, 1),
                    "elapsed_s": round(elapsed_before + time.monotonic() - resumed_at, 3),
                    # None on the steps the guard did not measure
                    **{k: round(measured[k], 6) if measured else None
                       # the prompt-text drift the guard also checks (it stops most
                       # on-policy rounds that it stops): visible where the stop is
                       for k in ("kl_round", "kl_total", "kl_round_general")},
                }
            )
            if stop is not None:
                kept_step, why = stop
                message = (f"drift guard: {why} after step {state.global_step} of {total}; "
                           f"stopped early and kept the weights of step {kept_step}")
                emit({"type": "log", "message": message})
                state.global_step = kept_step  # the undone steps do not count
                state.elapsed_s = elapsed_before + time.monotonic() - resumed_at
                return message
            if periodic.due() and state.global_step < total:
                state.elapsed_s = elapsed_before + time.monotonic() - resumed_at
                periodic.save(rnd.job.checkpoint_dir, state, rnd.backend, guard)
        state.epoch += 1
        state.step = 0
        state.order = []
    state.elapsed_s = elapsed_before + time.monotonic() - resumed_at
    return ""


def _accumulate(rnd: Round, state: checkpoint.RoundState, chunk: list[int],
                adv: Sequence[float], cls_w: Sequence[float]) -> _Agg:
    """Accumulate one optimizer step's gradient over the kept positions ``chunk``,
    micro-batch by micro-batch; returns the step's folded stats.

    The weights are normalised over the whole step, so the micro-batches' gradients
    add up to the step's whatever the micro-batch size.
    """
    enc, kept = rnd.enc, state.kept
    w_of = dict(zip(chunk, step_weights([cls_w[p] for p in chunk]), strict=True))
    agg = _Agg()
    for mb in rounddata.micro_batches(chunk, {p: enc[kept[p]] for p in chunk}, rnd.size):
        batch = data.collate([enc[kept[p]] for p in mb], rnd.pad_id)
        width = batch.input_ids.shape[1] - 1
        stats = rnd.backend.accumulate(
            batch,
            _pad_rows([state.old[p] for p in mb], width),
            _pad_rows([state.base[p] for p in mb], width),
            np.array([adv[p] for p in mb], dtype=np.float32),
            np.array([w_of[p] for p in mb], dtype=np.float32),
        )
        agg.add(stats, sum(rounddata.length(enc[kept[p]]) for p in mb))
    return agg


class _Agg:
    """Folds one optimizer step's micro-batch stats into the progress line's numbers."""

    def __init__(self) -> None:
        self.loss = 0.0
        self.tokens = 0.0
        self.examples = 0.0
        self.masked = 0.0
        self.kl = 0.0
        self.gated = 0.0
        self.drift = 0.0
        self.adv = 0.0
        self.rows = 0
        self.seq_tokens = 0

    def add(self, s: dict[str, float], seq_tokens: int) -> None:
        self.loss += s["loss"]  # step weights sum to 1: micro-batch losses add up
        self.tokens += s["tokens"]
        self.examples += s["examples"]
        self.masked += s["masked_tokens"] * s["tokens"]
        self.kl += s["kl"] * s["tokens"]
        self.gated += s["gated_examples"] * s["examples"]
        self.drift += s["drift"] * s["examples"]
        self.adv += s["adv_mean"] * s["examples"]
        self.seq_tokens += seq_tokens

    def line(self) -> dict[str, float]:
        t, e = max(self.tokens, 1.0), max(self.examples, 1.0)
        return {
            "loss": self.loss,
            "masked_tokens": self.masked / t,
            "gated_examples": self.gated / e,
            "drift": self.drift / e,
            "kl": self.kl / t,
            "adv_mean": self.adv / e,
        }
