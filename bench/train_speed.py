"""Training speed per backend: tokens/s, peak memory, and achieved vs peak FLOP/s.

Run:  .venv/bin/python bench/train_speed.py [--quick] [--backends torch,torch-bf16,mlx]

``torch-bf16`` is the torch backend with CPU bf16 autocast (``RLTRAY_TRAINER_BF16=1``,
see ``torch_setup.cpu_autocast``), compared against the bf16 matmul peak.

Why: a user's machine trains while they work, so "how long will a round take
and how much memory will it hold" must be known per backend, and the achieved
FLOP/s next to the machine's own matrix-multiply peak says whether a backend is
slow because the machine is slow or because the backend wastes it.

How:
* A Llama of ~60M parameters (hidden 512, 8 layers, vocab 32k; built from a
  config with random weights, no download) is written once under the output folder.
* Each backend runs in its own child process (so peak RSS is that backend's
  alone): load through the trainer's Backend class with the ``balanced`` preset
  (LoRA on every block linear), one round-start ``logprobs`` pass, one warm-up
  step, then timed MIS-PO steps (``accumulate`` = forward + backward, ``step`` =
  AdamW) on fixed-length batches of random tokens.
* Model FLOPs per trained token = 4 x N, N = parameters in matrix multiplies
  (block linears + lm_head; embedding lookups are free): the forward costs 2N and
  the backward 2N for activation gradients; LoRA leaves the base weights frozen,
  so their weight-gradient 2N of full fine-tuning (the usual "6N") is not spent.
  Attention score FLOPs (~4·layers·hidden·L/2 per token) are left out (~4% here).
  6N-equivalent figures are printed too, for comparison with full fine-tuning.
* The machine's peak: the best of several large fp32 matmuls (2·n³ FLOPs each)
  in torch and in MLX, with the same thread count as the trainer.

Side by side with ReinforceClaw 0.1.0 (issue 8)::

    nice -n 10 .venv/bin/python bench/train_speed.py --versus reinforceclaw [--versus-backend mlx]
    nice -n 10 .venv/bin/python bench/train_speed.py --versus reinforceclaw --profile

* Both tools train the same 32 rated examples (200-386 tokens of chat-templated
  prompt + response, half rated +1, half -1; fixed seed) on the same 60M model,
  one pass each, at one torch thread and niceness 10, through their own entry
  points: ``python -m rltray.trainer JOB.json`` (preset ``balanced``, ``epochs`` =
  ``--passes``) and ReinforceClaw's ``trainer.train_result(config, conn)`` with its
  ``balanced`` preset on a fresh database (``batch_size`` = all examples, ``steps``
  = examples x passes, ``grad_accum`` 1, so each example is trained once per pass,
  one example per optimizer step as ReinforceClaw does). Rounds are interleaved
  (rltray, ReinforceClaw, rltray, ...) and medians reported.
* Tokens/s over the steps = trained prompt+response tokens (no padding) / the
  optimizer steps' seconds. rltray: its ``train_seconds`` minus ``guard_seconds``
  (the drift guard after each step, shown separately and in ``+guard``).
  ReinforceClaw: from its loop's ``backend.reset_peak_memory()`` to its last
  step's ``guard.log_step``. Wall = process start to exit; ``before``/``after``
  split it around the steps. FLOP/s = 4N per trained token against the 1-thread
  matmul peak, measured before and after the rounds (the better one is used).
* ``--profile`` runs one round of each under torch.profiler and sums self CPU time
  by part: forward/backward matmuls, log-softmax, attention, other ops, Python
  between ops, optimizer, drift guard, data prep, before and after the steps.

Over 30 KB on purpose: every measurement here runs as this same file re-executed
with ``--child`` (so each has its own process, threads and peak RSS), and the
modes share the model, the example builder and the matmul peak. The side-by-side
(from ``WORDS`` down) is the part to move to its own module if it grows further.

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
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


def model_dims(a: argparse.Namespace) -> dict[str, int]:
    if a.quick:
        return {"hidden": 128, "layers": 2, "inter": 384, "heads": 4, "kv": 4, "vocab": 4000}
    return {"hidden": 512, "layers": 8, "inter": 1536, "heads": 8, "kv": 8, "vocab": 32000}


def matmul_params(d: dict[str, int]) -> int:
    """Weights that take part in matrix multiplies per token: block linears + lm_head."""
    h, head = d["hidden"], d["hidden"] // d["heads"]
    attn = 2 * h * h + 2 * h * d["kv"] * head
    return d["layers"] * (attn + 3 * h * d["inter"]) + d["vocab"] * h


def build_model(folder: Path, d: dict[str, int]) -> Path:
    """Random-init Llama + a small tokenizer (token ids are random anyway)."""
    if (folder / "config.json").exists():
        return folder
    import torch
    from rltray.trainer.tiny import build_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(folder)
    cfg = LlamaConfig(
        vocab_size=d["vocab"], hidden_size=d["hidden"], intermediate_size=d["inter"],
        num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
        num_key_value_heads=d["kv"], max_position_embeddings=2048, tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder


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
    job = SimpleNamespace(base_model=str(folder), revision=None, backend=a.child, device="cpu",
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
    base = be.logprobs(batch, adapter=False)
    fwd_s = time.perf_counter() - t0
    adv = np.array([1.0 if i % 2 == 0 else -1.0 for i in range(b)], np.float32)
    weight = np.full(b, 1.0 / b, np.float32)
    be.accumulate(batch, base, base, adv, weight)  # warm-up step (allocations, kernels)
    be.step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        be.accumulate(batch, base, base, adv, weight)
        be.step()
    train_s = (time.perf_counter() - t0) / a.steps
    threads = None
    if a.child == "torch":
        import torch

        threads = torch.get_num_threads()
    return {
        "backend": a.child, "device": getattr(be, "device_name", a.child), "threads": threads,
        "load_s": load_s, "forward_tokens_per_s": b * L / fwd_s,
        "train_tokens_per_s": b * L / train_s, "step_s": train_s, "peak_rss_mb": peak_rss_mb(),
        "lora_params": int(sum(v.size for v in be.lora_state().values())),
    }


def child_matmul(a: argparse.Namespace) -> dict[str, Any]:
    """Best fp32 matmul FLOP/s of torch (trainer's thread count) or MLX (CPU)."""
    n, reps = a.matmul_n, 5
    best = 0.0
    if a.child in ("matmul-torch", "matmul-torch-bf16"):
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


# ---- side by side with ReinforceClaw (--versus reinforceclaw) -------------------------

#: Words the synthetic prompts and responses are drawn from (a coding assistant's talk).
WORDS = (
    "the", "a", "to", "of", "and", "in", "is", "for", "that", "with", "def", "return",
    "import", "class", "self", "if", "else", "while", "try", "except", "raise", "print",
    "list", "dict", "value", "key", "error", "test", "file", "path", "function", "loop",
    "index", "string", "number", "result", "data", "user", "model", "train", "fix", "bug",
    "add", "remove", "update", "check", "config", "run", "build", "install", "module",
    "package", "please", "can", "you", "why", "does", "this", "fail", "variable",
)


def versus_examples(tokenizer: Any, n: int, lo: int, hi: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rated turns whose chat-templated text is ``lo``..``hi`` tokens (about a
    quarter prompt), alternately rated +1 and -1; identical input for both tools."""
    rng = np.random.default_rng(seed)

    def size(prompt: str, words: list[str]) -> int:
        chat = [{"role": "user", "content": prompt},
                {"role": "assistant", "content": " ".join(words)}]
        text = tokenizer.apply_chat_template(chat, tokenize=False)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    rows = []
    for i in range(n):
        target = int(rng.integers(lo, hi + 1))
        prompt = " ".join(str(w) for w in rng.choice(WORDS, size=max(2, target // 10)))
        words = [str(rng.choice(WORDS))]
        while size(prompt, words) < target:
            words.append(str(rng.choice(WORDS)))
        rows.append({"prompt": prompt, "response": " ".join(words), "rating": 1 - 2 * (i % 2)})
    return rows


#: Environment that holds every math library to one thread (torch is set in-process).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def _timed_lines(cmd: list[str], env: dict[str, str], timeout: float, log: Path
                 ) -> tuple[list[tuple[float, str]], float, float, int]:
    """Run ``cmd``; every stdout line with its arrival time (epoch s), start, end, exit code."""
    with log.open("w", encoding="utf-8") as err:
        start = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1,
                                env={**os.environ, **env})
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        assert proc.stdout is not None
        lines = [(time.time(), line) for line in proc.stdout]
        code = proc.wait()
        end = time.time()
        timer.cancel()
    return lines, start, end, code


def _fail(tool: str, log: Path, code: int) -> dict[str, Any]:
    tail = (log.read_text(encoding="utf-8", errors="replace").strip().splitlines() or ["no output"])
    return {"tool": tool, "error": f"exit {code}: {tail[-1][:300]}"}


def write_job(folder: Path, model: Path, rows: list[dict[str, Any]], backend: str,
              passes: int) -> Path:
    """A fresh job folder for the trainer: the ratings, preset ``balanced``, ``passes`` epochs."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    with (folder / "examples.jsonl").open("w", encoding="utf-8") as f:
        for i, r in enumerate(rows):
            f.write(json.dumps({"id": f"ex{i:03d}", "rated_at": f"2026-01-01T00:{i % 60:02d}:00Z",
                                **r}) + "\n")
    job = {"v": 1, "id": folder.name, "base_model": str(model.resolve()), "backend": backend,
           "device": "cpu", "preset": "balanced", "hyper": {"epochs": passes},
           "examples": "examples.jsonl", "out": "adapter", "seed": 0}
    (folder / "job.json").write_text(json.dumps(job), encoding="utf-8")
    return folder / "job.json"


def run_rltray(folder: Path, model: Path, rows: list[dict[str, Any]], backend: str,
               passes: int, tokens: int, timeout: float) -> dict[str, Any]:
    """One round of the real trainer (``python -m rltray.trainer job.json``) at 1 thread.

    Step seconds = the round's ``train_seconds`` (the optimisation loop) minus
    ``guard_seconds`` (the drift guard after each step); both are reported. Tokens =
    ``passes`` x the prompt+response tokens of every example as the trainer encodes
    them (padding not counted).
    """
    job = write_job(folder, model, rows, backend, passes)
    lines, start, end, code = _timed_lines(
        [sys.executable, "-m", "rltray.trainer", str(job)],
        {"RLTRAY_TRAINER_THREADS": "1", **ONE_THREAD}, timeout, folder / "stderr.log")
    parsed = [(t, json.loads(x)) for t, x in lines if x.startswith("{")]
    prog = [(t, d) for t, d in parsed if d.get("type") == "progress"]
    done = [d for _, d in parsed if d.get("type") == "done"]
    if code != 0 or not done or not prog:
        return _fail("rltray", folder / "stderr.log", code)
    m = done[0]["metrics"]
    loop_start = prog[0][0] - prog[0][1]["elapsed_s"]
    trained = tokens * passes if m["steps"] == prog[0][1]["total"] else None
    step_s = m["train_seconds"] - m["guard_seconds"]
    return {
        "tool": "rltray", "tokens": trained, "steps": m["steps"], "step_s": step_s,
        "guard_s": m["guard_seconds"], "loop_s": m["train_seconds"], "wall_s": end - start,
        "before_s": loop_start - start, "after_s": end - prog[-1][0],
        "round_start_s": m.get("round_start_s"), "finish_s": m.get("finish_seconds"),
        "progress_tokens_per_s": [d["tokens_per_s"] for _, d in prog],
    }


def child_rc(a: argparse.Namespace) -> dict[str, Any]:
    """ReinforceClaw 0.1.0's own ``trainer.train_result(config, conn)`` on a fresh
    database holding the bench's ratings; runs inside its own process with HOME set
    to a temp folder (ReinforceClaw keeps its DB, lock, log and adapters there).

    Two stand-ins, both only about the device, never the training: its CUDA backend
    object (``torch.cuda`` must exist) is replaced by the same methods on the CPU
    in fp32 with memory from psutil, and its MLX backend's memory query (``vm_stat``
    and ``sysctl``, macOS only) reads psutil on Linux. Step timing: the loop starts
    where it calls ``backend.reset_peak_memory()`` and each step ends at its
    ``guard.log_step`` (``backend.memory_snapshot()``); tokens are counted in a
    wrapper around its loss function (prompt+response tokens of each example it
    trains on).
    """
    import psutil
    from reinforceclaw import backend_cuda, backend_mlx
    from reinforceclaw import db as rc_db
    from reinforceclaw import presets as rc_presets
    from reinforceclaw import profile as rc_profile
    from reinforceclaw import trainer as rc

    marks: dict[str, Any] = {"loop": None, "ends": [], "tokens": 0, "calls": 0}
    spans: list[Any] = []  # --profile: one record_function per optimizer step

    def next_span() -> None:
        if a.profile:
            from torch.profiler import record_function

            if spans:
                spans[-1].__exit__(None, None, None)
            spans.append(record_function(f"step {len(spans)}"))
            spans[-1].__enter__()

    def hardware(cls: type, device: str, **extra: Any) -> Any:
        vm = psutil.virtual_memory()
        return cls(device_name=device, total_memory_bytes=vm.total,
                   available_memory_bytes=vm.available, system_total_memory_bytes=vm.total,
                   system_available_memory_bytes=vm.available, **extra)

    class Timed:
        def reset_peak_memory(self) -> None:
            marks["loop"] = time.time()
            next_span()

        def memory_snapshot(self) -> dict[str, float]:
            if marks["loop"] is not None:
                marks["ends"].append(time.time())
                next_span()
            return {"rss_gb": psutil.Process().memory_info().rss / 1e9}

    class CpuForCuda(Timed):
        name, unified_memory = "cuda", False

        def __init__(self) -> None:
            import torch

            self.torch, self.device = torch, torch.device("cpu")

        def hardware(self) -> Any:
            return hardware(backend_cuda.CUDAHardware, "cpu")

        def apply_limits(self, limit_bytes: int, cache_fraction: float = 0.25) -> None:
            pass

        def active_memory_bytes(self) -> int:
            return psutil.Process().memory_info().rss

        current_memory_bytes = active_memory_bytes

        def cache_memory_bytes(self) -> int:
            return 0

        def peak_memory_bytes(self) -> int:
            return int(peak_rss_mb() * 2**20)

        def clear_cache(self) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def clear_all(self) -> None:
            import gc

            gc.collect()

        def preferred_dtype(self) -> Any:
            return self.torch.float32

    class LinuxMlx(Timed, backend_mlx.MLXBackend):
        def hardware(self) -> Any:
            return hardware(backend_mlx.MLXHardware, "cpu", recommended_working_set_bytes=None)

    def counted(make: Any) -> Any:
        def wrapper(model: Any, tokenized: list[dict[str, Any]], *args: Any, **kw: Any) -> Any:
            inner = make(model, tokenized, *args, **kw)
            if a.profile:
                inner = _label("loss_fn", inner)

            def loss_fn(idx: int) -> Any:
                marks["tokens"] += int(tokenized[idx]["input_ids"].shape[0])
                marks["calls"] += 1
                return inner(idx)

            return loss_fn

        return wrapper

    if a.child == "rc-torch":
        import torch

        torch.set_num_threads(1)
        rc.CUDABackend = CpuForCuda
    else:
        rc.MLXBackend = LinuxMlx
    rc._make_loss_fn_torch = counted(rc._make_loss_fn_torch)
    rc._make_loss_fn_mlx = counted(rc._make_loss_fn_mlx)
    rows = json.loads(Path(a.rows).read_text(encoding="utf-8"))
    model = str(Path(a.model).resolve())
    config = rc_presets.pick(rc_profile.detect(model), "balanced")
    config.update(model=model, compute_backend="cuda" if a.child == "rc-torch" else "mlx",
                  batch_min=len(rows), batch_size=len(rows), steps=len(rows) * a.passes,
                  grad_accum=1, low_priority=False)
    conn = rc_db.connect(Path.home() / ".reinforceclaw" / "reinforceclaw.db")
    for r in rows:
        rc_db.add_feedback(conn, model, r["prompt"], r["response"], r["rating"], source="bench")
    if not a.profile:
        result, extra = rc.train_result(config, conn), {}
    else:  # torch only: label round start, optimizer, steps; then group the self times
        from torch.profiler import ProfilerActivity, profile

        build = rc._build_optimizer_torch

        def labelled_optimizer(*args: Any, **kw: Any) -> Any:
            opt = build(*args, **kw)
            opt.step, opt.zero_grad = _label("optimizer", opt.step), _label("optimizer",
                                                                              opt.zero_grad)
            return opt

        rc._build_optimizer_torch = labelled_optimizer
        rc._compute_logprobs_torch = _label("round start", rc._compute_logprobs_torch)
        torch.nn.utils.clip_grad_norm_ = _label("optimizer", torch.nn.utils.clip_grad_norm_)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            result = rc.train_result(config, conn)
            if spans:
                spans[-1].__exit__(None, None, None)
        n = len(marks["ends"])
        labels = {f"step {i}": "steps" for i in range(n)}
        labels.update({f"step {n}": "finish", "round start": "round start",
                       "optimizer": "optimizer", "loss_fn": "loss_fn"})
        extra = {"breakdown": breakdown(prof.events(), labels)}
    return {"result": {k: v for k, v in result.items() if k != "feedback_ids"},
            "threads": torch.get_num_threads() if a.child == "rc-torch" else None,
            "lora_target": config["lora_target"], "lora_rank": config["lora_rank"],
            **marks, **extra}


def run_rc(folder: Path, model: Path, rows: list[dict[str, Any]], backend: str, passes: int,
           timeout: float) -> dict[str, Any]:
    """ReinforceClaw's ``train_result`` in a child process (see :func:`child_rc`)."""
    home = folder / "home"
    if folder.exists():
        shutil.rmtree(folder)
    home.mkdir(parents=True)
    (folder / "rows.json").write_text(json.dumps(rows), encoding="utf-8")
    lines, start, end, code = _timed_lines(
        [sys.executable, __file__, "--child", f"rc-{backend}", "--model", str(model),
         "--rows", str(folder / "rows.json"), "--passes", str(passes)],
        {"HOME": str(home), **ONE_THREAD}, timeout, folder / "stderr.log")
    objs = [json.loads(x) for _, x in lines if x.startswith("{")]
    if code != 0 or not objs:
        return _fail("reinforceclaw", folder / "stderr.log", code)
    r = objs[-1]
    if r["result"].get("status") != "trained" or not r["ends"]:
        return {"tool": "reinforceclaw", "error": f"not trained: {r['result']}"}
    return {
        "tool": "reinforceclaw", "tokens": r["tokens"], "steps": len(r["ends"]),
        "step_s": r["ends"][-1] - r["loop"], "guard_s": 0.0, "loop_s": r["ends"][-1] - r["loop"],
        "wall_s": end - start, "before_s": r["loop"] - start, "after_s": end - r["ends"][-1],
        "lora": f"{r['lora_target']} r{r['lora_rank']}", "threads": r["threads"],
        "batch": r["result"].get("batch_size"),
    }


def _own_folder(out: Path, prefix: str) -> Path:
    """A fresh folder for this invocation's job and home folders: two runs sharing an
    ``--out`` must not delete or overwrite each other's (a rltray round refuses to write
    over an adapter folder another run created)."""
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=out))


