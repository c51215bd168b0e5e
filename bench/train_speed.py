"""Training speed per backend: tokens/s, peak memory, and achieved vs peak FLOP/s.

Run:  .venv/bin/python bench/train_speed.py [--quick] [--backends torch,torch-bf16,mlx]
          [--shape 60m|smollm2-135m|qwen-0.5b]

``torch-bf16`` is the torch backend with CPU bf16 autocast (``RLTRAY_TRAINER_BF16=1``,
see ``torch_setup.cpu_autocast``), compared against the bf16 matmul peak.

Why: a user's machine trains while they work, so "how long will a round take
and how much memory will it hold" must be known per backend, and the achieved
FLOP/s next to the machine's own matrix-multiply peak says whether a backend is
slow because the machine is slow or because the backend wastes it.

How:
* A Llama built from a config with random weights (no download) is written once
  per shape under the output folder (``model-<shape>``): ``--shape 60m`` (default,
  ~60M parameters: hidden 512, 8 layers, vocab 32k), ``smollm2-135m`` (SmolLM2-135M's
  architecture) or ``qwen-0.5b`` (a Llama with Qwen2.5-0.5B's shapes, not Qwen2:
  Qwen2's q/k/v biases are the only structural difference); see ``SHAPES``. The
  shape reaches every mode (per backend, ``--versus``, ``--profile``) through the
  model folder each child process loads.
* Each backend runs in its own child process (so peak RSS is that backend's
  alone): load through the trainer's Backend class with the ``balanced`` preset
  (LoRA on every block linear), one round-start ``logprobs`` pass, one warm-up
  step, then timed MIS-PO steps (``accumulate`` = forward + backward, ``step`` =
  AdamW) on fixed-length batches of random tokens.
* Model FLOPs per trained token = 4 x N, N = parameters in matrix multiplies
  (block linears + lm_head; embedding lookups are free): the forward costs 2N and
  the backward 2N for activation gradients; LoRA leaves the base weights frozen,
  so their weight-gradient 2N of full fine-tuning (the usual "6N") is not spent.
  Attention score FLOPs (~4·layers·hidden·L/2 per token) are left out (~4% at
  the 60M shape and L = 256).
  6N-equivalent figures are printed too, for comparison with full fine-tuning.
* The machine's peak: the best of several large fp32 matmuls (2·n³ FLOPs each)
  in torch and in MLX, with the same thread count as the trainer.

Side by side with ReinforceClaw 0.1.0 (issue 8)::

    nice -n 10 .venv/bin/python bench/train_speed.py --versus reinforceclaw [--versus-backend mlx]
    nice -n 10 .venv/bin/python bench/train_speed.py --versus reinforceclaw --profile

Every definition of the side-by-side is in ``versus_reinforceclaw.py`` (the rounds,
tokens/s, medians, table), ``reinforceclaw_child.py`` (ReinforceClaw's own round in
a child process) and ``speed_profile.py`` (``--profile``: where a round's time goes).

Every measurement runs as this same file re-executed with ``--child`` (so each has
its own process, threads and peak RSS); this file keeps that one entry point and
what every mode shares (the model, ``spawn``, peak RSS). The mode modules import
those helpers from here, so ``main`` imports them only when their flag is given.

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np


@dataclass
class FakeBatch:
    """The fields of ``rltray.trainer.data.Batch`` the backends read (duck-typed)."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    response_mask: np.ndarray
    position_ids: np.ndarray
    example_idx: list[int] = field(default_factory=list)


#: Model shapes ``--shape`` picks (``quick`` is ``--quick``'s). All are Llamas with
#: random weights built from a config: ``smollm2-135m`` is SmolLM2-135M's own
#: architecture; ``qwen-0.5b`` is a Llama with Qwen2.5-0.5B's sizes, not Qwen2 itself
#: (Qwen2 adds a bias to the q/k/v projections, the only structural difference; its
#: FLOPs and memory are the same within 0.01%). Both tie lm_head to the embedding, as
#: the real models do; the head's matmul still runs, so ``matmul_params`` counts it.
SHAPES: dict[str, dict[str, int]] = {
    "quick": {"hidden": 128, "layers": 2, "inter": 384, "heads": 4, "kv": 4, "vocab": 4000,
              "tied": 0},
    "60m": {"hidden": 512, "layers": 8, "inter": 1536, "heads": 8, "kv": 8, "vocab": 32000,
            "tied": 0},
    "smollm2-135m": {"hidden": 576, "layers": 30, "inter": 1536, "heads": 9, "kv": 3,
                     "vocab": 49152, "tied": 1},
    "qwen-0.5b": {"hidden": 896, "layers": 24, "inter": 4864, "heads": 14, "kv": 2,
                  "vocab": 151936, "tied": 1},
    "qwen-1.5b": {"hidden": 1536, "layers": 28, "inter": 8960, "heads": 12, "kv": 2,
                  "vocab": 151936, "tied": 1},
    "llama-8b": {"hidden": 4096, "layers": 32, "inter": 14336, "heads": 32, "kv": 8,
                 "vocab": 128256, "tied": 0},
}


