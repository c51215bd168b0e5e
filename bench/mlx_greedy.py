"""The gate's greedy answers on the MLX backend: one prompt at a time against one batch.

Run (a few minutes on 2 shared CPU cores; needs the SmolLM2 folder the learning bench
builds, ``bench/smollm2_world.base_folder``):

    nice -n 10 .venv/bin/python bench/mlx_greedy.py [--prompts 16] [--tokens 128] [--reps 2]

The capability check answers 8 of the round's prompts and 8 everyday ones greedily,
with the base at the round's start and with the adapter at its end. Here the 16
everyday prompts (``capability.GENERAL_PROMPTS``) stand in for both halves. *One at a
time* is the loop the backend used before (mlx-lm's prompt cache, a token per step);
*batch* is ``MlxBackend.greedy`` (mlx-lm's ``BatchGenerator``). The two are timed
alternately, and the last line says whether they wrote the same tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def one_at_a_time(backend, prompts: list[list[int]], tokens: int,
                  stop: set[int]) -> list[list[int]]:
    """The backend's loop before the batch: each prompt prefilled, then a token a step."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    out = []
    for prompt in prompts:
        cache = make_prompt_cache(backend.model)
        logits = backend.model(mx.array([list(prompt)], dtype=mx.int32), cache=cache)
        answer: list[int] = []
        for _ in range(tokens):
            token = int(mx.argmax(logits[0, -1]).item())
            answer.append(token)
            if token in stop:
                break
            logits = backend.model(mx.array([[token]], dtype=mx.int32), cache=cache)
        out.append(answer)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()

    import smollm2_world
    from rltray.trainer import capability, presets
    from rltray.trainer.backends.mlx import MlxBackend

    folder = smollm2_world.base_folder(ROOT / ".bench-out")
    hyper = presets.resolve("balanced", presets.model_info(
        json.loads((folder / "config.json").read_text())))
    backend = MlxBackend(SimpleNamespace(base_model=str(folder), revision=None,
                                         parent_adapter=None, seed=0, trust_remote_code=False),
                         hyper)
    backend.load()
    prompts = capability.general_prompts(backend.tokenizer, args.prompts)
    stop = capability.stop_ids(backend.tokenizer)
    print(f"SmolLM2-135M-Instruct on MLX ({len(prompts)} prompts x up to {args.tokens} tokens)")
    times: dict[str, list[float]] = {"one at a time": [], "batch": []}
    answers: dict[str, list[list[int]]] = {}
    for _ in range(args.reps):
        for name in times:
            start = time.perf_counter()
            if name == "batch":
                answers[name] = backend.greedy(prompts, args.tokens, stop)
            else:
                answers[name] = one_at_a_time(backend, prompts, args.tokens, stop)
            times[name].append(time.perf_counter() - start)
    written = sum(len(a) for a in answers["batch"])
    for name, seconds in times.items():
        best = min(seconds)
        print(f"{name:14s} best {best:7.1f} s  ({written / best:6.1f} tokens/s; runs "
              + ", ".join(f"{s:.1f}" for s in seconds) + ")")
    same = sum(a == b for a, b in zip(answers["batch"], answers["one at a time"], strict=True))
    print(json.dumps({"prompts": len(prompts), "tokens_written": written,
                      "same_answers": same, "speedup": min(times["one at a time"])
                      / min(times["batch"])}))


if __name__ == "__main__":
    main()