def versus_main(a: argparse.Namespace, d: dict[str, int], folder: Path) -> int:
    """Interleaved rounds (rltray, ReinforceClaw, rltray, ...) on identical data; medians."""
    import statistics

    from rltray.trainer import data as rdata
    from rltray.trainer.job import example_from_dict
    from transformers import AutoTokenizer

    if a.versus != "reinforceclaw":
        raise SystemExit(f"--versus knows only reinforceclaw, not {a.versus!r}")
    tok = AutoTokenizer.from_pretrained(folder)
    rows = versus_examples(tok, a.examples, a.min_tokens, a.max_tokens, seed=0)
    tokens = sum(
        len(rdata.encode(tok, example_from_dict(
            {**r, "id": str(i), "rated_at": "2026-01-01T00:00:00Z"}), 2048).input_ids)
        for i, r in enumerate(rows))
    if a.profile:
        return profile_main(a, folder, rows)
    n_mm = matmul_params(d)
    common = ["--matmul-n", str(a.matmul_n), "--model", str(folder)]
    peak_kind = "matmul-torch" if a.versus_backend == "torch" else "matmul-mlx"
    one = {"RLTRAY_TRAINER_THREADS": "1", **ONE_THREAD}
    peaks = [spawn(["--child", peak_kind, *common], a.timeout, one)]
    loads = [os.getloadavg()[0]]
    runs: list[dict[str, Any]] = []
    work = _own_folder(a.out, f"versus-{a.versus_backend}-")
    for rep in range(a.reps):
        for tool in ("rltray", "reinforceclaw"):
            sub = work / f"{tool}-{rep}"
            if tool == "rltray":
                r = run_rltray(sub, folder, rows, a.versus_backend, a.passes, tokens, a.timeout)
            else:
                r = run_rc(sub, folder, rows, a.versus_backend, a.passes, a.timeout)
            r.update(rep=rep, loadavg=os.getloadavg()[0])
            loads.append(r["loadavg"])
            runs.append(r)
    peaks.append(spawn(["--child", peak_kind, *common], a.timeout, one))
    peak = max((p.get("gflops", 0.0) for p in peaks), default=0.0) or None

    def rates(r: dict[str, Any]) -> None:
        if "error" in r or not r.get("tokens"):
            return
        r["tok_s_steps"] = r["tokens"] / r["step_s"]
        r["tok_s_loop"] = r["tokens"] / r["loop_s"]
        r["tok_s_wall"] = r["tokens"] / r["wall_s"]
        r["gflops_4n"] = 4 * n_mm * r["tok_s_steps"] / 1e9
        r["of_peak"] = r["gflops_4n"] / peak if peak else None

    for r in runs:
        rates(r)
    keys = ("tokens", "step_s", "guard_s", "tok_s_steps", "tok_s_loop", "wall_s", "before_s",
            "after_s", "tok_s_wall", "gflops_4n", "of_peak")
    med: dict[str, dict[str, Any]] = {}
    for tool in ("rltray", "reinforceclaw"):
        ok = [r for r in runs if r["tool"] == tool and "tok_s_steps" in r]
        med[tool] = {k: statistics.median(r[k] for r in ok) for k in keys
                     if ok and all(r.get(k) is not None for r in ok)}
        med[tool]["runs"] = len(ok)
    ratio = {}
    if med["rltray"].get("tok_s_steps") and med["reinforceclaw"].get("tok_s_steps"):
        ratio = {k: med["rltray"][k] / med["reinforceclaw"][k]
                 for k in ("tok_s_steps", "tok_s_loop", "tok_s_wall")}
    print(f"model: Llama hidden {d['hidden']}, {d['layers']} layers, vocab {d['vocab']}; "
          f"{n_mm / 1e6:.1f}M matmul params; {a.examples} examples of {a.min_tokens}-"
          f"{a.max_tokens} tokens ({tokens} tokens) x {a.passes} pass(es); backend "
          + ("torch at 1 thread" if a.versus_backend == "torch" else
             "mlx (its own CPU threads; OMP/OpenBLAS/MKL held to 1)")
          + f"; load average {min(loads):.1f}-{max(loads):.1f} "
          f"on {os.cpu_count()} CPUs")
    what = "fp32 torch matmul peak, 1 thread" if a.versus_backend == "torch" else "mlx matmul peak"
    print(f"{what} (n={a.matmul_n}, before/after): "
          + " / ".join(f"{p['gflops']:.1f}" if "gflops" in p else p["error"] for p in peaks)
          + " GFLOP/s")
    head = (f"{'tool':<13} {'rep':>3} {'tokens':>7} {'step s':>7} {'guard s':>7} "
            f"{'tok/s steps':>11} {'+guard':>7} {'wall s':>7} {'before':>7} {'after':>6} "
            f"{'tok/s wall':>10} {'GFLOP/s':>7} {'of peak':>7}")
    print(head)

    def row(name: str, rep: str, r: dict[str, Any]) -> str:
        if "error" in r:
            return f"{name:<13} {rep:>3} ERROR {r['error']}"
        frac = r.get("of_peak")
        return (f"{name:<13} {rep:>3} {r['tokens']:>7.0f} {r['step_s']:>7.1f} "
                f"{r['guard_s']:>7.1f} {r['tok_s_steps']:>11.1f} {r['tok_s_loop']:>7.1f} "
                f"{r['wall_s']:>7.1f} {r['before_s']:>7.1f} {r['after_s']:>6.1f} "
                f"{r['tok_s_wall']:>10.1f} {r['gflops_4n']:>7.1f} "
                + (f"{100 * frac:>6.0f}%" if frac is not None else "      -"))

    for r in runs:
        print(row(r["tool"], str(r["rep"]), r if "error" in r or "tok_s_steps" in r
                  else {"error": "no tokens counted"}))
    for tool in ("rltray", "reinforceclaw"):
        if med[tool]["runs"]:
            print(row(tool, "med", med[tool]))
    if ratio:
        print(f"rltray / reinforceclaw: tok/s over the steps {ratio['tok_s_steps']:.2f}x "
              f"(with rltray's drift guard {ratio['tok_s_loop']:.2f}x), on wall time "
              f"{ratio['tok_s_wall']:.2f}x")
    print(json.dumps({"versus": a.versus, "backend": a.versus_backend, "model": d,
                      "matmul_params": n_mm, "examples": a.examples, "tokens": tokens,
                      "passes": a.passes, "reps": a.reps, "loadavg": [min(loads), max(loads)],
                      "matmul_peak": peaks, "runs": runs, "median": med, "ratio": ratio},
                     sort_keys=True, default=str))
    ok = all(med[t]["runs"] == a.reps for t in med)
    return 0 if ok else 1


