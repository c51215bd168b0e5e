"""ReinforceClaw 0.1.0's own training round, inside a child process of the side-by-side.

``train_speed.py --child rc-torch|rc-cuda|rc-mlx`` runs :func:`child_rc` (``run_rc`` in
``versus_reinforceclaw.py`` starts it and reads its one JSON line). It lives apart
from the parent side because everything here runs inside ReinforceClaw's process:
stand-ins for its device objects and the marks that time its steps.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from speed_profile import breakdown, labelled
from train_speed import peak_rss_mb


def child_rc(a: argparse.Namespace) -> dict[str, Any]:
    """ReinforceClaw 0.1.0's own ``trainer.train_result(config, conn)`` on a fresh
    database holding the bench's ratings; runs inside its own process with HOME set
    to a temp folder (ReinforceClaw keeps its DB, lock, log and adapters there).

    ``rc-cuda`` runs its own CUDA backend on a GPU, with only the step marks added.
    Elsewhere two stand-ins, both only about the device, never the training: its CUDA
    backend object (``torch.cuda`` must exist) is replaced by the same methods on the CPU
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

    def note_gpu_peak() -> None:
        import torch

        marks["gpu_peak_bytes"] = max(marks.get("gpu_peak_bytes", 0),
                                      int(torch.cuda.max_memory_allocated()))

    class TimedCuda(backend_cuda.CUDABackend):
        """Its real CUDA backend (``rc-cuda``, on a GPU machine) with the same step marks;
        a step ends once the GPU has finished it, and the peak counts the round start too
        (its own ``reset_peak_memory`` forgets it at the loop's start)."""

        def reset_peak_memory(self) -> None:
            note_gpu_peak()
            marks["loop"] = time.time()
            next_span()
            super().reset_peak_memory()

        def memory_snapshot(self) -> dict[str, float]:
            if marks["loop"] is not None:
                self.torch.cuda.synchronize()
                marks["ends"].append(time.time())
                next_span()
            return super().memory_snapshot()

    class LinuxMlx(Timed, backend_mlx.MLXBackend):
        def hardware(self) -> Any:
            return hardware(backend_mlx.MLXHardware, "cpu", recommended_working_set_bytes=None)

    def counted(make: Any) -> Any:
        def wrapper(model: Any, tokenized: list[dict[str, Any]], *args: Any, **kw: Any) -> Any:
            inner = make(model, tokenized, *args, **kw)
            if a.profile:
                inner = labelled("loss_fn", inner)

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
    elif a.child == "rc-cuda":
        rc.CUDABackend = TimedCuda
    else:
        rc.MLXBackend = LinuxMlx
    rc._make_loss_fn_torch = counted(rc._make_loss_fn_torch)
    rc._make_loss_fn_mlx = counted(rc._make_loss_fn_mlx)
    rows = json.loads(Path(a.rows).read_text(encoding="utf-8"))
    model = str(Path(a.model).resolve())
    config = rc_presets.pick(rc_profile.detect(model), "balanced")
    on_torch = a.child in ("rc-torch", "rc-cuda")
    config.update(model=model, compute_backend="cuda" if on_torch else "mlx",
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
            opt.step, opt.zero_grad = labelled("optimizer", opt.step), labelled("optimizer",
                                                                              opt.zero_grad)
            return opt

        rc._build_optimizer_torch = labelled_optimizer
        rc._compute_logprobs_torch = labelled("round start", rc._compute_logprobs_torch)
        torch.nn.utils.clip_grad_norm_ = labelled("optimizer", torch.nn.utils.clip_grad_norm_)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            result = rc.train_result(config, conn)
            if spans:
                spans[-1].__exit__(None, None, None)
        n = len(marks["ends"])
        labels = {f"step {i}": "steps" for i in range(n)}
        labels.update({f"step {n}": "finish", "round start": "round start",
                       "optimizer": "optimizer", "loss_fn": "loss_fn"})
        extra = {"breakdown": breakdown(prof.events(), labels)}
    if a.child == "rc-cuda":
        note_gpu_peak()
    return {"result": {k: v for k, v in result.items() if k != "feedback_ids"},
            "threads": torch.get_num_threads() if a.child == "rc-torch" else None,
            "lora_target": config["lora_target"], "lora_rank": config["lora_rank"],
            **marks, **extra}
