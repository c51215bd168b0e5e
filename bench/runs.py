"""One benchmark run: train with one method on one rated set, then score the adapter.

Why the trainer is driven through a job file: that is exactly how the product
calls it (``python -m rltray.trainer JOB.json`` in a child process), so the
benchmark measures the shipped code path, including data encoding, class
weights, masks and the publish gate, not a re-implementation of it.

Every method's adapter is scored by the same :func:`evaluate` on the same
held-out prompts with the same sampling seed, so differences between rows are
differences between adapters, not between evaluations.

A *preset* spec (``Spec.preset`` set) runs the trainer with that preset's own
hyper-parameters on the backend it names (``torch`` or ``mlx``): nothing of the
baselines' budget is imposed, so the row shows what a user of that preset gets,
drift guard included. The adapter is always scored by the torch evaluation here
(MLX writes the same PEFT layout), so torch and MLX rows are comparable.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import baselines
import synthetic
import tinylm

#: Methods our trainer runs, each the name of the objective its round hands to
#: ``train(..., objective=...)`` (``rltray.trainer.objective.OBJECTIVES``): MIS-PO and
#: plain REINFORCE with the same baseline (no token mask, no trajectory gate, no KL).
TRAINER_METHODS = ("mispo", "reinforce")


@dataclass(frozen=True)
class Spec:
    """What one run trains: method, rated source, number of ratings, rate, extra overrides."""

    method: str  # mispo | reinforce | kto | sft
    source: str  # on | off
    n: int
    lr: float
    epochs: int
    variant: str = "default"
    overrides: dict[str, Any] = field(default_factory=dict)
    #: Preset mode: the trainer uses this preset's own numbers (``lr`` and ``epochs``
    #: above are then only the resolved values, for the table) and ``overrides`` are
    #: the only job overrides. Empty = the baselines' budget (every other mode).
    preset: str = ""
    backend: str = "torch"
    #: Short digest of the resolved preset hyper, so a retuned preset is not served a
    #: stale cached row.
    digest: str = ""

    @property
    def key(self) -> str:
        head = f"{self.method}/{self.source}/n{self.n}/lr{self.lr:g}/e{self.epochs}"
        if self.preset:  # older keys stay as they were: their cached rows keep working
            return f"{head}/preset-{self.preset}/{self.backend}/h{self.digest}"
        return f"{head}/{self.variant}"


@dataclass
class World:
    """Everything fixed across runs: base model, rated pools, held-out sets."""

    base_dir: Path
    base: Any
    tokenizer: Any
    rated: dict[str, list[tuple[str, str, int]]]  # source -> pool (prefixes are used)
    heldout_rated: dict[str, list[tuple[str, str, int]]]
    eval_prompts: list[str]
    neutral: list[tuple[list[int], list[int]]]
    max_new_tokens: int
    seed: int
    base_nll: float = float("nan")


def _example(i: int, prompt: str, response: str, rating: int) -> dict[str, Any]:
    at = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=i)
    return {
        "id": f"ex{i:05d}",
        "messages": [],
        "prompt": prompt,
        "response": response,
        "rating": rating,
        "rated_at": at.isoformat().replace("+00:00", "Z"),
        "behaviour_logprobs": None,
    }


def _write_jsonl(path: Path, rows: list[tuple[str, str, int]], start: int = 0) -> None:
    with path.open("w", encoding="utf-8") as f:
        for i, (p, r, y) in enumerate(rows):
            f.write(json.dumps(_example(start + i, p, r, y)) + "\n")


def preset_hyper(base_dir: Path, preset: str, overrides: dict[str, Any] | None = None) -> Any:
    """The trainer's resolved ``Hyper`` for ``preset`` on this base (what the job will get).

    Resolved by the trainer's own :func:`rltray.trainer.presets.resolve`, so the table's
    rate and epochs are the ones the child process trains with, not a copy of the rule.
    """
    from rltray.trainer import presets

    config = json.loads((base_dir / "config.json").read_text(encoding="utf-8"))
    return presets.resolve(preset, presets.model_info(config), dict(overrides or {}))


def hyper_digest(hyper: Any) -> str:
    """Eight hex digits of a resolved ``Hyper`` (part of a preset run's cache key)."""
    import hashlib

    text = json.dumps(hyper.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def trainer_hyper(spec: Spec, budget: baselines.Budget) -> dict[str, Any]:
    """Hyper overrides that give the trainer exactly the baselines' budget.

    A preset spec gets only its own ``overrides`` (e.g. ``gate_profile``): the point
    of that mode is to measure the preset's numbers, not the budget's.
    """
    if spec.preset:
        return dict(spec.overrides)
    hyper: dict[str, Any] = {
        "lr": spec.lr,
        "epochs": spec.epochs,
        "batch_size": budget.step_examples,
        "step_examples": budget.step_examples,
        "warmup_steps": budget.warmup_steps,
        "rank": budget.rank,
        "alpha": budget.alpha,
        "dropout": 0.0,
        "target_modules": "all-linear",
        "grad_clip": budget.grad_clip,
        "weight_decay": 0.0,
    }
    hyper.update(spec.overrides)
    return hyper


def run_trainer(
    world: World, spec: Spec, budget: baselines.Budget, folder: Path, timeout: float
) -> dict[str, Any]:
    """Write a job folder and run ``python -m rltray.trainer``; returns the ``done`` line.

    The bench's own held-out ratings are passed as the job's ``heldout`` file so the
    trainer trains on all N ratings (as the baselines do) and its gate reports AUROC
    on the same held-out set the benchmark scores.
    """
    if folder.exists():  # left by an interrupted run: the trainer never overwrites an adapter
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    _write_jsonl(folder / "examples.jsonl", world.rated[spec.source][: spec.n])
    _write_jsonl(folder / "heldout.jsonl", world.heldout_rated[spec.source], start=50_000)
    job = {
        "v": 1,
        "id": spec.key.replace("/", "-"),
        "base_model": str(world.base_dir.resolve()),
        "revision": None,
        "backend": spec.backend,
        "device": "cpu",
        "preset": spec.preset or "balanced",
        "hyper": trainer_hyper(spec, budget),
        "examples": "examples.jsonl",
        "heldout": "heldout.jsonl",
        "parent_adapter": None,
        "out": "adapter",
        "seed": budget.seed,
        "baseline": 0.0,
        "trust_remote_code": False,
    }
    (folder / "job.json").write_text(json.dumps(job, indent=1), encoding="utf-8")
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    env.setdefault("RLTRAY_TRAINER_BF16", "0")  # the tables are fp32 unless asked
    proc = subprocess.run(
        trainer_command(spec.method, folder / "job.json"),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    (folder / "stdout.jsonl").write_text(proc.stdout, encoding="utf-8")
    (folder / "stderr.txt").write_text(proc.stderr, encoding="utf-8")
    lines = []
    for raw in proc.stdout.splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    done = next((x for x in reversed(lines) if x.get("type") == "done"), None)
    if proc.returncode != 0 or done is None:
        err = next((x for x in reversed(lines) if x.get("type") == "error"), None)
        msg = err["message"] if err else proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"trainer exited {proc.returncode}: {msg}")
    progress = [x for x in lines if x.get("type") == "progress"]
    done["steps"] = len(progress)
    done["masked_tokens"] = _mean(x.get("masked_tokens") for x in progress)
    done["gated_examples"] = _mean(x.get("gated_examples") for x in progress)
    done.update(progress_facts(progress, done.get("metrics") or {}))
    return done


def trainer_command(method: str, job: Path) -> list[str]:
    """The child process that trains ``job`` with the trainer method ``method``.

    MIS-PO runs the product's own ``python -m rltray.trainer``. Another objective runs
    this file's ``objective-child``, which hands it to ``train(..., objective=...)``:
    the product's command line has no objective switch (the job contract is the
    tray's, and the tray trains MIS-PO only), and writing the numbers that switch
    MIS-PO's masks and KL off into the job's ``hyper`` dressed REINFORCE up as a preset.
    """
    if method == "mispo":
        return [sys.executable, "-m", "rltray.trainer", str(job)]
    return [sys.executable, str(Path(__file__).resolve()), "objective-child", method, str(job)]


def objective_child(name: str, job_path: str) -> int:
    """Train ``job_path``'s round with the objective ``name``; JSON lines on stdout.

    The steps of ``python -m rltray.trainer`` (job, examples, the preset's Hyper, the
    backend, ``train``) and its line format, without the tray's pause machinery (a
    bench child runs to the end or is killed by its timeout). Returns the exit code.
    """
    import traceback

    from rltray.trainer.__main__ import _emitter, _load_heldout, _protocol_stream, load_backend
    from rltray.trainer.job import error_line, load_examples, load_job
    from rltray.trainer.objective import OBJECTIVES
    from rltray.trainer.priority import lower_priority
    from rltray.trainer.train import train

    emit = _emitter(_protocol_stream())
    emit({"type": "log", "message": f"priority: {lower_priority()}"})  # as the trainer runs
    try:
        job = load_job(job_path)
        backend, hyper = load_backend(job, emit)
        outcome = train(backend, load_examples(job.examples), _load_heldout(job.heldout), job,
                        hyper, emit, objective=OBJECTIVES[name])
        assert outcome.result is not None  # nothing asks this round to stop
        emit(outcome.result.line())
        return 0
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        emit(error_line(f"{type(exc).__name__}: {exc}", "internal"))
        return 1


def progress_facts(progress: list[dict[str, Any]], metrics: dict[str, Any]) -> dict[str, Any]:
    """What the progress lines say about how hard a round pushed and whether it was stopped.

    ``steps_run`` is the trainer's own count (a step the drift guard undid does not
    count), ``steps_planned`` the ``total`` of the progress lines (epochs x steps per
    epoch); ``max_k3`` is the largest per-step mean of the objective's k3 KL term
    (the progress line's ``kl``); ``max_guard_kl`` the largest KL to the parent the
    guard measured after a step, the undone step included.
    """

    def top(name: str) -> float | None:
        vals = [float(x[name]) for x in progress if isinstance(x.get(name), (int, float))]
        return max(vals) if vals else None

    return {
        "steps_run": metrics.get("steps", len(progress)),
        "steps_planned": progress[-1].get("total") if progress else None,
        "stopped_early": metrics.get("stopped_early"),
        "max_grad_norm": top("grad_norm"),
        "max_k3": top("kl"),
        "max_masked": top("masked_tokens"),
        "max_guard_kl": top("kl_round"),
        "gate_kl_round": metrics.get("kl_round"),
        "gate_kl_round_general": metrics.get("kl_round_general"),
    }


def _mean(xs) -> float:
    vals = [float(x) for x in xs if isinstance(x, (int, float))]
    return sum(vals) / len(vals) if vals else float("nan")


def train(world: World, spec: Spec, folder: Path, timeout: float) -> tuple[Path, dict[str, Any]]:
    """Train one spec; returns (adapter folder, extra facts for the row)."""
    budget = baselines.Budget(lr=spec.lr, epochs=spec.epochs, seed=world.seed)
    rated = world.rated[spec.source][: spec.n]
    if spec.method in TRAINER_METHODS:
        done = run_trainer(world, spec, budget, folder, timeout)
        facts = {
            "accepted": done.get("accepted"),
            "reasons": done.get("reasons"),
            "steps": done.get("steps"),
            "masked_tokens": done.get("masked_tokens"),
            "gated_examples": done.get("gated_examples"),
            "trainer_auroc": (done.get("metrics") or {}).get("auroc_new"),
            **{k: done.get(k) for k in (
                "steps_run", "steps_planned", "stopped_early", "max_grad_norm", "max_k3",
                "max_masked", "max_guard_kl", "gate_kl_round", "gate_kl_round_general",
            )},
        }
        return Path(done["adapter"]), facts
    out = folder / "adapter"
    if spec.method == "sft":
        baselines.train_sft(world.base, world.tokenizer, rated, budget, out)
    elif spec.method == "kto":
        baselines.train_kto(world.base, world.tokenizer, rated, budget, out, **spec.overrides)
    else:
        raise ValueError(f"unknown method {spec.method!r}")
    return out, {}


def evaluate(world: World, policy) -> dict[str, Any]:
    """Preferred-style rate, style mix, KL to base, held-out AUROC and NLL for one policy.

    ``policy`` is the base itself (the "before" row) or a PEFT model over a copy of it.
    KL is the exact per-token KL(policy || base) over the vocabulary at the positions
    of the policy's own samples on held-out prompts (its expectation is the
    sequence KL divided by length).
    """
    pad = world.tokenizer.pad_token_id
    samples = tinylm.sample(
        policy,
        world.tokenizer,
        world.eval_prompts,
        max_new_tokens=world.max_new_tokens,
        seed=world.seed + 7,
    )
    styles = [synthetic.classify(t) for *_, t in samples]
    mix = {s: styles.count(s) / len(styles) for s in (*synthetic.STYLES, "other")}
    kl = tinylm.kl_per_token(policy, world.base, [(p, r) for p, r, _ in samples], pad)
    out: dict[str, Any] = {"mix": mix, "kl": kl}
    for source, rows in world.heldout_rated.items():
        pairs = [tinylm.encode_pair(world.tokenizer, p, r) for p, r, _ in rows]
        lp_n = tinylm.token_logprobs(policy, pairs, pad)
        lp_f = tinylm.token_logprobs(world.base, pairs, pad)
        scores = [float((a - b).mean()) for a, b in zip(lp_n, lp_f, strict=True)]
        out[f"auroc_{source}"] = tinylm.auroc(scores, [y for *_, y in rows])
    nll = tinylm.token_logprobs(policy, world.neutral, pad)
    out["nll"] = -float(sum(x.sum() for x in nll)) / sum(len(x) for x in nll)
    return out


def run(world: World, spec: Spec, out_root: Path, timeout: float, prefer: str) -> dict[str, Any]:
    """Train + evaluate one spec; returns one table row (errors become a row too)."""
    from peft import PeftModel

    t0 = time.time()
    folder = out_root / "runs" / spec.key.replace("/", "_")
    row: dict[str, Any] = {
        "method": spec.method,
        "source": spec.source,
        "n": spec.n,
        "lr": spec.lr,
        "epochs": spec.epochs,
        "variant": spec.variant,
    }
    if spec.preset:
        row.update(preset=spec.preset, backend=spec.backend)
    try:
        adapter, facts = train(world, spec, folder, timeout)
        train_s = time.time() - t0
        policy = PeftModel.from_pretrained(copy.deepcopy(world.base), str(adapter))
        policy.eval()
        m = evaluate(world, policy)
    except Exception as exc:  # a failed run is a result to report, not a crash
        row.update(error=f"{type(exc).__name__}: {exc}"[:300], seconds=round(time.time() - t0, 1))
        return row
    row.update(
        pref=m["mix"][prefer],
        mix=m["mix"],
        kl=m["kl"],
        auroc=m[f"auroc_{spec.source}"],
        auroc_other_source=m[f"auroc_{'off' if spec.source == 'on' else 'on'}"],
        ppl_change=math.exp(m["nll"] - world.base_nll) - 1.0,
        train_s=round(train_s, 1),
        seconds=round(time.time() - t0, 1),
        **facts,
    )
    return row


if __name__ == "__main__":
    if sys.argv[1:2] != ["objective-child"] or len(sys.argv) != 4:
        sys.exit("usage: runs.py objective-child OBJECTIVE JOB.json (run by run_trainer)")
    sys.exit(objective_child(sys.argv[2], sys.argv[3]))