# ---- where a round's time goes (--versus reinforceclaw --profile) ---------------------


def _label(name: str, fn: Any) -> Any:
    """``fn`` inside a torch.profiler ``record_function(name)``, so its ops group under it."""
    import functools

    from torch.profiler import record_function

    @functools.wraps(fn)
    def wrapped(*args: Any, **kw: Any) -> Any:
        with record_function(name):
            return fn(*args, **kw)

    return wrapped


MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
#: Labelled parts of a step reported whole (not split into forward/backward op kinds).
PARTS = ("drift guard", "data prep", "optimizer", "lora_state copy")


def op_kind(chain: list[str]) -> str:
    """The op family of an event: the innermost of its ops (itself first) that names one.

    ``log-softmax`` covers ``log_softmax`` and ``logsumexp`` with every op they are
    made of, forward and backward (``LogsumexpBackward0`` ...).
    """
    for name in chain:
        low = name.lower()
        if name in MATMULS:
            return "matmul"
        if "log_softmax" in low or "logsoftmax" in low or "logsumexp" in low:
            return "log-softmax"
        if "attention" in low:
            return "attention"
    return "other ops"


def breakdown(events: Any, labels: dict[str, str]) -> dict[str, float]:
    """Self CPU seconds by ``outer/inner/phase/kind``, and ``op/phase/name`` for each
    op of the ``other ops`` kind inside the steps.

    ``labels`` maps our ``record_function`` names to groups; outer and inner are the
    outermost and innermost of them around an event (``-``: none); phase is ``bwd``
    inside the autograd engine, else ``fwd``; kind is the op family, or ``python``
    for a label's own self time (the Python between the ops it holds). Self times
    add up to the profiled wall time of one thread.
    """
    out: dict[str, float] = {}
    for ev in events:
        chain = [ev.name]
        parent = ev.cpu_parent
        while parent is not None:
            chain.append(parent.name)
            parent = parent.cpu_parent
        mine = [i for i, n in enumerate(chain) if n in labels]
        ours = [labels[chain[i]] for i in mine]
        phase = "bwd" if any(n.startswith("autograd::engine") for n in chain) else "fwd"
        kind = "python" if ev.name in labels else op_kind(chain[: mine[0] if mine else None])
        key = f"{ours[-1] if ours else '-'}/{ours[0] if ours else '-'}/{phase}/{kind}"
        sec = ev.self_cpu_time_total / 1e6
        out[key] = out.get(key, 0.0) + sec
        if kind == "other ops" and ours and ours[-1] == "steps" and ours[0] not in PARTS:
            detail = f"op/{phase}/{ev.name}"
            out[detail] = out.get(detail, 0.0) + sec
    return out


