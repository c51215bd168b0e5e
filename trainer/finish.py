"""The end of a training round: measure the kept weights, judge them, write the folder.

Split out of :mod:`.train`, which keeps the round's start and its loop. What is
measured here (drift, held-out scores, capability) and the gate's verdict go into
the adapter folder's ``rltray.json`` and the round's :class:`~.job.TrainResult`;
:func:`written_result` reads them back for a round stopped after writing its folder.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from rltray.trainer import adapters, capability, checkpoint, evaluate, rounddata
from rltray.trainer.backends.base import Backend
from rltray.trainer.job import Example, TrainJob, TrainResult
from rltray.trainer.objective import ema_update
from rltray.trainer.presets import Hyper
from rltray.trainer.round import Round


def _rated_key(example: Example) -> datetime:
    text = example.rated_at
    try:
        at = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


class FinishPaused(Exception):
    """Asked to stop between the finish's measurements, before the folder is written.

    The round's checkpoint (written when the steps ended) holds everything the finish
    needs, so the caller reports the round paused; running the job again measures anew
    and ends as a round that never paused.
    """


def finish(rnd: Round, state: checkpoint.RoundState, stopped_early: str = "") -> TrainResult:
    """The end of a round: measure the kept weights, judge them, write the adapter folder.

    ``stopped_early`` is the drift guard's sentence when it ended the round ("" when
    every step ran). The metrics' key order is the done line's: keep it. Raises
    :class:`FinishPaused` when ``rnd.should_stop()`` between two measurements: on a
    large model they take many minutes, and a user who comes back should not wait
    for them (nor have the runner kill the trainer).
    """
    t_finish = time.monotonic()
    metrics = _measure(rnd, state)
    metrics["stopped_early"] = stopped_early or None
    lora = _Lora.of(rnd.backend, rnd.hyper)
    metrics["sanity_errors"] = evaluate.tensor_sanity_errors(lora.tensors, scale=lora.scale)
    ids = _retired(rnd, state)
    metrics.update(
        steps=state.global_step,
        examples_trained=len(ids.trained),
        examples_unseen=len(ids.unseen),
        examples_skipped=len(rnd.examples) - len(state.kept),
        train_seconds=round(state.elapsed_s, 3),
        guard_seconds=round(rnd.drift.seconds, 3),
        guard_estimates=rnd.guard.estimated,  # guard checks a position sample settled
        finish_seconds=round(time.monotonic() - t_finish, 3),
    )
    for name in ("auroc_new", "kl_round", "kl_total", "kl_round_general", "kl_total_general"):
        rnd.emit({"type": "metric", "name": name, "value": metrics[name]})
    verdict = _verdict(rnd, state, metrics, stopped_early)
    metrics.update({k: v for k, v in verdict.metrics.items() if k.startswith("preference")})
    kept = set(state.kept)
    skipped = {e.id for i, e in enumerate(rnd.examples) if i not in kept}
    baseline = _new_baseline(rnd, verdict.accept, set(ids.unseen) | skipped)
    out = _write_adapter(rnd, lora, metrics, verdict, baseline, ids)
    return _result(rnd, out, metrics, verdict, baseline, ids)


def _measure(rnd: Round, state: checkpoint.RoundState) -> dict[str, Any]:
    """The round-start metrics plus the kept weights' drift (to the parent and the base),
    held-out metrics (``auroc_new``) and capability NLLs (``ref_nll_*``)."""
    check = _stop_check(rnd)
    check()
    metrics: dict[str, Any] = dict(state.metrics)
    # When the drift set is the held-out turns, the forward that measures drift also
    # gives the policy's held-out log-probs the gate scores (one forward, not two).
    h_pol: dict[int, np.ndarray] = {}
    # The guard's last measurement, when it was of the weights kept, covers its turns.
    drift = rnd.drift
    shared = drift.which == "held-out" and drift.idx == list(state.held_kept)
    metrics.update(drift.measure(rnd.backend, rnd.hyper, rnd.pad_id,
                                 policy_rows=h_pol if shared else None, known=rnd.guard.current))
    check()
    if not shared:
        h_pol = rounddata.logprob_rows(rnd.backend, rnd.held_enc, state.held_kept, rnd.size,
                                       rnd.pad_id, adapter=True, should_stop=lambda: False) or {}
    h_base = dict(zip(state.held_kept, state.held_base, strict=True))
    metrics.update(rounddata.heldout_metrics(
        rnd.held_enc, state.held_kept, rnd.heldout, h_pol, h_base, "auroc_new"))
    metrics.update(capability.finish(rnd.backend, state.reference, rnd.pad_id, rnd.hyper,
                                     check=check))
    check()
    metrics["kl_to_base"] = metrics["kl_total"]  # the name earlier rounds stored
    metrics["drift_set"] = drift.which
    return metrics


def _stop_check(rnd: Round) -> Callable[[], None]:
    """A function that raises :class:`FinishPaused` once the round is asked to stop."""

    def check() -> None:
        if rnd.should_stop():
            raise FinishPaused

    return check


class _Lora(NamedTuple):
    """The trained LoRA as the finish checks and writes it: tensors, rank and alpha."""

    tensors: dict[str, np.ndarray]
    rank: int
    alpha: float

    @classmethod
    def of(cls, backend: Backend, hyper: Hyper) -> _Lora:
        """The backend's LoRA; its own rank/alpha when it has them, else the Hyper's."""
        rank = int(getattr(backend, "rank", hyper.rank))
        alpha = float(getattr(backend, "alpha", hyper.alpha))
        return cls(backend.lora_state(), rank, alpha)

    @property
    def scale(self) -> float:
        """The scale the model applies, ``alpha / rank``."""
        return adapters.scale_from_alpha(self.alpha, self.rank)


class _Retired(NamedTuple):
    """Ids of the kept examples the kept weights trained on, and of those they did not
    (a drift guard stop inside the first epoch)."""

    trained: list[str]
    unseen: list[str]


def _retired(rnd: Round, state: checkpoint.RoundState) -> _Retired:
    """Which kept examples the weights after ``state.global_step`` steps include."""
    seen = rounddata.trained_positions(len(state.kept), int(rnd.hyper.step_examples), rnd.job.seed,
                             state.global_step)
    seen_set = set(seen)
    return _Retired(
        trained=[rnd.examples[state.kept[p]].id for p in seen],
        unseen=[rnd.examples[i].id for p, i in enumerate(state.kept) if p not in seen_set],
    )


def _verdict(rnd: Round, state: checkpoint.RoundState, metrics: dict[str, Any],
             stopped_early: str) -> evaluate.Verdict:
    """The gate's verdict; a round whose guard undid its first step is rejected too."""
    verdict = evaluate.gate(metrics, rnd.hyper)
    if stopped_early and state.global_step == 0:
        why = stopped_early.removeprefix("drift guard: ")
        spent = rnd.guard.budget_used_up()  # the totals' room, not this round's step, is gone
        verdict.reasons.append(f"{why}: {spent}" if spent else f"{why}: the drift guard undid "
                               "the first step, so nothing was learned within the drift caps")
        verdict = evaluate.Verdict(False, verdict.reasons, verdict.metrics, verdict.notes)
    return verdict