def shape_name(a: argparse.Namespace) -> str:
    """The shape a run uses: ``quick`` under ``--quick``, else ``--shape``."""
    return "quick" if a.quick else a.shape


def model_dims(a: argparse.Namespace) -> dict[str, int]:
    return dict(SHAPES[shape_name(a)])


def matmul_params(d: dict[str, int]) -> int:
    """Weights that take part in matrix multiplies per token: block linears + lm_head."""
    h, head = d["hidden"], d["hidden"] // d["heads"]
    attn = 2 * h * h + 2 * h * d["kv"] * head
    return d["layers"] * (attn + 3 * h * d["inter"]) + d["vocab"] * h


def llama_config(d: dict[str, int], tok: Any) -> Any:
    """The ``LlamaConfig`` of shape ``d``, with ``tok``'s special token ids."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=d["vocab"], hidden_size=d["hidden"], intermediate_size=d["inter"],
        num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
        num_key_value_heads=d["kv"], max_position_embeddings=2048,
        tie_word_embeddings=bool(d["tied"]), bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )


def model_folder(out: Path, a: argparse.Namespace) -> Path:
    """One folder per shape (``model-60m``, ``model-qwen-0.5b`` ...): a built model is
    reused only by runs of its own shape."""
    return out / f"model-{shape_name(a)}"


def build_model(folder: Path, d: dict[str, int]) -> Path:
    """Random-init Llama + a small tokenizer (token ids are random anyway).

    On a CUDA machine the weights are drawn on the GPU and saved in bfloat16 (what
    the torch backend loads there): an 8B model is drawn in seconds instead of
    minutes of CPU initialisation.
    """
    if (folder / "config.json").exists():
        return folder
    import torch
    from rltray.trainer.tiny import build_tokenizer
    from transformers import LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(folder)
    torch.manual_seed(0)
    if torch.cuda.is_available():
        with torch.device("cuda"):
            model = LlamaForCausalLM(llama_config(d, tok)).to(torch.bfloat16)
    else:
        model = LlamaForCausalLM(llama_config(d, tok))
    model.save_pretrained(folder)
    del model
    return folder


def describe(name: str, d: dict[str, int]) -> str:
    """One line naming the model shape, for every mode's header."""
    return (f"model {name}: Llama hidden {d['hidden']}, {d['layers']} layers, "
            f"{d['heads']}/{d['kv']} heads/kv, MLP {d['inter']}, vocab {d['vocab']}"
            + (", tied" if d["tied"] else ""))


def peak_rss_mb() -> float:
    """Peak resident memory of this process (MiB)."""
    try:
        import resource

        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return kb / 1024 / (1024 if sys.platform == "darwin" else 1)
    except ImportError:  # Windows: psutil's peak working set
        import psutil

        return psutil.Process().memory_info().peak_wset / 2**20


