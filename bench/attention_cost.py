"""What attention and the decoding step cost on a CPU (issue 25): measured, not landed.

Run (a minute or two at one thread)::

    .venv/bin/python bench/attention_cost.py [--tokens 300] [--heads 9] [--kv-heads 3]
        [--rows 16] [--reps 20]

Two measurements behind the bench/README paragraph "Where a bf16 round's wall time goes
now". The defaults are SmolLM2-135M's attention shape (9 query heads on 3 KV heads of 64).

* **Training attention**: forward and backward of causal attention over ``--tokens``
  tokens, torch's SDPA (what Transformers runs) against the same attention written as
  plain matmuls (the query heads grouped onto their KV head, a float32 softmax), in bf16
  and fp32. The plain form keeps the T x T probabilities for the backward; the last
  line says how much that is a layer.
* **Decoding matmuls**: one decoding step's linear layers for ``--rows`` rows (the
  capability check answers 16 prompts in one batch), each shape timed alone so its
  weight stays in the cache. Set against the profile of a real decoding step, the
  difference is the time spent bringing every weight in from memory.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

HEAD_DIM = 64
#: SmolLM2-135M's linear layers as one decoding step meets them: (in, out, times a step):
#: per layer x 30 layers, and the output head once.
SMOLLM2_LINEARS = ((576, 576, 2 * 30), (576, 192, 2 * 30), (576, 1536, 2 * 30),
                   (1536, 576, 30), (576, 49152, 1))


def timed(fn: Callable[[], object], reps: int) -> float:
    """Mean seconds of ``fn`` after two warm-up calls."""
    for _ in range(2):
        fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def attention_pass(kind: str, dtype: torch.dtype, heads: int, kv: int, tokens: int,
                   reps: int) -> tuple[float, float]:
    """Forward and backward milliseconds of one layer's causal attention."""
    q = torch.randn(1, heads, tokens, HEAD_DIM, dtype=dtype, requires_grad=True)
    k = torch.randn(1, kv, tokens, HEAD_DIM, dtype=dtype, requires_grad=True)
    v = torch.randn(1, kv, tokens, HEAD_DIM, dtype=dtype, requires_grad=True)
    mask = torch.full((tokens, tokens), float("-inf")).triu(1)
    group = heads // kv

    def sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def plain() -> torch.Tensor:
        scores = (q.reshape(1, kv, group * tokens, HEAD_DIM) @ k.transpose(-1, -2))
        scores = scores.view(1, kv, group, tokens, tokens) * HEAD_DIM**-0.5 + mask
        probs = torch.softmax(scores.float(), -1).to(dtype).view(1, kv, group * tokens, tokens)
        return (probs @ v).view(1, heads, tokens, HEAD_DIM)

    forward = sdpa if kind == "sdpa" else plain
    for _ in range(2):
        forward().float().sum().backward()
    fwd = bwd = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        out = forward()
        t1 = time.perf_counter()
        out.float().sum().backward()
        fwd, bwd = fwd + t1 - t0, bwd + time.perf_counter() - t1
    return fwd / reps * 1e3, bwd / reps * 1e3


def decoding_matmuls(rows: int, reps: int) -> float:
    """Milliseconds of one SmolLM2 decoding step's linear layers, weights in the cache."""
    total = 0.0
    for n_in, n_out, times in SMOLLM2_LINEARS:
        x = torch.randn(rows, n_in, dtype=torch.bfloat16)
        w = torch.randn(n_out, n_in, dtype=torch.bfloat16)
        # the head is ~30x a layer's matmul: fewer reps time it as well
        n = reps if times > 1 else max(3, reps // 10)
        total += timed(lambda x=x, w=w: F.linear(x, w), n) * times
    return total * 1e3


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(f"one layer's causal attention, {a.heads} heads on {a.kv_heads} KV heads of "
          f"{HEAD_DIM}, {a.tokens} tokens, one thread")
    for dtype in (torch.bfloat16, torch.float32):
        for kind in ("sdpa", "plain"):
            fwd, bwd = attention_pass(kind, dtype, a.heads, a.kv_heads, a.tokens, a.reps)
            print(f"  {str(dtype).removeprefix('torch.'):9s} {kind:6s} forward {fwd:6.2f} ms"
                  f"  backward {bwd:6.2f} ms  both {fwd + bwd:6.2f} ms")
    kept = a.heads * a.tokens**2 * (4 + 2) / 2**20
    print(f"  the plain form keeps {kept:.1f} MiB of probabilities a layer for the backward")
    print(f"SmolLM2-135M decoding step's linear layers, {a.rows} rows, bf16, weights in cache: "
          f"{decoding_matmuls(a.rows, a.reps * 10):.1f} ms")


if __name__ == "__main__":
    main()
