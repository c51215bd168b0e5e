"""What the gate's capability check costs, and what it says, in one real SmolLM2 round.

Run (minutes on 2 shared CPU cores; needs the cached SmolLM2 GGUF, see
``packaging/fetch_test_model.py``):

    nice -n 10 .venv/bin/python bench/capability_cost.py            # balanced, 8 prompts x 32
    nice -n 10 .venv/bin/python bench/capability_cost.py --lr-factor 20 --prompts 4

One short round through the shipped loop (``trainer.train.train``, torch, CPU):
12 coding tasks, 4 rated in training (+1 with a docstring, -1 without) and 8 held
out, the same world as ``tests/trainer/test_gate_smollm2.py``. Printed: the
capability check's seconds (greedy answers + scoring at round start, scoring at
the end) next to the round's own phases, the reference NLL under base, parent
and new adapter, and the gate's verdict. The last line is a JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

TASKS = ("reverses a string", "checks whether a number is prime", "returns the factorial of n",
         "counts the vowels in a string", "flattens a list of lists", "returns the median of "
         "a list", "checks whether a year is a leap year", "removes duplicates from a list",
         "merges two sorted lists", "returns the sum of the digits of an integer",
         "swaps the keys and values of a dictionary", "rotates a list by k positions")


def rows(tasks: tuple[str, ...], start: int) -> list[dict[str, Any]]:
    out = []
    for k, task in enumerate(tasks):
        doc = f'    """Return the result: this function {task}."""\n' if k % 2 == 0 else ""
        out.append({
            "id": f"ex{start + k}", "messages": [], "rating": 1 if k % 2 == 0 else -1,
            "prompt": f"Write a Python function that {task}.",
            "response": ("Here is the function:\n\n```python\ndef solve(x):\n"
                         f"{doc}    return x\n```\n"),
            "rated_at": f"2025-01-01T00:{start + k:02d}:00Z",
        })  # fmt: skip
    return out


def write_job(folder: Path, model: Path, hyper: dict[str, Any]) -> Path:
    shutil.rmtree(folder, ignore_errors=True)  # a fresh round every run
    folder.mkdir(parents=True)
    for name, part in (("examples.jsonl", rows(TASKS[:4], 0)), ("heldout.jsonl",
                                                                 rows(TASKS[4:], 50))):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in part))
    spec = {"v": 1, "id": "capability-cost", "base_model": str(model), "backend": "torch",
            "device": "cpu", "preset": "balanced", "hyper": hyper, "examples": "examples.jsonl",
            "heldout": "heldout.jsonl", "parent_adapter": None, "out": "adapter", "seed": 7,
            "baseline": 0.0}  # fmt: skip
    (folder / "job.json").write_text(json.dumps(spec, indent=1))
    return folder / "job.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".bench-out")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=None,
                    help="greedy tokens per answer (default: the preset's ref_tokens)")
    ap.add_argument("--lr-factor", type=float, default=1.0)
    a = ap.parse_args(argv)
    import smollm2_world as w
    from rltray.trainer import presets, train
    from rltray.trainer.__main__ import _load_heldout
    from rltray.trainer.backends.torch_peft import TorchPeftBackend
    from rltray.trainer.job import load_examples, load_job

    model = w.base_folder(a.out)
    info = presets.model_info(json.loads((model / "config.json").read_text()))
    hyper = {"max_seq_len": 160, "batch_size": 4, "step_examples": 4,
             "ref_prompts": a.prompts, "lr": presets.resolve("balanced", info).lr * a.lr_factor}
    if a.tokens is not None:
        hyper["ref_tokens"] = a.tokens
    job = load_job(write_job(a.out / "capability-cost", model, hyper))
    resolved = presets.resolve(job.preset, info, dict(job.hyper))
    backend = TorchPeftBackend(job, resolved)
    backend.load()
    outcome = train.train(backend, load_examples(job.examples), _load_heldout(job.heldout),
                          job, resolved, lambda _line: None)
    m = outcome.result.metrics
    keys = ("ref_prompts", "ref_tokens", "ref_seconds", "round_start_s", "train_seconds",
            "finish_seconds", "ref_nll_base", "ref_nll_new", "ref_nll_increase", "kl_round",
            "preference")
    for k in keys:
        print(f"{k:>18}: {m.get(k)}")
    print(f"{'accepted':>18}: {outcome.result.accepted} {outcome.result.reasons}")
    for note in m.get("gate_notes") or []:
        print(f"{'note':>18}: {note}")
    print(json.dumps({**{k: m.get(k) for k in keys}, "accepted": outcome.result.accepted,
                      "reasons": outcome.result.reasons, "device": backend.device_name}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