def child_backend(a: argparse.Namespace) -> dict[str, Any]:
    """Load one backend and time MIS-PO steps; runs inside its own process."""
    from rltray.trainer import presets

    folder = Path(a.model)
    config = json.loads((folder / "config.json").read_text())
    hyper = presets.resolve(
        "balanced", presets.model_info(config),
        {"batch_size": a.batch, "step_examples": a.batch, "max_seq_len": a.seq},
    )
    job = SimpleNamespace(base_model=str(folder), revision=None, backend=a.child, device=a.device,
                          trust_remote_code=False, parent_adapter=None, seed=0)
    if a.child == "torch":
        from rltray.trainer.backends.torch_peft import TorchPeftBackend as Cls
    else:
        from rltray.trainer.backends.mlx import MlxBackend as Cls
    t0 = time.perf_counter()
    be = Cls(job, hyper)
    be.load()
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    b, L = a.batch, a.seq
    resp = np.ones((b, L), np.float32)
    resp[:, : L // 4 + 1] = 0.0  # the first quarter is the prompt
    batch = FakeBatch(
        input_ids=rng.integers(10, config["vocab_size"], (b, L)).astype(np.int64),
        attention_mask=np.ones((b, L), np.int64), response_mask=resp,
        position_ids=np.tile(np.arange(L, dtype=np.int64), (b, 1)), example_idx=list(range(b)),
    )
    t0 = time.perf_counter()
    base = be.logprobs(batch, adapter=False)  # returns numpy: the GPU has finished
    fwd_s = time.perf_counter() - t0
    adv = np.array([1.0 if i % 2 == 0 else -1.0 for i in range(b)], np.float32)
    weight = np.full(b, 1.0 / b, np.float32)
    be.accumulate(batch, base, base, adv, weight)  # warm-up step (allocations, kernels)
    be.step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        be.accumulate(batch, base, base, adv, weight)
        be.step()
    _synchronize(a)
    train_s = (time.perf_counter() - t0) / a.steps
    threads = None
    gpu_mb = None
    if a.child == "torch":
        import torch

        threads = torch.get_num_threads()
        if a.device == "cuda":
            gpu_mb = torch.cuda.max_memory_allocated() / 2**20
    else:  # MLX's own count of its buffers (the GPU's on Apple silicon, RAM on Linux)
        import mlx.core as mx

        gpu_mb = mx.get_peak_memory() / 2**20
    return {
        "backend": a.child, "device": getattr(be, "device_name", a.child), "threads": threads,
        "load_s": load_s, "forward_tokens_per_s": b * L / fwd_s,
        "train_tokens_per_s": b * L / train_s, "step_s": train_s, "peak_rss_mb": peak_rss_mb(),
        "peak_gpu_mb": gpu_mb,
        "lora_params": int(sum(v.size for v in be.lora_state().values())),
        # whether the blocks were recomputed in the backward (torch: the free memory decides)
        "recomputes": bool(getattr(be, "recomputes", lambda width: False)(L)),
    }


def _synchronize(a: argparse.Namespace) -> None:
    """Wait for the GPU's queued work, so a timer read after it counts that work."""
    if a.device == "cuda":
        import torch

        torch.cuda.synchronize()


def child_matmul(a: argparse.Namespace) -> dict[str, Any]:
    """Best matmul FLOP/s: fp32 (bf16) of torch on the CPU with the trainer's thread
    count, bf16 of torch on CUDA, or fp32 of MLX on the CPU."""
    n, reps = a.matmul_n, 5
    best = 0.0
    if a.child == "matmul-torch-cuda":
        import torch

        n = max(n, 8192)  # a GPU reaches its peak only on large products
        x = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
        y = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
        torch.matmul(x, y)
        torch.cuda.synchronize()
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(10):
                torch.matmul(x, y)
            torch.cuda.synchronize()
            best = max(best, 10 * 2 * n**3 / (time.perf_counter() - t0))
    elif a.child in ("matmul-torch", "matmul-torch-bf16"):
        import torch
        from rltray.trainer.backends.torch_peft import choose_threads

        torch.set_num_threads(choose_threads())
        dtype = torch.bfloat16 if a.child.endswith("bf16") else torch.float32
        x, y = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        torch.matmul(x, y)
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.matmul(x, y)
            best = max(best, 2 * n**3 / (time.perf_counter() - t0))
    else:
        import mlx.core as mx

        mx.set_default_device(mx.cpu)
        x, y = mx.random.normal((n, n)), mx.random.normal((n, n))
        mx.eval(x, y, x @ y)
        for _ in range(reps):
            t0 = time.perf_counter()
            mx.eval(x @ y)
            best = max(best, 2 * n**3 / (time.perf_counter() - t0))
    return {"kind": a.child, "n": n, "gflops": best / 1e9}


def spawn(args: list[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout,
        check=False, env={**os.environ, **(env or {})},
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, with ``--quick``'s small sizes filled in where no flag was given
    (a separate function so a test can check what ``--shape`` selects without a run)."""
    ap = argparse.ArgumentParser(description="training speed per backend")
    ap.add_argument("--quick", action="store_true", help="small model, a few seconds per backend")
    ap.add_argument("--shape", default="60m", choices=[k for k in SHAPES if k != "quick"],
                    help="model shape (see SHAPES)")
    ap.add_argument("--backends", default="torch,mlx",
                    help="torch, torch-bf16 (CPU autocast), torch-cuda (a CUDA GPU, bf16), mlx")
    ap.add_argument("--out", type=Path, default=Path(".bench-out/train_speed"))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--matmul-n", type=int, default=2048)
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--versus", metavar="TOOL",
                    help="side by side with another trainer (reinforceclaw), interleaved")
    ap.add_argument("--versus-backend", default="torch", choices=("torch", "mlx"))
    ap.add_argument("--examples", type=int, default=32, help="--versus: rated examples")
    ap.add_argument("--min-tokens", type=int, default=200, help="--versus: shortest example")
    ap.add_argument("--max-tokens", type=int, default=386, help="--versus: longest example")
    ap.add_argument("--passes", type=int, default=1, help="--versus: passes over the examples")
    ap.add_argument("--reps", type=int, default=3, help="--versus: rounds per tool")
    ap.add_argument("--rltray-bf16", default="0", choices=("0", "1", "auto"),
                    help="--versus: rltray's RLTRAY_TRAINER_BF16 (auto: a user's round's own)")
    ap.add_argument("--profile", action="store_true",
                    help="--versus: one torch.profiler round per tool, where the time goes")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    ap.add_argument("--rows", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.quick and a.shape != ap.get_default("shape"):
        ap.error("--quick is its own small shape; give --quick or --shape, not both")
    if a.quick and not a.child:  # small sizes, except where a flag was given explicitly
        small = {"batch": 2, "seq": 64, "steps": 2, "matmul_n": 512, "examples": 4,
                 "min_tokens": 40, "max_tokens": 80, "reps": 1}
        for k, v in small.items():
            if getattr(a, k) == ap.get_default(k):
                setattr(a, k, v)
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.child:
        if a.child in ("torch", "mlx"):
            res = child_backend(a)
        elif a.child.startswith("rc-"):
            from reinforceclaw_child import child_rc

            res = child_rc(a)
        elif a.child == "profile-rltray":
            from speed_profile import child_profile_rltray

            res = child_profile_rltray(a)
        else:
            res = child_matmul(a)
        print(json.dumps(res, default=str))
        return 0
    d = model_dims(a)
    folder = build_model(model_folder(a.out, a), d)
    if a.versus:
        from versus_reinforceclaw import versus_main

        return versus_main(a, d, folder)
    n_mm = matmul_params(d)
    common = ["--batch", str(a.batch), "--seq", str(a.seq), "--steps", str(a.steps),
              "--matmul-n", str(a.matmul_n), "--model", str(folder)]
    names = a.backends.split(",")
    peaks = {k: spawn(["--child", f"matmul-{k}", *common], a.timeout) for k in names}
    rows = []
    for name in names:
        bf16 = name == "torch-bf16"
        child = "torch" if name in ("torch-bf16", "torch-cuda") else name
        device = ["--device", "cuda"] if name == "torch-cuda" else []
        r = spawn(["--child", child, *device, *common], a.timeout,
                  {"RLTRAY_TRAINER_BF16": "1" if bf16 else "0"})
        r["backend"] = name
        if "error" not in r:
            r["model_gflops_4n"] = 4 * n_mm * r["train_tokens_per_s"] / 1e9
            r["model_gflops_6n_equiv"] = 6 * n_mm * r["train_tokens_per_s"] / 1e9
            peak = peaks.get(name, {}).get("gflops")
            r["mfu_vs_matmul_peak"] = r["model_gflops_4n"] / peak if peak else None
        rows.append(r)
    print(f"{describe(shape_name(a), d)}; {n_mm / 1e6:.1f}M matmul params; "
          f"batch {a.batch} x {a.seq} tokens; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for k, p in peaks.items():
        kind = "bf16" if k.endswith(("bf16", "cuda")) else "fp32"
        print(f"{kind} matmul peak ({k}, n={p.get('n', a.matmul_n)}): "
              + (f"{p['gflops']:.1f} GFLOP/s" if "gflops" in p else p["error"]))
    print(f"{'backend':<8} {'tok/s train':>11} {'tok/s fwd':>10} {'step s':>7} {'peak MiB':>9} "
          f"{'GFLOP/s 4N':>10} {'6N-eq':>7} {'of peak':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['backend']:<8} ERROR {r['error']}")
            continue
        frac = r["mfu_vs_matmul_peak"]
        print(f"{r['backend']:<8} {r['train_tokens_per_s']:>11.0f} "
              f"{r['forward_tokens_per_s']:>10.0f} {r['step_s']:>7.2f} "
              f"{r['peak_rss_mb']:>9.0f} {r['model_gflops_4n']:>10.1f} "
              f"{r['model_gflops_6n_equiv']:>7.1f} "
              + (f"{100 * frac:>6.0f}%" if frac is not None else "      -")
              + (f"  {'MLX' if r['backend'] == 'mlx' else 'GPU'} peak {r['peak_gpu_mb']:.0f} MiB"
                 if r.get("peak_gpu_mb") else ""))
    print(json.dumps({"shape": shape_name(a), "model": d, "matmul_params": n_mm,
                      "batch": a.batch, "seq": a.seq,
                      "steps": a.steps, "loadavg": os.getloadavg()[0], "matmul_peak": peaks,
                      "backends": rows}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
