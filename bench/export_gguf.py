"""Materialize, export and merge SmolLM2-135M: time and peak memory, extrapolated to 7B.

Run:  nice -n 10 .venv/bin/python bench/export_gguf.py [--rank 16]

Why: publishing runs after every accepted round on the user's machine, and
training from the GGUF Ollama serves converts it once; the user must know what
each step costs on their model, not on ours.

How:
* The model is SmolLM2-135M-Instruct Q4_1 (``packaging/fetch_test_model.py``).
  The adapter is a random rank-``--rank`` LoRA on every block linear layer of all 30
  layers (the ``balanced`` preset's targets), written as a PEFT folder.
* Each step runs in its own child process; it reports its wall time, its peak
  RSS (``ru_maxrss``) and its RSS after imports, so the step's own cost is
  ``peak - imports``. Steps: ``materialize`` (GGUF -> cached HF folder, fresh
  cache), ``adapter`` (PEFT -> GGUF LoRA), ``merge`` in q8_0, f16 and base (Q4_1).
* Extrapolation to a 7B Llama (Qwen2.5-7B / Llama-3-8B class: 7.6e9 parameters,
  largest block linear 18944 x 3584): time scales with the parameters a step
  touches; materialize memory with all parameters (it holds the model); merge
  memory with the largest tensor (it streams one tensor at a time). The
  arithmetic is printed next to each figure.

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEVEN_B_PARAMS = 7.6e9
SEVEN_B_LARGEST = 18944 * 3584  # Qwen2.5-7B MLP weight


def _rss_mb() -> float:
    """Peak resident memory of this process so far, MB.

    Linux: ``VmHWM`` (the mm's own high-water mark; ``ru_maxrss`` can carry the
    parent's peak over fork + exec). Elsewhere ``ru_maxrss``.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak * (1 if sys.platform == "darwin" else 1024) / 1e6


class _Sampler:
    """Peak private (``RssAnon``) and file-backed (``RssFile``) memory, sampled every 20 ms.

    Why split: reading a GGUF through mmap makes its pages resident, which counts
    as RSS but is page cache the kernel drops under pressure; private memory is
    what a merge really costs.
    """

    def __init__(self) -> None:
        import threading

        self.anon = self.file = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            text = Path("/proc/self/status").read_text()
        except OSError:
            return
        for line in text.splitlines():
            if line.startswith("RssAnon:"):
                self.anon = max(self.anon, int(line.split()[1]) * 1024 / 1e6)
            elif line.startswith("RssFile:"):
                self.file = max(self.file, int(line.split()[1]) * 1024 / 1e6)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._read()

    def stop(self) -> tuple[float, float]:
        self._stop.set()
        self._thread.join()
        self._read()
        return self.anon, self.file


def child(step: str, gguf_path: str, adapter: str, work: str) -> None:
    """One step in this process; prints {"seconds", "peak_mb", "imports_mb", ...}."""
    import gguf  # import cost counted in imports_mb
    import numpy  # noqa: F401

    if step == "materialize":
        import torch  # noqa: F401
        import transformers  # noqa: F401
    from rltray.trainer import gguf_base
    from rltray.trainer.export import gguf_adapter, merge

    imports = _rss_mb()
    sampler = _Sampler()
    t0 = time.perf_counter()
    out: dict = {}
    if step == "materialize":
        folder = gguf_base.materialize(Path(gguf_path), cache=Path(work) / "cache")
        out["disk_mb"] = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
    elif step == "adapter":
        reader = gguf.GGUFReader(gguf_path)
        out["reader_s"] = time.perf_counter() - t0  # parsing the metadata (vocabulary)
        arch = gguf_adapter.ArchInfo.from_gguf(reader)
        path = gguf_adapter.export(adapter, Path(work) / "a.gguf", arch_info=arch)
        out["size_mb"] = path.stat().st_size / 1e6
    else:
        kind = step.split("-", 1)[1]
        report = merge.merge(gguf_path, adapter, Path(work) / f"m-{kind}.gguf", out_type=kind)
        out["size_mb"] = report.size / 1e6
        out["base_mb"] = report.base_size / 1e6
    seconds = time.perf_counter() - t0
    anon, file_backed = sampler.stop()
    out.update(seconds=seconds, peak_mb=_rss_mb(), imports_mb=imports, anon_peak_mb=anon,
               file_peak_mb=file_backed)
    print(json.dumps(out))


def make_adapter(gguf_path: Path, out: Path, rank: int) -> tuple[Path, int]:
    import gguf
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from rltray.trainer.adapters import peft_name, write_adapter

    reader = gguf.GGUFReader(gguf_path)
    leaf = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
            "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
            "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    rng = np.random.default_rng(0)
    tensors, touched = {}, 0
    for t in reader.tensors:
        parts = t.name.split(".")
        if parts[0] != "blk" or parts[2] not in leaf:
            continue
        row, rows = int(t.shape[0]), int(t.shape[1])
        path = f"model.layers.{parts[1]}.{leaf[parts[2]]}"
        tensors[peft_name(path, "A")] = rng.normal(0, row**-0.5, (rank, row)).astype(np.float32)
        tensors[peft_name(path, "B")] = rng.normal(0, 0.01, (rows, rank)).astype(np.float32)
        touched += row * rows
    return write_adapter(out, tensors, rank=rank, alpha=2.0 * rank, base_model="bench"), touched


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    sys.path.insert(0, str(ROOT / "packaging"))
    from fetch_test_model import cached_model

    gguf_path = cached_model()
    if gguf_path is None:
        sys.exit("needs SmolLM2: run `python packaging/fetch_test_model.py` first")
    import gguf

    reader = gguf.GGUFReader(gguf_path)
    params = sum(int(t.n_elements) for t in reader.tensors)
    work = Path(tempfile.mkdtemp(prefix="rltray-bench-export-"))
    try:
        adapter, touched = make_adapter(gguf_path, work / "adapter", args.rank)
        results: dict = {"model": gguf_path.name, "parameters": params,
                         "adapted_parameters": touched, "rank": args.rank}
        steps = ("materialize", "materialize-16mb", "adapter", "merge-q8_0", "merge-f16",
                 "merge-base")
        for step in steps:
            env = dict(os.environ)
            if step == "materialize-16mb":  # 16 MB shards: what one shard + metadata cost
                env["RLTRAY_GGUF_SHARD_MB"] = "16"
            shutil.rmtree(work / "cache", ignore_errors=True)
            proc = subprocess.run(
                [sys.executable, __file__, "--child", step.split("-")[0] if step.startswith(
                    "materialize") else step, str(gguf_path), str(adapter), str(work)],
                capture_output=True, text=True, check=True, env=env,
            )
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            results[step] = row
            own = row["peak_mb"] - row["imports_mb"]
            extra = ", ".join(f"{k} {row[k]:.1f}" for k in ("disk_mb", "size_mb", "base_mb")
                              if k in row)
            print(f"{step:12s} {row['seconds']:7.2f} s  peak RSS {row['peak_mb']:7.0f} MB "
                  f"(imports {row['imports_mb']:.0f} MB, step's own {own:.0f} MB)  {extra}")
        scale_all = SEVEN_B_PARAMS / params
        base_mb = gguf_path.stat().st_size / 1e6
        seven: dict = {}
        m, small = results["materialize"], results["materialize-16mb"]
        seven["materialize_s"] = m["seconds"] * scale_all
        # streamed: the GGUF metadata/tokenizer (scales with the vocabulary) + one 1 GB
        # shard + one tensor dequantized in float32 and its 16-bit copy
        meta_mb = small["anon_peak_mb"] - small["imports_mb"] - 16
        seven["materialize_peak_gb"] = (
            meta_mb * 152 / 49 + 1024 + 6 * SEVEN_B_LARGEST / 1e6
        ) / 1e3
        seven["materialize_whole_load_gb"] = (2 * SEVEN_B_PARAMS / 1e6 + meta_mb * 152 / 49) / 1e3
        seven["materialize_disk_gb"] = m["disk_mb"] * scale_all / 1e3
        print(f"\n7B extrapolation (7.6e9 parameters, a 4.7 GB Q4_K_M file, vocabulary 152k, "
              f"largest block tensor {SEVEN_B_LARGEST}):")
        print(f"  materialize: {m['seconds']:.1f} s x {scale_all:.1f} (parameters) = "
              f"{seven['materialize_s'] / 60:.0f} min; disk {m['disk_mb']:.0f} MB x "
              f"{scale_all:.1f} = {seven['materialize_disk_gb']:.1f} GB; private memory with "
              f"16 MB shards ({small['anon_peak_mb']:.0f} - {small['imports_mb']:.0f} imports - 16"
              f" shard) = {meta_mb:.0f} MB of metadata x 152/49 (vocabulary) + 1024 MB (one "
              f"shard) + 6 B x {SEVEN_B_LARGEST} (one tensor in fp32 + fp16) = "
              f"{seven['materialize_peak_gb']:.1f} GB; Transformers' whole-model load instead "
              f"holds the fp16 model: 2 B x 7.6e9 + the metadata = "
              f"{seven['materialize_whole_load_gb']:.1f} GB")
        a = results["adapter"]
        # rank-16 LoRA on every block linear: SmolLM2 10,176 (in+out) x 30 layers; a 7B of
        # hidden 3584 / MLP 18944 / KV 512: 90,112 x 28 layers
        lora_ratio = (90112 * 28) / (10176 * 30)
        seven["adapter_s"] = a["reader_s"] * 152 / 49 + (a["seconds"] - a["reader_s"]) * lora_ratio
        print(f"  adapter: reading the metadata {a['reader_s']:.1f} s x 152/49 (vocabulary) + "
              f"the rest {a['seconds'] - a['reader_s']:.1f} s x {lora_ratio:.1f} (LoRA size) = "
              f"{seven['adapter_s']:.0f} s")
        for step in ("adapter", "merge-q8_0", "merge-f16", "merge-base"):
            r = results[step]
            work_mb = 3 * 4 * SEVEN_B_LARGEST / 1e6  # fp32 weights, delta, sum of one tensor
            anon7 = (r["anon_peak_mb"] - r["imports_mb"]) * 152 / 49 + work_mb
            seven[f"{step}_private_gb"] = anon7 / 1e3
            if step != "adapter":
                seven[f"{step}_s"] = r["seconds"] * scale_all
            took = (f"{r['seconds']:.1f} s x {scale_all:.1f} = {seven[step + '_s'] / 60:.1f} min"
                    if step != "adapter" else "see above")
            print(f"  {step}: {took}; private memory "
                  f"({r['anon_peak_mb']:.0f} - {r['imports_mb']:.0f} imports) MB x 152/49 "
                  f"(vocabulary: the GGUF reader's metadata) + 3 x 4 B x {SEVEN_B_LARGEST} "
                  f"(one tensor) = {anon7 / 1e3:.2f} GB; plus the base file's pages "
                  f"({r['file_peak_mb']:.0f} MB here for a {base_mb:.0f} MB file, page cache)")
        results["seven_b"] = seven
        print(json.dumps(results))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
