"""In which float type to materialize a GGUF base: float16, bfloat16 or float32.

Run:  nice -n 10 .venv/bin/python bench/gguf_dtype.py

Why (issue 20 item 10): ``gguf_base`` writes the dequantized GGUF as float16, and
MLX computes in the type it loads, so a model whose activations exceed float16's
range (65504; the Gemma family) gives NaN on MLX and every round is rejected.
The torch backend casts on load (fp32 on CPU, bf16 on CUDA/MPS). This measures,
on SmolLM2-135M-Instruct Q4_1 (``packaging/fetch_test_model.py``), for each type:

* materialize: wall time and bytes on disk (``gguf_base._convert_streamed``);
* weights: relative RMS error against the exact float32 dequantization;
* torch CPU as the trainer loads it (``dtype=float32``): load time, forward time
  (128 tokens, after one warm-up) and KL(exact || this) per token of the logits;
* MLX as the trainer loads it (``mlx_lm.utils.load_model`` + the backend's
  ``no_float16`` cast): the type it computes in, forward time and KL to exact
  (MLX on Linux runs on the CPU: its times say nothing of Apple GPUs).

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TEXT = ("def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. "
        "Please refactor this module so that each class lives in its own file. ") * 8


def _model_path() -> Path:
    sys.path.insert(0, str(ROOT / "packaging"))
    from fetch_test_model import cached_model

    found = cached_model()
    if found is None:
        raise SystemExit("run `python packaging/fetch_test_model.py` first")
    return Path(found)


def _materialize(gguf: Path, out: Path, dtype: Any) -> dict[str, float]:
    from rltray.trainer import gguf_base
    from transformers import AutoTokenizer

    out.mkdir(parents=True)
    link = out.parent / f"{out.name}-link" / "model.gguf"
    link.parent.mkdir()
    link.symlink_to(gguf)
    start = time.perf_counter()
    assert gguf_base._convert_streamed(link, out, dtype)
    seconds = time.perf_counter() - start
    AutoTokenizer.from_pretrained(link.parent, gguf_file=link.name).save_pretrained(out)
    size = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    return {"materialize_s": round(seconds, 2), "disk_mb": round(size / 1e6, 1)}


def _weight_error(folder: Path, ref: Path) -> float:
    from safetensors.torch import load_file

    a, b = load_file(folder / "model.safetensors"), load_file(ref / "model.safetensors")
    num = sum(float(((a[k].float() - b[k].float()) ** 2).sum()) for k in b)
    den = sum(float((b[k].float() ** 2).sum()) for k in b)
    return (num / den) ** 0.5


def _kl(ref_logits: Any, logits: Any) -> float:
    import numpy as np

    def logsoftmax(z: Any) -> Any:
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))

    p, q = logsoftmax(ref_logits.astype(np.float64)), logsoftmax(logits.astype(np.float64))
    return float((np.exp(p) * (p - q)).sum(-1).mean())


def _ids(folder: Path) -> Any:
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(folder)(TEXT)["input_ids"]
    return [ids[:128]]


def _timed(fn: Any) -> tuple[Any, float]:
    fn()  # warm-up
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _torch(folder: Path, ids: list[list[int]]) -> tuple[Any, dict[str, float]]:
    import torch
    from transformers import AutoModelForCausalLM

    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    load = time.perf_counter() - start
    x = torch.tensor(ids)
    with torch.no_grad():
        logits, fwd = _timed(lambda: model(input_ids=x).logits.float().numpy())
    return logits, {"torch_load_s": round(load, 2), "torch_forward_s": round(fwd, 3)}


def _mlx(folder: Path, ids: list[list[int]]) -> tuple[Any, dict[str, Any]]:
    import mlx.core as mx
    import numpy as np
    from mlx_lm.utils import load_model
    from rltray.trainer.backends.mlx_setup import no_float16

    model, _ = load_model(folder)
    no_float16(model)
    x = mx.array(ids)

    def run() -> Any:
        out = model(x).astype(mx.float32)
        mx.eval(out)
        return np.array(out)

    logits, fwd = _timed(run)
    dtype = str(model.model.layers[0].self_attn.q_proj.weight.dtype).split(".")[-1]
    return logits, {"mlx_dtype": dtype, "mlx_forward_s": round(fwd, 3)}


def main() -> None:
    import torch

    gguf = _model_path()
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {}
        for name, dtype in (("float32", torch.float32), ("float16", torch.float16),
                            ("bfloat16", torch.bfloat16)):
            folders[name] = Path(tmp) / name
            rows[name] = _materialize(gguf, folders[name], dtype)
        ids = _ids(folders["float32"])
        ref_torch, _ = _torch(folders["float32"], ids)
        for name, folder in folders.items():
            row = rows[name]
            row["weight_rel_rms_error"] = float(f"{_weight_error(folder, folders['float32']):.3g}")
            logits, timing = _torch(folder, ids)
            row.update(timing, torch_kl_to_exact=float(f"{_kl(ref_torch, logits):.3g}"))
            logits, timing = _mlx(folder, ids)
            row.update(timing, mlx_kl_to_exact_torch=float(f"{_kl(ref_torch, logits):.3g}"))
            print(name, row, flush=True)
    print(json.dumps({"model": gguf.name, "rows": rows}))


if __name__ == "__main__":
    main()
