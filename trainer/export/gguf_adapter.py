"""PEFT adapter folder -> GGUF LoRA adapter that llama.cpp (and Ollama <= 0.33) loads.

What llama.cpp expects of an adapter file (its ``llama-adapter.cpp`` and
``convert_lora_to_gguf.py``): ``general.type = adapter``, ``adapter.type = lora``,
``adapter.lora.alpha`` (it applies ``alpha / rank``), the base's
``general.architecture``, and for each adapted weight ``<gguf name>.lora_a`` with
numpy shape ``(rank, in)`` and ``<gguf name>.lora_b`` with ``(out, rank)`` — PEFT's
own layouts, so no transpose. Names come from ``gguf.get_tensor_name_map``
(``model.layers.3.self_attn.q_proj`` -> ``blk.3.attn_q``).

The one trap: llama-family conversions to GGUF permute the rows of ``q_proj`` and
``k_proj`` (rotary pairs interleaved), and Transformers undoes it when loading a
GGUF. Our adapter is trained on Hugging Face layout, so ``lora_b`` of q/k gets the
same row permutation (``B`` carries the output rows of ``B @ A``); which
architectures and how is :mod:`..qk_rows`, derived from llama.cpp's converter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .ollama_model import ModelInfo

@dataclass(frozen=True)
class ArchInfo:
    """What naming and permuting need: architecture, block count, attention heads."""

    arch: str
    n_blocks: int
    n_head: int
    n_head_kv: int

    @classmethod
    def from_ollama(cls, info: ModelInfo) -> ArchInfo:
        heads = int(info.key("attention.head_count") or 0)
        return cls(
            info.architecture,
            int(info.key("block_count") or 0),
            heads,
            int(info.key("attention.head_count_kv") or heads),
        )

    @classmethod
    def from_gguf(cls, reader: Any) -> ArchInfo:
        def value(key: str, default: Any = 0) -> Any:
            fld = reader.fields.get(key)
            return fld.contents() if fld is not None else default

        arch = str(value("general.architecture", ""))
        heads = int(value(f"{arch}.attention.head_count"))
        return cls(
            arch,
            int(value(f"{arch}.block_count")),
            heads,
            int(value(f"{arch}.attention.head_count_kv", heads)),
        )


def tensor_name_map(arch: Any, n_blocks: int) -> Any:
    """``gguf.get_tensor_name_map`` without its side effect on every later map.

    Why: gguf (0.19 and before) merges an architecture's own block names (Arctic's)
    into the class-wide ``TensorNameMap.block_mappings_cfg``, so from then on, in the
    whole process, a Llama's ``post_attention_layernorm`` maps nowhere. Transformers'
    GGUF loader uses the same table: a base materialized after an Arctic export
    came out without its norms (CI met it when the tests ran in one process).
    """
    import gguf

    cls = gguf.TensorNameMap
    shared = cls.block_mappings_cfg
    cls.block_mappings_cfg = dict(shared)  # the constructor's update lands on this copy
    try:
        return gguf.get_tensor_name_map(arch, n_blocks)
    finally:
        cls.block_mappings_cfg = shared


def gguf_base_name(module_path: str, arch: ArchInfo) -> str:
    """``model.layers.3.self_attn.q_proj`` -> ``blk.3.attn_q`` (``ValueError`` if unknown)."""
    import gguf

    archs = {name: enum for enum, name in gguf.MODEL_ARCH_NAMES.items()}
    if arch.arch not in archs:
        raise ValueError(f"the gguf library does not know the architecture {arch.arch!r}")
    mapping = tensor_name_map(archs[arch.arch], arch.n_blocks)
    name = mapping.get_name(module_path + ".weight", try_suffixes=(".weight",))
    if name is None:
        raise ValueError(f"no llama.cpp tensor name for the layer {module_path}")
    return name.removesuffix(".weight")


def oriented_delta_factors(
    module_path: str, a: np.ndarray, b: np.ndarray, arch: ArchInfo
) -> tuple[np.ndarray, np.ndarray]:
    """``(A, B)`` in llama.cpp's row order for this layer (q/k ``B`` permuted where due,
    see :mod:`..qk_rows`); ``ValueError`` for a fused q/k/v layer we cannot place."""
    from rltray.trainer import qk_rows

    problem = qk_rows.fused_problem(arch.arch, module_path)
    if problem:
        raise ValueError(problem)
    return a, qk_rows.orient_rows(arch.arch, module_path, b, arch.n_head, arch.n_head_kv)


@dataclass(frozen=True)
class LoraPair:
    module_path: str
    gguf_name: str  # without ``.weight``
    a: np.ndarray  # (rank, in), llama.cpp order
    b: np.ndarray  # (out, rank), llama.cpp order


def read_pairs(adapter_dir: Path, arch: ArchInfo) -> tuple[list[LoraPair], float, int]:
    """Every LoRA pair of a PEFT folder in llama.cpp names and order; plus (alpha, rank)."""
    from ..adapters import load_adapter_tensors, parse_peft_name, read_adapter_config

    config = read_adapter_config(adapter_dir)
    rank = int(config["r"])
    alpha = float(config.get("lora_alpha") or rank)
    if config.get("use_rslora") or config.get("use_dora"):
        raise ValueError("rsLoRA and DoRA adapters cannot be exported to llama.cpp")
    tensors = load_adapter_tensors(adapter_dir)
    halves: dict[str, dict[str, np.ndarray]] = {}
    for name, value in tensors.items():
        parsed = parse_peft_name(name)
        if parsed is None:
            raise ValueError(f"{name} in {adapter_dir} is not a LoRA tensor")
        halves.setdefault(parsed[0], {})[parsed[1]] = value
    pairs = []
    for path in sorted(halves):
        a, b = halves[path].get("A"), halves[path].get("B")
        if a is None or b is None:
            raise ValueError(f"the adapter has only one half of the LoRA pair for {path}")
        a, b = oriented_delta_factors(path, a, b, arch)
        pairs.append(LoraPair(path, gguf_base_name(path, arch), a, b))
    return pairs, alpha, rank


def export(
    adapter_dir: Path | str,
    out: Path | str,
    *,
    arch_info: ArchInfo,
    dtype: str = "f32",
    scale: float = 1.0,
) -> Path:
    """Write the GGUF LoRA adapter for ``adapter_dir``; returns ``out``.

    ``dtype`` ``f32`` (default: the factors are small and exact) or ``f16``; ``scale``
    multiplies the delta (the amplified reference of :mod:`.fidelity`).
    Written to a temp name and renamed, so a half-written file is never left.
    """
    import gguf

    out = Path(out)
    pairs, alpha, _rank = read_pairs(Path(adapter_dir), arch_info)
    np_type = {"f32": np.float32, "f16": np.float16}[dtype]
    tmp = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(tmp, arch_info.arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    for pair in pairs:
        writer.add_tensor(pair.gguf_name + ".weight.lora_a", np.ascontiguousarray(pair.a, np_type))
        writer.add_tensor(pair.gguf_name + ".weight.lora_b",
                          np.ascontiguousarray(pair.b * np.float32(scale), np_type))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return out


def base_shapes(gguf_path: Path) -> dict[str, tuple[int, int]]:
    """GGUF weight name (without ``.weight``) -> (out, in) for every 2-D weight."""
    import gguf

    reader = gguf.GGUFReader(gguf_path)
    return {
        t.name.removesuffix(".weight"): (int(t.shape[1]), int(t.shape[0]))
        for t in reader.tensors
        if len(t.shape) == 2 and t.name.endswith(".weight")
    }


def fit_problems(
    adapter_dir: Path, arch: ArchInfo, shapes: Mapping[str, tuple[int, int]] | None,
    embedding_length: int | None = None,
) -> list[str]:
    """Every reason the adapter cannot apply to these base weights (empty: it fits)."""
    try:
        pairs, _, _ = read_pairs(adapter_dir, arch)
    except (ValueError, KeyError) as exc:
        return [str(exc)]
    problems = []
    for pair in pairs:
        got = (int(pair.b.shape[0]), int(pair.a.shape[1]))
        if shapes is not None:
            want = shapes.get(pair.gguf_name)
            if want is None:
                problems.append(f"the base has no tensor {pair.gguf_name}")
            elif want != got:
                problems.append(f"{pair.gguf_name} is {want[0]}x{want[1]} in the base, "
                                f"{got[0]}x{got[1]} in the adapter")
        elif (
            embedding_length
            and pair.gguf_name.endswith(("attn_q", "attn_k", "attn_v"))
            and got[1] != embedding_length
        ):
            problems.append(
                f"{pair.gguf_name} takes {got[1]} inputs, the base's hidden size is "
                f"{embedding_length}"
            )
    return problems


def check_fits(adapter_dir: Path, info: ModelInfo, gguf_path: Path | None) -> None:
    """Raise ``OllamaError`` listing every mismatch between the adapter and the Ollama model."""
    from .ollama_errors import OllamaError

    arch = ArchInfo.from_ollama(info)
    shapes = base_shapes(gguf_path) if gguf_path is not None else None
    problems = fit_problems(
        adapter_dir, arch, shapes, embedding_length=info.key("embedding_length")
    )
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5
                                           else "")
        raise OllamaError(
            f"The adapter was trained on weights that do not match the Ollama model "
            f"{info.name} ({shown}): train on that model's GGUF (set training.base_model to it) "
            "or choose the Ollama model the adapter was trained for."
        )