def child_profile_rltray(a: argparse.Namespace) -> dict[str, Any]:
    """One round of the real trainer (``__main__.run`` on the job) under torch.profiler."""
    import threading as th

    from rltray.trainer import data
    from rltray.trainer import train as tr
    from rltray.trainer.__main__ import run
    from rltray.trainer.backends.torch_peft import TorchPeftBackend as Backend
    from torch.profiler import ProfilerActivity, profile

    targets = {
        "round start": (tr, "_round_start"), "steps": (tr, "_optimise"),
        "finish": (tr, "_finish"), "forward+backward": (Backend, "accumulate"),
        "optimizer": (Backend, "step"), "lora_state copy": (Backend, "lora_state"),
        "drift guard": (tr.DriftSet, "measure"), "data prep": (data, "collate"),
        "data prep (pad rows)": (tr, "_pad_rows"),
    }
    for name, (owner, attr) in list(targets.items()):
        if not hasattr(owner, attr):  # the trainer changed: profile without that label
            del targets[name]
            continue
        setattr(owner, attr, _label(name, getattr(owner, attr)))
    lines: list[dict[str, Any]] = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        code = run(a.rows, lines.append, th.Event())
    done = [x for x in lines if x.get("type") == "done"]
    labels = {n: ("data prep" if n.startswith("data prep") else n) for n in targets}
    return {"exit": code, "metrics": done[0]["metrics"] if done else lines[-1:],
            "labels": sorted(targets),
            "breakdown": breakdown(prof.events(), labels)}