def _new_baseline(rnd: Round, accept: bool, not_counted: set[str]) -> float:
    """The EMA reward baseline the round leaves behind.

    The EMA folds in the round's *fresh* training ratings in rated_at order, the
    ones the round retires: those the kept weights saw, but neither the unseen
    ones of a guard stop inside the first epoch nor skipped (too long) ones
    (``not_counted``: the tray leaves both untrained, so a later round that trains
    them counts them then, and only then). Replayed ratings were counted in the round that first
    trained them; held-out ones are counted in the round that trains them. A
    rejected round trained nothing the user keeps: it leaves the baseline alone.
    """
    fresh = sorted((e for e in rnd.examples if not e.replay and e.id not in not_counted),
                   key=_rated_key)
    decay = float(rnd.hyper.ema_decay)
    updated = ema_update(rnd.job.baseline, [e.value for e in fresh], decay)
    return updated if accept else float(rnd.job.baseline)


def _write_adapter(rnd: Round, lora: _Lora, metrics: dict[str, Any], verdict: evaluate.Verdict,
                   baseline: float, ids: _Retired) -> Path:
    """Write the adapter folder with the round's metrics and verdict in ``rltray.json``."""
    job = rnd.job
    return adapters.write_adapter(
        job.out,
        lora.tensors,
        rank=lora.rank,
        alpha=lora.alpha,
        base_model=str(job.base_model),
        revision=job.revision,
        dropout=float(rnd.hyper.dropout),
        parent=str(job.parent_adapter) if job.parent_adapter else None,
        metrics=_jsonable(metrics),
        data_hash=rnd.data_hash,
        extra={
            "accepted": verdict.accept,
            "reasons": verdict.reasons,
            "notes": verdict.notes,
            "baseline": baseline,
            "job_id": job.id,
            "backend": rnd.backend.name,
            "trained_ids": ids.trained,
            "unseen_ids": ids.unseen,
        },
    )


