"""Shared helpers of the export tests (kept out of conftest.py: a `from conftest import`
would find whichever conftest module another test folder loaded first)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/ (for fixtures/)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures.fake_ollama import FakeOllama
from tinygguf import GO_TEMPLATE

BASE = "tiny:1m"
BASE_PARAMS = {"stop": ["<|im_end|>"], "temperature": 0.2}


def start_fake(root: Path, version: str, gguf: Path, **kw) -> FakeOllama:
    fake = FakeOllama(root, version, **kw).start()
    fake.install(BASE, gguf, template=GO_TEMPLATE, system="Be brief.", parameters=BASE_PARAMS)
    return fake


SMOL_RANK, SMOL_ALPHA = 8, 16.0
SMOL_PROMPT = (
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\nWaves"
)


def llama_logits(model: Path, lora: Path | None = None) -> tuple[list[int], np.ndarray]:
    """llama.cpp's logits (float64) at every position of :data:`SMOL_PROMPT`, one thread."""
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=str(model), lora_path=str(lora) if lora else None, logits_all=True,
        n_ctx=256, n_threads=1, verbose=False,
    )
    tokens = llm.tokenize(SMOL_PROMPT.encode(), add_bos=False, special=True)
    llm.eval(tokens)
    scores = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    llm.close()
    return tokens, scores


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two arrays taken as flat vectors."""
    a, b = a.ravel(), b.ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def smollm2_random_adapter(
    hf: Path, out: Path, *, leaves: tuple[str, ...], b_std: float, every: int = 3, seed: int = 0
) -> Path:
    """A PEFT adapter with random factors, big enough that its effect stands out of the
    rounding noise of llama.cpp's quantized activations (a tiny delta flips roundings and
    moves logits by a fixed ~0.3 RMS whatever its size: measured, see the test module)."""
    import json

    import numpy as np
    from rltray.trainer.adapters import peft_name, write_adapter

    cfg = json.loads((hf / "config.json").read_text())
    hidden, ffn = cfg["hidden_size"], cfg["intermediate_size"]
    kv = hidden // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    shapes = {
        "self_attn.q_proj": (hidden, hidden), "self_attn.k_proj": (kv, hidden),
        "self_attn.v_proj": (kv, hidden), "self_attn.o_proj": (hidden, hidden),
        "mlp.gate_proj": (ffn, hidden), "mlp.up_proj": (ffn, hidden),
        "mlp.down_proj": (hidden, ffn),
    }  # fmt: skip
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(0, cfg["num_hidden_layers"], every):
        for leaf, (o, i) in shapes.items():
            if leaf.rsplit(".", 1)[-1] not in leaves:
                continue
            path = f"model.layers.{layer}.{leaf}"
            tensors[peft_name(path, "A")] = rng.normal(0, i**-0.5, (SMOL_RANK, i)).astype(
                np.float32
            )
            tensors[peft_name(path, "B")] = rng.normal(0, b_std, (o, SMOL_RANK)).astype(
                np.float32
            )
    return write_adapter(out, tensors, rank=SMOL_RANK, alpha=SMOL_ALPHA, base_model=str(hf))
