"""One training round, written once for every backend.

``train(backend, examples, heldout, job, hyper, emit, should_stop)`` is a plain
function (habit 12): the model sits behind the :class:`~.backends.base.Backend`
door, the maths in :mod:`.objective`, the verdict in :mod:`.evaluate`, the folder
format in :mod:`.adapters`; ``emit`` receives every progress line as a dict. The
round:

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
4. the new held-out AUROC, exact drift against the parent and the base on the
   drift set (the held-out turns, else the newest training turns) at response
   and prompt positions, sanity, the gate's verdict; the adapter folder; the EMA
   baseline, updated only when the gate accepts and only over the fresh ratings
   the round retires (a guard stop inside the first epoch leaves the examples the
   kept weights never saw unseen: ``TrainResult.unseen_ids``).

``should_stop()`` is polled between optimizer steps; a stop saves a checkpoint
(:mod:`.checkpoint`) and returns ``paused``. Running the same job again resumes
from it and ends bit-identical to a run that never paused.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from rltray.trainer import (
    adapters,
    capability,
    checkpoint,
    data,
    evaluate,
    objective,
    rounddata,
)
from rltray.trainer.drift import DriftSet
from rltray.trainer.guard import Guard
from rltray.trainer.job import Example, JobError, TrainJob, TrainResult

Emit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Outcome:
    """How :func:`train` ended: ``done`` with a result, or ``paused`` at a checkpoint."""

    status: str
    result: TrainResult | None = None
    checkpoint: Path | None = None


def train(
    backend: Any,
    examples: Sequence[Example],
    heldout: Sequence[Example] | None,
    job: TrainJob,
    hyper: Any,
    emit: Emit,
    should_stop: Callable[[], bool] = lambda: False,
) -> Outcome:
    """Run one round on a loaded ``backend``; see the module docstring for the steps."""
    started = time.monotonic()
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
    ck_dir = job.checkpoint_dir
    state = checkpoint.load(ck_dir) if ck_dir.exists() else None
    fingerprint = round_fingerprint(job, hyper, backend)
    if state is not None and (
        state.job_id != job.id or state.data_hash != data_hash or state.fingerprint != fingerprint
    ):
        emit({"type": "log", "message": "discarding a checkpoint of a different round"})
        checkpoint.remove(ck_dir)
        state = None
    if state is not None:
        backend.load_checkpoint(checkpoint.backend_dir(ck_dir))
        emit({"type": "log", "message": f"resumed at optimizer step {state.global_step}"})
    else:
        checkpoint.remove(ck_dir)
        t_start = time.monotonic()
        backend.reference.parent_loaded = True  # no step yet: the policy is the parent
        try:
            state = _round_start(
                backend, examples, enc, kept, held_enc, held_kept, heldout, job, hyper,
                pad_id, data_hash, should_stop,
            )
        finally:
            backend.reference.parent_loaded = False
        if state is None:
            return Outcome("paused", checkpoint=None)
        state.fingerprint = fingerprint
        state.metrics["round_start_s"] = round(time.monotonic() - t_start, 3)
        for name in ("auroc_parent", "heldout_good", "heldout_bad"):
            emit({"type": "metric", "name": name, "value": state.metrics.get(name)})

    guard = _guard(drift, backend, hyper, pad_id, state, emit)
    how = _optimise(
        backend, examples, enc, state, job, hyper, pad_id, emit, should_stop, started, guard
    )
    if how == "paused":
        state.guard, state.guard_arrays = guard.state()
        return Outcome("paused", checkpoint=checkpoint.save(ck_dir, state, backend))
    result = _finish(
        backend, examples, held_enc, heldout, state, job, hyper, pad_id, data_hash, emit,
        started, guard, stopped_early=how,
    )
    checkpoint.remove(ck_dir)
    return Outcome("done", result=result)


def _guard(drift: DriftSet, backend: Any, hyper: Any, pad_id: int,
           state: checkpoint.RoundState, emit: Emit) -> Guard:
    """The round's drift guard: as the checkpoint left it, or new at the round's start
    (where it measures the parent's drift to the base: the total lines start there)."""
    guard = Guard(drift, backend, hyper, pad_id, state.global_step)
    if state.guard:
        guard.restore(state.guard, state.guard_arrays)
    elif state.global_step == 0 and (parent := guard.begin()) is not None:
        emit({"type": "log", "message": (
            f"drift guard: the parent is at KL {parent['kl_total']:.4g} to the base on "
            f"{drift.which} answers; this round may take it to "
            f"{guard.lines.line['kl_total']:.4g} (total cap {float(hyper.kl_cap_total):g})")})
    return guard


def round_fingerprint(job: TrainJob, hyper: Any, backend: Any) -> str:
    """sha256 of what, besides the data, decides a round's numbers (for resume checks)."""
    import dataclasses
    import hashlib
    import json

    hyper_d = dataclasses.asdict(hyper) if dataclasses.is_dataclass(hyper) else vars(hyper)
    spec = {
        "hyper": hyper_d, "seed": job.seed, "base": str(job.base_model), "rev": job.revision,
        "parent": str(job.parent_adapter), "baseline": job.baseline, "backend": backend.name,
    }  # fmt: skip
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


def _round_start(
    backend: Any,
    examples: Sequence[Example],
    enc: dict[int, Any],
    kept: list[int],
    held_enc: dict[int, Any],
    held_kept: list[int],
    heldout: Sequence[Example],
    job: TrainJob,
    hyper: Any,
    pad_id: int,
    data_hash: str,
    should_stop: Callable[[], bool],
) -> checkpoint.RoundState | None:
    size = max(1, int(hyper.batch_size))
    base = rounddata.logprob_rows(
        backend, enc, kept, size, pad_id, adapter=False, should_stop=should_stop
    )
    h_base = rounddata.logprob_rows(
        backend, held_enc, held_kept, size, pad_id, adapter=False, should_stop=should_stop
    )
    if job.parent_adapter is None:
        # A fresh LoRA has B = 0, so the policy *is* the base, bit for bit: half of the
        # round-start passes would recompute the same numbers.
        pol, h_pol = base, h_base
    else:
        pol = rounddata.logprob_rows(
            backend, enc, kept, size, pad_id, adapter=True, should_stop=should_stop
        )
        h_pol = rounddata.logprob_rows(
            backend, held_enc, held_kept, size, pad_id, adapter=True, should_stop=should_stop
        )
    if pol is None or base is None or h_base is None or h_pol is None:
        return None
    old = [rounddata.behaviour_row(enc[i], pol[i]) for i in kept]
    metrics = rounddata.heldout_metrics(held_enc, held_kept, heldout, h_pol, h_base, "auroc_parent")
    # The capability check's reference: the base's greedy answers to a few of the round's
    # prompts and their NLL under base and parent (capability.py), kept in the checkpoint.
    prompts = capability.choose_prompts(held_enc, held_kept, enc, kept, int(hyper.ref_prompts))
    reference = capability.round_start(backend, prompts, hyper, pad_id,
                                       has_parent=job.parent_adapter is not None)
    return checkpoint.RoundState(
        job_id=job.id,
        data_hash=data_hash,
        kept=kept,
        held_kept=held_kept,
        old=old,
        base=[base[i] for i in kept],
        held_base=[h_base[i] for i in held_kept],
        metrics=metrics,
        reference=reference,
    )


# ---- the optimisation loop ----------------------------------------------------------


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """Positions 0..n-1 in a seeded order that depends only on (seed, epoch)."""
    rng = np.random.default_rng([int(seed), int(epoch)])
    return [int(i) for i in rng.permutation(n)]


def _pad_rows(rows: Sequence[np.ndarray], width: int) -> np.ndarray:
    out = np.zeros((len(rows), width), dtype=np.float32)
    for r, row in enumerate(rows):
        out[r, : len(row)] = row
    return out


def _optimise(
    backend: Any,
    examples: Sequence[Example],
    enc: dict[int, Any],
    state: checkpoint.RoundState,
    job: TrainJob,
    hyper: Any,
    pad_id: int,
    emit: Emit,
    should_stop: Callable[[], bool],
    started: float,
    guard: Guard,
) -> str:
    """Run the remaining optimizer steps.

    Returns ``"paused"`` when asked to stop (state = the position), ``""`` when all
    steps ran, or the drift guard's sentence when it stopped the round early (the
    weights are then those of the newest step within the guard's line).
    """
    kept = state.kept
    ratings = [examples[i].rating for i in kept]
    adv = objective.advantages(ratings, job.baseline, float(hyper.adv_clip))
    cls_w = objective.class_weights(ratings, adv)
    per_step = max(1, int(hyper.step_examples))
    size = max(1, int(hyper.batch_size))
    steps_per_epoch = math.ceil(len(kept) / per_step)
    total = int(hyper.epochs) * steps_per_epoch
    elapsed_before = state.elapsed_s
    resumed_at = time.monotonic()
    lengths = {p: rounddata.length(enc[i]) for p, i in enumerate(kept)}
    while state.epoch < int(hyper.epochs):
        if not state.order:
            state.order = epoch_order(len(kept), job.seed, state.epoch)
        while state.step < steps_per_epoch:
            if should_stop():
                state.elapsed_s = elapsed_before + time.monotonic() - resumed_at
                return "paused"
            t0 = time.monotonic()
            chunk = state.order[state.step * per_step : (state.step + 1) * per_step]
            weights = objective.step_weights([cls_w[p] for p in chunk])
            w_of = dict(zip(chunk, weights, strict=True))
            agg = _Agg()
            for mb in rounddata.micro_batches(chunk, {p: enc[kept[p]] for p in chunk}, size):
                batch = data.collate([enc[kept[p]] for p in mb], pad_id)
                width = batch.input_ids.shape[1] - 1
                stats = backend.accumulate(
                    batch,
                    _pad_rows([state.old[p] for p in mb], width),
                    _pad_rows([state.base[p] for p in mb], width),
                    np.array([adv[p] for p in mb], dtype=np.float32),
                    np.array([w_of[p] for p in mb], dtype=np.float32),
                )
                agg.add(stats, sum(lengths[p] for p in mb))
            guard.remember(state.global_step)
            step = backend.step()
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
        state.epoch += 1
        state.step = 0
        state.order = []
    state.elapsed_s = elapsed_before + time.monotonic() - resumed_at
    return ""


def trained_positions(n: int, per_step: int, seed: int, steps: int) -> list[int]:
    """Positions (into the kept examples) whose gradient the weights after ``steps``
    optimizer steps include, ascending: all of them once the first epoch is done,
    else the first ``steps x per_step`` of epoch 0's order — a drift guard stop
    inside the first epoch keeps weights that never saw the rest."""
    per_step = max(1, per_step)
    if steps * per_step >= n:
        return list(range(n))
    return sorted(epoch_order(n, seed, 0)[: steps * per_step])


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


# ---- the end of a round -------------------------------------------------------------


def _rated_key(example: Example) -> datetime:
    text = example.rated_at
    try:
        at = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def _finish(
    backend: Any,
    examples: Sequence[Example],
    held_enc: dict[int, Any],
    heldout: Sequence[Example],
    state: checkpoint.RoundState,
    job: TrainJob,
    hyper: Any,
    pad_id: int,
    data_hash: str,
    emit: Emit,
    started: float,
    guard: Guard,
    stopped_early: str = "",
) -> TrainResult:
    t_finish = time.monotonic()
    size = max(1, int(hyper.batch_size))
    metrics: dict[str, Any] = dict(state.metrics)
    # When the drift set is the held-out turns, the forward that measures drift also
    # gives the policy's held-out log-probs the gate scores (one forward, not two).
    h_pol: dict[int, np.ndarray] = {}
    # The guard's last measurement, when it was of the weights kept, covers its turns.
    drift = guard.drift
    shared = drift.which == "held-out" and drift.idx == list(state.held_kept)
    metrics.update(drift.measure(backend, hyper, pad_id, policy_rows=h_pol if shared else None,
                                 known=guard.current))
    if not shared:
        h_pol = rounddata.logprob_rows(backend, held_enc, state.held_kept, size, pad_id,
                                       adapter=True, should_stop=lambda: False) or {}
    h_base = dict(zip(state.held_kept, state.held_base, strict=True))
    metrics.update(
        rounddata.heldout_metrics(held_enc, state.held_kept, heldout, h_pol, h_base, "auroc_new")
    )
    metrics.update(capability.finish(backend, state.reference, pad_id))  # ref_nll_*
    metrics["kl_to_base"] = metrics["kl_total"]  # the name earlier rounds stored
    metrics["drift_set"] = drift.which
    metrics["stopped_early"] = stopped_early or None
    rank = int(getattr(backend, "rank", hyper.rank))
    alpha = float(getattr(backend, "alpha", hyper.alpha))
    lora = backend.lora_state()
    metrics["sanity_errors"] = evaluate.tensor_sanity_errors(
        lora, scale=adapters.scale_from_alpha(alpha, rank)
    )
    seen = trained_positions(len(state.kept), int(hyper.step_examples), job.seed,
                             state.global_step)
    trained_ids = [examples[state.kept[p]].id for p in seen]
    seen_set = set(seen)
    unseen_ids = [examples[i].id for p, i in enumerate(state.kept) if p not in seen_set]
    unseen = set(unseen_ids)
    metrics.update(
        steps=state.global_step,
        examples_trained=len(trained_ids),
        examples_unseen=len(unseen_ids),
        examples_skipped=len(examples) - len(state.kept),
        train_seconds=round(state.elapsed_s, 3),
        guard_seconds=round(drift.seconds, 3),
        finish_seconds=round(time.monotonic() - t_finish, 3),
    )
    for name in ("auroc_new", "kl_round", "kl_total", "kl_round_general", "kl_total_general"):
        emit({"type": "metric", "name": name, "value": metrics[name]})
    verdict = evaluate.gate(metrics, hyper)
    if stopped_early and state.global_step == 0:
        why = stopped_early.removeprefix("drift guard: ")
        spent = guard.budget_used_up()  # the totals' room, not this round's step, is gone
        verdict.reasons.append(f"{why}: {spent}" if spent else f"{why}: the drift guard undid "
                               "the first step, so nothing was learned within the drift caps")
        verdict = evaluate.Verdict(False, verdict.reasons, verdict.metrics, verdict.notes)
    metrics.update({k: v for k, v in verdict.metrics.items() if k.startswith("preference")})
    # The EMA folds in the round's *fresh* training ratings in rated_at order, the
    # ones the round retires: those the kept weights saw, and skipped (too long)
    # ones too (a rating is a reward whether or not it fits the window), but not
    # the unseen ones of a guard stop inside the first epoch (a later round trains
    # and counts them). Replayed ratings were counted in the round that first
    # trained them; held-out ones are counted in the round that trains them. A
    # rejected round trained nothing the user keeps: it leaves the baseline alone.
    fresh = sorted((e for e in examples if not e.replay and e.id not in unseen),
                   key=_rated_key)
    updated = objective.ema_update(job.baseline, [e.rating for e in fresh], float(hyper.ema_decay))
    baseline = updated if verdict.accept else float(job.baseline)
    out = adapters.write_adapter(
        job.out,
        lora,
        rank=rank,
        alpha=alpha,
        base_model=str(job.base_model),
        revision=job.revision,
        dropout=float(hyper.dropout),
        parent=str(job.parent_adapter) if job.parent_adapter else None,
        metrics=_jsonable(metrics),
        data_hash=data_hash,
        extra={
            "accepted": verdict.accept,
            "reasons": verdict.reasons,
            "notes": verdict.notes,
            "baseline": baseline,
            "job_id": job.id,
            "backend": backend.name,
            "trained_ids": trained_ids,
            "unseen_ids": unseen_ids,
        },
    )
    reasons = list(verdict.reasons)
    problems = adapters.validate_adapter(out, base_shapes=getattr(backend, "base_shapes", None))
    if problems:  # our own writer produced a bad folder: never publish it
        reasons.extend(f"adapter sanity check failed: {p}" for p in problems)
        baseline = float(job.baseline)
        _mark_rejected(out, reasons, baseline)
    metrics["gate_notes"] = verdict.notes
    return TrainResult(
        adapter=str(out),
        accepted=not reasons,
        reasons=reasons,
        metrics=_jsonable(metrics),
        baseline=baseline,
        trained_ids=trained_ids,
        unseen_ids=unseen_ids,
    )


def _mark_rejected(folder: Path, reasons: list[str], baseline: float) -> None:
    """Record a late rejection in ``rltray.json`` (temp file + replace: never half-written)."""
    import json
    import os

    meta = adapters.read_metadata(folder)
    meta.update(accepted=False, reasons=reasons, baseline=baseline)
    tmp = folder / f".{adapters.META_FILE}.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, folder / adapters.META_FILE)


def _jsonable(metrics: dict[str, Any]) -> dict[str, Any]:
    """Floats stay floats; NaN/inf become None so the done line is strict JSON."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        elif isinstance(v, np.generic):
            v = v.item()
        out[k] = v
    return out