def _result(rnd: Round, out: Path, metrics: dict[str, Any], verdict: evaluate.Verdict,
            baseline: float, ids: _Retired) -> TrainResult:
    """The round's result, after checking the folder just written: a folder our own
    writer got wrong is never published (marked rejected, the baseline left alone)."""
    reasons = list(verdict.reasons)
    problems = adapters.validate_adapter(
        out, base_shapes=getattr(rnd.backend, "base_shapes", None)
    )
    if problems:
        reasons.extend(f"adapter sanity check failed: {p}" for p in problems)
        baseline = float(rnd.job.baseline)
        _mark_rejected(out, reasons, baseline)
    metrics["gate_notes"] = verdict.notes
    return TrainResult(
        adapter=str(out),
        accepted=not reasons,
        reasons=reasons,
        metrics=_jsonable(metrics),
        baseline=baseline,
        trained_ids=ids.trained,
        unseen_ids=ids.unseen,
    )


def written_result(job: TrainJob) -> TrainResult | None:
    """The result of this very job from the adapter folder it already wrote, else None.

    A round stopped after writing its folder (the runner's pause came during the
    checks after the last step; a second stop request ends the process at once) is
    resumed with the folder in place: training again would be refused by the
    writer (versions are never overwritten) and lose a gated adapter. The folder
    is checked again, as :func:`_result` does, since a stop may have come between
    the write and that check. A folder of another job is None: never taken over.
    """
    out = Path(job.out)
    try:
        meta = adapters.read_metadata(out)
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("job_id") != job.id:
        return None
    reasons = [str(r) for r in meta.get("reasons") or []]
    baseline = float(meta.get("baseline") or 0.0)
    accepted = bool(meta.get("accepted")) and not reasons
    problems = adapters.validate_adapter(out)
    if problems:
        reasons.extend(f"adapter sanity check failed: {p}" for p in problems)
        accepted, baseline = False, float(job.baseline)
        _mark_rejected(out, reasons, baseline)
    checkpoint.remove(job.checkpoint_dir)
    metrics = dict(meta.get("metrics") or {})
    metrics["gate_notes"] = list(meta.get("notes") or [])  # as _result adds them
    return TrainResult(
        adapter=str(out),
        accepted=accepted,
        reasons=reasons,
        metrics=metrics,
        baseline=baseline,
        trained_ids=[str(i) for i in meta.get("trained_ids") or []],
        unseen_ids=[str(i) for i in meta.get("unseen_ids") or []],
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
