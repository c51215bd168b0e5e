"""Build trainer job folders for tests: a job.json, examples and held-out JSONL files.

Shared by the end-to-end, CLI and bad-input tests so each states only what it
changes. Hyperparameters are small (rank 4, short sequences, few steps) so a whole
round on the tiny llama takes well under a second of compute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

GOOD = [
    "Use a context manager: `with open(path) as fh:` closes the file even on errors.",
    "Add a regression test first, then fix the off-by-one in the loop bound.",
    "Run `git bisect` between the last good tag and main to find the bad commit.",
    "Return early when the list is empty so the caller gets [] instead of None.",
    "Pin the dependency and add a comment saying which bug the pin avoids.",
    "Use pathlib.Path.read_text(encoding='utf-8') instead of open().read().",
]
BAD = [
    "Just wrap everything in try/except: pass and the error goes away.",
    "Delete the failing test, it was probably wrong anyway.",
    "Retry forever in a loop until it works.",
    "Copy the whole function three times with small changes.",
    "Disable the type checker for the file.",
    "Use a global variable to share the state between requests.",
]

FAST_HYPER: dict[str, Any] = {
    "rank": 4,
    "alpha": 8.0,
    "lr": 0.01,
    "warmup_steps": 1,
    "epochs": 2,
    "batch_size": 2,
    "step_examples": 4,
    "max_seq_len": 96,
}


def example(i: int, rating: int, response: str, *, prompt: str | None = None) -> dict[str, Any]:
    return {
        "id": f"ex{i}",
        "messages": [{"role": "system", "content": "You are a coding assistant."}],
        "prompt": prompt or f"Question {i}: how should I fix this bug?",
        "response": response,
        "rating": rating,
        "rated_at": f"2025-01-01T00:{i:02d}:00Z",
    }


def default_examples() -> list[dict[str, Any]]:
    """Eight training examples, 4 good and 4 bad, interleaved."""
    out = []
    for k in range(4):
        out.append(example(2 * k, 1, GOOD[k]))
        out.append(example(2 * k + 1, -1, BAD[k]))
    return out


def default_heldout() -> list[dict[str, Any]]:
    return [
        example(50, 1, GOOD[4]),
        example(51, -1, BAD[4]),
        example(52, 1, GOOD[5]),
        example(53, -1, BAD[5]),
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def make_job(
    folder: Path,
    model: Path,
    *,
    examples: list[dict[str, Any]] | None = None,
    heldout: list[dict[str, Any]] | None = None,
    hyper: dict[str, Any] | None = None,
    **job: Any,
) -> Path:
    """Write ``folder/job.json`` (+ example files) and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "examples.jsonl", default_examples() if examples is None else examples)
    write_jsonl(folder / "heldout.jsonl", default_heldout() if heldout is None else heldout)
    spec: dict[str, Any] = {
        "v": 1,
        "id": "job-1",
        "base_model": str(model),
        "backend": "torch",
        "device": "cpu",
        "preset": "balanced",
        "hyper": {**FAST_HYPER, **(hyper or {})},
        "examples": "examples.jsonl",
        "heldout": "heldout.jsonl",
        "parent_adapter": None,
        "out": "adapter",
        "seed": 7,
        "baseline": 0.0,
    }
    spec.update(job)
    path = folder / "job.json"
    path.write_text(json.dumps(spec, indent=1), encoding="utf-8")
    return path


def trainer_env() -> dict[str, str]:
    """Environment for a trainer subprocess: one torch thread (the box is shared)."""
    env = dict(os.environ)
    env["RLTRAY_TRAINER_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def run_trainer(job: Path, timeout: float = 120) -> tuple[int, list[dict[str, Any]], str]:
    """Run ``python -m rltray.trainer job`` to the end: (exit code, parsed lines, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "rltray.trainer", str(job)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=trainer_env(),
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode, lines, proc.stderr


def setup_round(job_path: Path) -> tuple[Any, ...]:
    """(job, hyper, loaded torch backend, examples, heldout) for an in-process round."""
    from rltray.trainer import presets
    from rltray.trainer.__main__ import _load_heldout
    from rltray.trainer.backends.base import read_base_config
    from rltray.trainer.backends.torch_peft import TorchPeftBackend
    from rltray.trainer.job import load_examples, load_job

    job = load_job(job_path)
    info = presets.model_info(read_base_config(Path(job.base_model)))
    hyper = presets.resolve(job.preset, info, dict(job.hyper))
    backend = TorchPeftBackend(job, hyper)
    backend.load()
    heldout = _load_heldout(job.heldout)
    return job, hyper, backend, load_examples(job.examples), heldout


def run_round(
    job_path: Path,
    should_stop: Any = lambda: False,
    lines: list[dict] | None = None,
    objective: Any = None,
) -> tuple[Any, list[dict]]:
    """Run :func:`rltray.trainer.train.train` in process: (Outcome, emitted lines).

    ``lines`` (appended to as the round emits) lets ``should_stop`` look at progress;
    ``objective`` (an ``objective.Objective``) is passed on when given, else the default.
    """
    from rltray.trainer.train import train

    job, hyper, backend, examples, heldout = setup_round(job_path)
    lines = [] if lines is None else lines
    more = {} if objective is None else {"objective": objective}
    outcome = train(backend, examples, heldout, job, hyper, lines.append, should_stop, **more)
    return outcome, lines
