"""Shared helpers of the export tests (kept out of conftest.py: a `from conftest import`
would find whichever conftest module another test folder loaded first)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.fake_ollama import FakeOllama
from tests.support.tinygguf import GO_TEMPLATE

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
    """llama.cpp's logits (float64) at every position of :data:`SMOL_PROMPT`, one thread
    (the shared implementation in ``rltray.trainer.export.fidelity``)."""
    from rltray.trainer.export import fidelity

    return fidelity.llama_logits(model, lora, text=SMOL_PROMPT)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two arrays taken as flat vectors."""
    from rltray.trainer.export import fidelity

    return fidelity.cosine(a, b)


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


# -- trained-size adapters on re-written SmolLM2 bases (issue 20; bench/export_fidelity.py) --

LEAVES = {  # HF leaf -> (GGUF key for the out size, GGUF key for the in size)
    "self_attn.q_proj": ("embedding_length", "embedding_length"),
    "self_attn.k_proj": ("kv", "embedding_length"),
    "self_attn.v_proj": ("kv", "embedding_length"),
    "self_attn.o_proj": ("embedding_length", "embedding_length"),
    "mlp.gate_proj": ("feed_forward_length", "embedding_length"),
    "mlp.up_proj": ("feed_forward_length", "embedding_length"),
    "mlp.down_proj": ("embedding_length", "feed_forward_length"),
}


def rewrite_base(src: Path, dst: Path, qtype_name: str, every: int = 1) -> Path:
    """``src`` with its Q4_1 tensors re-written as ``qtype_name`` (Q8_0 or F16): all of
    them, or (``every`` > 1) those of every ``every``-th block, as far as an adapter from
    :func:`trained_size_adapter` with the same ``every`` reaches (faster to build)."""
    import gguf
    from gguf import quants
    from rltray.trainer.export.merge import copy_fields

    qtype = gguf.GGMLQuantizationType[qtype_name]
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, str(reader.fields["general.architecture"].contents()))
    writer.data_alignment = reader.alignment
    copy_fields(reader, writer)
    for t in reader.tensors:
        block = t.name.split(".")[1] if t.name.startswith("blk.") else None
        if t.tensor_type != gguf.GGMLQuantizationType.Q4_1 or (
            every > 1 and (block is None or int(block) % every)
        ):
            writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
            continue
        values = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(t.name, values.astype(np.float16))
        else:
            writer.add_tensor(t.name, quants.quantize(values, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def trained_size_adapter(
    base: Path, out: Path, median: float, *, every: int = 1, seed: int = 0
) -> Path:
    """A rank-8 PEFT adapter on every linear layer of every ``every``-th block, scaled to
    median |delta| = ``median`` (a trained one's size)."""
    import gguf
    from rltray.trainer.adapters import peft_name, write_adapter

    reader = gguf.GGUFReader(base)
    arch = str(reader.fields["general.architecture"].contents())

    def key(name: str) -> int:
        return int(reader.fields[f"{arch}.{name}"].contents())

    sizes = {"embedding_length": key("embedding_length"),
             "feed_forward_length": key("feed_forward_length"),
             "kv": key("embedding_length") // key("attention.head_count")
             * key("attention.head_count_kv")}
    rng = np.random.default_rng(seed)
    factors: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for block in range(0, key("block_count"), every):
        for leaf, (o, i) in LEAVES.items():
            a = rng.normal(0, sizes[i] ** -0.5, (SMOL_RANK, sizes[i])).astype(np.float32)
            b = rng.normal(0, 1.0, (sizes[o], SMOL_RANK)).astype(np.float32)
            factors[f"model.layers.{block}.{leaf}"] = (a, b)
    sample = np.concatenate([np.abs(SMOL_ALPHA / SMOL_RANK * (b @ a)).ravel()[::97]
                             for a, b in factors.values()])
    scale = np.float32(median / np.median(sample))
    tensors = {}
    for path, (a, b) in factors.items():
        tensors[peft_name(path, "A")], tensors[peft_name(path, "B")] = a, b * scale
    return write_adapter(out, tensors, rank=SMOL_RANK, alpha=SMOL_ALPHA, base_model=str(base))


def measured_delivered(base: Path, merged: Path, adapter: Path) -> dict[str, float]:
    """Weight-space delivered share read back from the two files (mean and min)."""
    import gguf
    from gguf import quants
    from rltray.trainer.export import gguf_adapter

    def values(path: Path) -> dict[str, Any]:
        return {t.name: t for t in gguf.GGUFReader(path).tensors}

    before, after = values(base), values(merged)
    arch = gguf_adapter.ArchInfo.from_gguf(gguf.GGUFReader(base))
    pairs, alpha, rank = gguf_adapter.read_pairs(adapter, arch)
    num = den = 0.0
    low = 1e9
    for pair in pairs:
        name = pair.gguf_name + ".weight"
        old, new = before[name], after[name]
        w0 = quants.dequantize(old.data, old.tensor_type).astype(np.float64).ravel()
        w1 = quants.dequantize(new.data, new.tensor_type).astype(np.float64).ravel()
        d = (alpha / rank * (pair.b.astype(np.float64) @ pair.a)).ravel()
        got, norm = float((w1 - w0) @ d), float(d @ d)
        num, den, low = num + got, den + norm, min(low, got / norm)
    return {"mean": round(num / den, 4), "min": round(low, 4)}


@contextmanager
def merge_as_before() -> Iterator[None]:
    """The merge as it was before issue 20: no own-grid rule, no delivered-share floor."""
    from gguf import GGML_QUANT_SIZES
    from gguf import GGMLQuantizationType as Q
    from rltray.trainer.export import merge

    def old_choose(out_type: str, base_type: Any, row: int) -> Any:
        quantizer = merge.ggml_quantizer() if out_type == "base" else None
        if out_type == "f16":
            wanted = Q.F16
        elif out_type == "base" and (base_type in merge._gguf_quantizable() or (
                quantizer is not None and quantizer.can(base_type))):
            wanted = base_type
        else:
            wanted = Q.Q8_0
        return wanted if row % GGML_QUANT_SIZES[wanted][0] == 0 else Q.F16

    saved = merge.choose_type, merge._finer
    merge.choose_type, merge._finer = old_choose, lambda _q: None
    try:
        yield
    finally:
        merge.choose_type, merge._finer = saved