def summarise(bd: dict[str, float]) -> dict[str, float]:
    """The steps' self time in named parts (see :func:`breakdown` for the keys)."""
    out: dict[str, float] = {}
    for key, sec in bd.items():
        if key.startswith("op/"):
            continue
        outer, inner, phase, kind = key.split("/", 3)
        if outer != "steps":
            part = {"round start": "before steps: round-start log-probs",
                    "finish": "after steps (rltray: final drift + gate)"}.get(
                outer, "outside (load, save)")
        elif inner in PARTS:
            part = f"steps: {inner}"
        elif kind == "python":
            part = "steps: Python between ops"
        else:
            part = f"steps: {'backward' if phase == 'bwd' else 'forward'} {kind}"
        out[part] = out.get(part, 0.0) + sec
    return dict(sorted(out.items()))


def profile_main(a: argparse.Namespace, folder: Path, rows: list[dict[str, Any]]) -> int:
    """One profiled round per tool; prints where each one's time goes."""
    work = _own_folder(a.out, "profile-")
    one = {"RLTRAY_TRAINER_THREADS": "1", **ONE_THREAD}
    job = write_job(work / "rltray", folder, rows, "torch", a.passes)
    rl = spawn(["--child", "profile-rltray", "--rows", str(job)], a.timeout, one)
    rc_dir = work / "reinforceclaw"
    if rc_dir.exists():
        shutil.rmtree(rc_dir)
    (rc_dir / "home").mkdir(parents=True)
    (rc_dir / "rows.json").write_text(json.dumps(rows), encoding="utf-8")
    rc = spawn(["--child", "rc-torch", "--profile", "--model", str(folder), "--rows",
                str(rc_dir / "rows.json"), "--passes", str(a.passes)], a.timeout,
               {"HOME": str(rc_dir / "home"), **one})
    parts = {t: summarise(r["breakdown"]) if "breakdown" in r else {}
             for t, r in (("rltray", rl), ("reinforceclaw", rc))}
    print(f"profile (torch.profiler, 1 thread, self CPU seconds; load average "
          f"{os.getloadavg()[0]:.1f}); {a.examples} examples x {a.passes} pass(es)")
    print(f"{'part':<44} {'rltray':>8} {'reinforceclaw':>13}")
    for t in parts:  # the optimizer steps alone: what tokens/s over the steps divides by
        parts[t]["= steps without the drift guard"] = sum(
            v for k, v in parts[t].items() if k.startswith("steps:") and "drift" not in k)
    for part in sorted(set(parts["rltray"]) | set(parts["reinforceclaw"])):
        print(f"{part:<44} {parts['rltray'].get(part, 0.0):>8.2f} "
              f"{parts['reinforceclaw'].get(part, 0.0):>13.2f}")
    for t, r in (("rltray", rl), ("reinforceclaw", rc)):
        if "error" in r:
            print(f"{t}: ERROR {r['error']}")
            continue
        ops = sorted(((v, k[3:]) for k, v in r["breakdown"].items() if k.startswith("op/")),
                     reverse=True)[:8]
        print(f"{t}, largest 'other ops' in the steps: "
              + ", ".join(f"{name} {sec:.2f}" for sec, name in ops))
    print(json.dumps({"profile": parts, "rltray": rl, "reinforceclaw": rc}, default=str))
    return 0 if all("breakdown" in r for r in (rl, rc)) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="training speed per backend")
    ap.add_argument("--quick", action="store_true", help="small model, a few seconds per backend")
    ap.add_argument("--backends", default="torch,mlx")
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
    ap.add_argument("--profile", action="store_true",
                    help="--versus: one torch.profiler round per tool, where the time goes")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--rows", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        if a.child in ("torch", "mlx"):
            res = child_backend(a)
        else:
            res = (child_rc(a) if a.child.startswith("rc-") else child_profile_rltray(a)
                   if a.child == "profile-rltray" else child_matmul(a))
        print(json.dumps(res, default=str))
        return 0
    if a.quick:  # small sizes, except where a flag was given explicitly
        small = {"batch": 2, "seq": 64, "steps": 2, "matmul_n": 512, "examples": 4,
                 "min_tokens": 40, "max_tokens": 80, "reps": 1}
        for k, v in small.items():
            if getattr(a, k) == ap.get_default(k):
                setattr(a, k, v)
    d = model_dims(a)
    folder = build_model(a.out / ("model-quick" if a.quick else "model-60m"), d)
    if a.versus:
        return versus_main(a, d, folder)
    n_mm = matmul_params(d)
    common = ["--batch", str(a.batch), "--seq", str(a.seq), "--steps", str(a.steps),
              "--matmul-n", str(a.matmul_n), "--model", str(folder)]
    names = a.backends.split(",")
    peaks = {k: spawn(["--child", f"matmul-{k}", *common], a.timeout) for k in names}
    rows = []
    for name in names:
        bf16 = name == "torch-bf16"
        r = spawn(["--child", "torch" if bf16 else name, *common], a.timeout,
                  {"RLTRAY_TRAINER_BF16": "1" if bf16 else "0"})
        r["backend"] = name
        if "error" not in r:
            r["model_gflops_4n"] = 4 * n_mm * r["train_tokens_per_s"] / 1e9
            r["model_gflops_6n_equiv"] = 6 * n_mm * r["train_tokens_per_s"] / 1e9
            peak = peaks.get(name, {}).get("gflops")
            r["mfu_vs_matmul_peak"] = r["model_gflops_4n"] / peak if peak else None
        rows.append(r)
    print(f"model: Llama hidden {d['hidden']}, {d['layers']} layers, vocab {d['vocab']}; "
          f"{n_mm / 1e6:.1f}M matmul params; batch {a.batch} x {a.seq} tokens; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for k, p in peaks.items():
        print(f"{'bf16' if k.endswith('bf16') else 'fp32'} matmul peak ({k}, n={a.matmul_n}): "
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
              + (f"{100 * frac:>6.0f}%" if frac is not None else "      -"))
    print(json.dumps({"model": d, "matmul_params": n_mm, "batch": a.batch, "seq": a.seq,
                      "steps": a.steps, "loadavg": os.getloadavg()[0], "matmul_peak": peaks,
                      "backends": rows}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
