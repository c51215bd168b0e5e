"""Would sampled answers let the gate see what the learning bench's 160 samples see? (issue 20)

Run:  RLTRAY_TRAINER_THREADS=1 nice -n 10 .venv/bin/python bench/degenerate_sampled.py \
          RUN [--samples 8]

For one ``learning_smollm2.py`` run folder: the round's reference prompts (the gate's 8,
``capability.choose_prompts``) answered greedily (128 tokens, as the gate does) and
``--samples`` times each at temperature 0.7 (as the bench's evaluation samples), by the
base and by the run's adapter. Counted two ways: the gate's broken answer
(``capability.degenerate``: empty, looping, or without the fenced code the base's greedy
answer had) and the bench's (``smollm2_world.degenerate``: empty, looping, or no ``def``
in the code although a function was asked for). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def sampled(backend: Any, prompts: list[list[int]], pad: int, stop: set[int], n: int,
            adapter: bool, seed: int) -> list[list[int]]:
    """``n`` temperature-0.7 answers per prompt, in one left-padded batch."""
    import torch
    from rltray.trainer.backends.torch_peft import _cut_at_stop  # as the gate's answers end
    from transformers import GenerationConfig

    rows = [p for p in prompts for _ in range(n)]
    width = max(len(p) for p in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(rows):
        ids[r, width - len(p):] = torch.tensor(p)
        mask[r, width - len(p):] = 1
    config = GenerationConfig(max_new_tokens=128, do_sample=True, temperature=0.7, top_p=1.0,
                              top_k=0, eos_token_id=sorted(stop), pad_token_id=pad)
    torch.manual_seed(seed)
    lora = contextlib.nullcontext() if adapter else backend.model.disable_adapter()
    with torch.no_grad(), lora:
        out = backend.model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    return [_cut_at_stop([int(t) for t in row[width:]], stop) for row in out]


def main(argv: list[str] | None = None) -> int:
    import smollm2_world as world
    from rltray.trainer import capability

    from bench.saved_runs import loaded_run

    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--samples", type=int, default=8, help="sampled answers per prompt")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    out: dict[str, Any] = {"run": a.run.name}
    with loaded_run(a.run) as (_, backend, pad, prompts):
        stop = capability.stop_ids(backend.tokenizer)

        def text(ids: list[int]) -> str:
            return backend.tokenizer.decode(ids, skip_special_tokens=True)

        firsts = [text(x) for x in backend.greedy(prompts, 128, stop, adapter=False)]
        for adapter in (False, True):
            who = "adapter" if adapter else "base"
            greedy = [text(x) for x in backend.greedy(prompts, 128, stop, adapter=adapter)]
            samples = [text(x) for x in sampled(backend, prompts, pad, stop, a.samples,
                                                adapter, a.seed)]
            paired = [firsts[i // a.samples] for i in range(len(samples))]
            out[who] = {
                "greedy_gate": sum(map(capability.degenerate, greedy, firsts)),
                "greedy_bench": sum(map(world.degenerate, greedy)),
                "sampled_gate": sum(map(capability.degenerate, samples, paired)),
                "sampled_bench": sum(map(world.degenerate, samples)),
                "greedy": len(greedy), "sampled": len(samples),
            }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
