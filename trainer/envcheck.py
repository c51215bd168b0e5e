"""`python -m rltray.trainer.envcheck --backend torch|mlx [--device D]`: can this Python train?

Why: `rltray trainer-env create` must prove a fresh environment works before it
replaces the old one, and "the packages installed" is not proof (a CUDA wheel
without a driver, an MLX build for the wrong macOS). This imports the backend,
builds a tiny random Llama (trainer/tiny.py), loads it through the same backend
class real rounds use, and runs one optimizer step; the LoRA weights must move
and the loss must be finite. Prints one JSON line and exits 0, or 1 with the
reason in that line.

The MLX path writes the tiny model with MLX itself, because an MLX environment
has no torch to run ``tiny.build_tiny_llama``'s ``save_pretrained``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

SEQUENCES, LENGTH = 2, 12


def tiny_model(folder: Path, backend: str) -> Path:
    from rltray.trainer import tiny

    if backend != "mlx":
        return tiny.build_tiny_llama(folder)
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.llama import Model, ModelArgs

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny.build_tokenizer(folder)
    config = {
        "model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id, "architectures": ["LlamaForCausalLM"],
    }  # fmt: skip
    mx.random.seed(0)
    model = Model(ModelArgs.from_dict(config))
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return folder


def batch(vocab: int) -> SimpleNamespace:
    """Two right-padded sequences of ordinary token ids; the second half is the "answer"."""
    rng = np.random.default_rng(0)
    ids = rng.integers(8, vocab, size=(SEQUENCES, LENGTH), dtype=np.int64)
    attention = np.ones((SEQUENCES, LENGTH), dtype=np.int64)
    attention[1, -3:] = 0
    response = np.zeros((SEQUENCES, LENGTH), dtype=np.float32)
    response[:, LENGTH // 2 :] = 1.0
    response *= attention
    positions = np.where(attention > 0, np.cumsum(attention, axis=1) - 1, 0)
    return SimpleNamespace(
        input_ids=ids,
        attention_mask=attention,
        response_mask=response,
        position_ids=positions,
        example_idx=list(range(SEQUENCES)),
    )


def one_step(backend_name: str, device: str) -> dict[str, Any]:
    from rltray.trainer.backends.catalogue import make_backend
    from rltray.trainer.presets import Hyper

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rltray-envcheck-") as tmp:
        folder = tiny_model(Path(tmp) / "model", backend_name)
        vocab = json.loads((folder / "config.json").read_text(encoding="utf-8"))["vocab_size"]
        job = SimpleNamespace(
            backend=backend_name, base_model=str(folder), revision=None, parent_adapter=None,
            seed=0, trust_remote_code=False, device=device,
        )  # fmt: skip
        hyper = Hyper(rank=4, alpha=8.0, lr=1e-2, warmup_steps=0, max_seq_len=64, batch_size=2)
        backend = make_backend(job, hyper)
        backend.load()
        data = batch(vocab)
        before = {k: np.array(v, copy=True) for k, v in backend.lora_state().items()}
        old = backend.logprobs(data, adapter=True)
        base = backend.logprobs(data, adapter=False)
        adv = np.array([1.0, -1.0], dtype=np.float32)
        stats = backend.accumulate(data, old, base, adv, np.full(SEQUENCES, 0.5, np.float32))
        backend.step()
        after = backend.lora_state()
        moved = max(float(np.abs(after[k] - before[k]).max()) for k in before)
        device_name = backend.device_name
    loss = float(stats["loss"])
    ok = math.isfinite(loss) and moved > 0
    return {
        "ok": ok,
        "backend": backend_name,
        "device": device_name,
        "loss": loss,
        "lora_moved": moved,
        "seconds": round(time.monotonic() - started, 2),
        "why": "" if ok else f"the step left the LoRA unchanged or the loss not finite ({loss})",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rltray.trainer.envcheck")
    parser.add_argument("--backend", choices=("torch", "mlx"), required=True)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "mps"))
    args = parser.parse_args(argv)
    try:
        result = one_step(args.backend, args.device)
    except Exception as exc:  # the point is to report it: one line, not a traceback
        result = {"ok": False, "backend": args.backend, "why": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
