"""A llama-family GGUF as a Hugging Face folder, converted with gguf + numpy: no torch.

Why: the MLX trainer environment (Apple Silicon, ``.[mlx]``) has no torch, and
Transformers refuses to read a GGUF without it, so a GGUF base (the model Ollama
serves) failed every round on a Mac. The weights need no torch at all: each
tensor is dequantized by the ``gguf`` library, the q/k rows that llama.cpp's
converter permuted are put back (:mod:`.qk_rows` knows which
architectures), the llama.cpp name becomes the Hugging Face one, and the
result is written into safetensors shards one tensor at a time.

What comes out is what the torch path (``gguf_base._convert_streamed``) writes
for the same file: the same float16 (or bfloat16) weights bit for bit, a config
with the same fields, and the tokenizer Transformers builds from the GGUF's
metadata. Transformers is in the MLX environment (mlx-lm needs it for its
tokenizers) and its GGUF tokenizer builder needs no torch; only its GGUF
*reader* does, so the metadata is read here with the ``gguf`` library and handed
to that builder.

Not covered (the torch path is used where torch exists): mixture-of-experts and
other architectures; a Llama 3.1 ``rope_freqs`` tensor is dropped, as the torch
path drops it.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: GGUF architecture -> (Hugging Face model_type, model class).
ARCHITECTURES: dict[str, tuple[str, str]] = {
    "llama": ("llama", "LlamaForCausalLM"),  # Llama, Mistral, SmolLM/SmolLM2, TinyLlama, ...
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
}

#: Config keys a model type's Transformers config does not have (Qwen2 always has
#: q/k/v biases and derives its head size).
_NOT_IN_CONFIG = {"qwen2": {"head_dim", "attention_bias", "mlp_bias"}, "qwen3": {"mlp_bias"}}

_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK_NAME = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")
#: GGUF tensors no Hugging Face weight holds (llama 3.1's RoPE frequency factors).
SKIPPED = frozenset({"rope_freqs.weight"})

#: llama.cpp tokenizer keys -> the names Transformers' GGUF tokenizer builder reads.
_TOKENIZER_KEYS = {
    "ggml.model": "tokenizer_type",
    "ggml.pre": "pre_tokenizer_type",
    "ggml.tokens": "tokens",
    "ggml.scores": "scores",
    "ggml.token_type": "token_type",
    "ggml.merges": "merges",
    "ggml.precompiled_charsmap": "precompiled_charsmap",
    "ggml.bos_token_id": "bos_token_id",
    "ggml.eos_token_id": "eos_token_id",
    "ggml.unknown_token_id": "unk_token_id",
    "ggml.padding_token_id": "pad_token_id",
    "ggml.add_space_prefix": "add_prefix_space",
}
_SPECIAL = {"bos_token": "bos", "eos_token": "eos", "unk_token": "unknown", "pad_token": "padding"}


class ConversionError(ValueError):
    """The GGUF cannot be converted here; the message is one sentence."""


def hf_name(gguf_name: str) -> str | None:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``; None if unknown."""
    stem, dot, kind = gguf_name.rpartition(".")
    if dot and stem in _TOP and kind == "weight":
        return f"{_TOP[stem]}.weight"
    match = _BLOCK_NAME.match(gguf_name)
    if match and match.group(2) in _BLOCK:
        block, leaf, kind = match.groups()
        return f"model.layers.{block}.{_BLOCK[leaf]}.{kind}"
    return None


def _field(reader: Any, key: str, default: Any = None) -> Any:
    fld = reader.fields.get(key)
    return fld.contents() if fld is not None else default


def hf_config(reader: Any, dtype: str) -> dict[str, Any]:
    """config.json for the GGUF in ``reader`` (the keys Transformers' GGUF loader maps)."""
    arch = str(_field(reader, "general.architecture", ""))
    if arch not in ARCHITECTURES:
        raise ConversionError(f"architecture {arch!r} is not one rltray converts without torch")
    model_type, cls = ARCHITECTURES[arch]

    def key(name: str, default: Any = None) -> Any:
        return _field(reader, f"{arch}.{name}", default)

    names = {t.name for t in reader.tensors}
    heads = int(key("attention.head_count"))
    hidden = int(key("embedding_length"))
    tokens = _field(reader, "tokenizer.ggml.tokens") or []
    config: dict[str, Any] = {
        "architectures": [cls],
        "model_type": model_type,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(key("attention.head_count_kv", heads)),
        "head_dim": int(key("attention.key_length", hidden // heads)),
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon", 1e-6)),
        "max_position_embeddings": int(key("context_length", 2048)),
        "rope_theta": float(key("rope.freq_base", 10000.0)),
        "vocab_size": int(key("vocab_size", len(tokens))),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "mlp_bias": False,
        "dtype": dtype,
    }
    scaling = str(key("rope.scaling.type", "none"))
    if scaling in ("linear", "yarn"):
        config["rope_scaling"] = {"rope_type": scaling, "factor": float(key("rope.scaling.factor"))}
        original = key("rope.scaling.original_context_length")
        if original is not None:
            config["rope_scaling"]["original_max_position_embeddings"] = int(original)
    elif scaling != "none":
        raise ConversionError(f"RoPE scaling {scaling!r} is not one rltray converts without torch")
    for name, short in _SPECIAL.items():
        value = _field(reader, f"tokenizer.ggml.{short}_token_id")
        if value is not None:
            config[f"{name}_id"] = int(value)
    for key_name in _NOT_IN_CONFIG.get(model_type, ()):
        del config[key_name]
    return config


def expected_weights(config: dict[str, Any]) -> set[str]:
    """Every weight the Hugging Face model of ``config`` loads (a GGUF must hold them all)."""
    block = ["input_layernorm", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
             "mlp.down_proj", *(f"self_attn.{p}_proj" for p in "qkvo")]
    if config["model_type"] == "qwen3":
        block += ["self_attn.q_norm", "self_attn.k_norm"]
    names = {f"model.layers.{i}.{leaf}.weight" for i in range(config["num_hidden_layers"])
             for leaf in block}
    if config["model_type"] == "qwen2" or config.get("attention_bias"):
        names |= {f"model.layers.{i}.self_attn.{p}_proj.bias"
                  for i in range(config["num_hidden_layers"]) for p in "qkv"}
    names |= {"model.embed_tokens.weight", "model.norm.weight"}
    if not config["tie_word_embeddings"]:
        names.add("lm_head.weight")
    return names


def unpermuted(arch: str, gguf_name: str, values: np.ndarray, config: dict[str, Any]) -> np.ndarray:
    """``values`` with llama.cpp's q/k row permutation undone where its converter applied it."""
    from rltray.trainer import qk_rows

    match = _BLOCK_NAME.match(gguf_name)
    leaf = {"attn_q": "q_proj", "attn_k": "k_proj"}.get(match.group(2)) if match else None
    if leaf is None:
        return values
    groups = qk_rows.qk_groups(arch, leaf, config["num_attention_heads"],
                               config["num_key_value_heads"])
    return values if groups is None else qk_rows.unpermute_rows(values, groups)


def stored(values: np.ndarray, dtype: str) -> tuple[str, np.ndarray]:
    """``values`` as safetensors dtype code and bytes: float16, or bfloat16 where float16
    would turn a finite value into inf (as ``gguf_base._stored`` does with torch)."""
    if dtype == "float16":
        with np.errstate(over="ignore"):
            half = values.astype(np.float16)
        if np.isfinite(half).all() or not np.isfinite(values).all():
            return "F16", half
    return "BF16", bfloat16_bits(values)


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even like torch."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(values)
    out = rounded.astype(np.uint16)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def write_safetensors(path: Path, tensors: dict[str, tuple[str, np.ndarray, tuple[int, ...]]],
                      metadata: dict[str, str]) -> None:
    """One safetensors file (the format is an 8-byte length, a JSON header, the bytes).

    Written here so no torch (and no particular safetensors version's bfloat16
    API) is needed; every reader, torch's, numpy's and MLX's, loads it.
    """
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name, (code, data, shape) in tensors.items():
        header[name] = {"dtype": code, "shape": list(shape),
                        "data_offsets": [offset, offset + data.nbytes]}
        offset += data.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for _code, data, _shape in tensors.values():
            fh.write(np.ascontiguousarray(data).tobytes())


def convert_weights(reader: Any, out: Path, config: dict[str, Any], shard_bytes: int) -> None:
    """Every tensor dequantized, un-permuted, renamed and written, one shard at a time."""
    import gguf

    arch = str(_field(reader, "general.architecture"))
    wanted = expected_weights(config)
    shard: dict[str, tuple[str, np.ndarray, tuple[int, ...]]] = {}
    size = 0
    weight_map: dict[str, str] = {}
    files: list[str] = []

    def flush() -> None:
        nonlocal shard, size
        if shard:
            name = f"model-{len(files) + 1:05d}.safetensors"
            write_safetensors(out / name, shard, {"format": "pt"})
            files.append(name)
            weight_map.update({k: name for k in shard})
            shard, size = {}, 0

    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        if name is None:
            if tensor.name in SKIPPED:
                continue
            raise ConversionError(f"the GGUF tensor {tensor.name} has no Hugging Face "
                                  f"counterpart in a {arch} model rltray converts without torch")
        values = gguf.dequantize(tensor.data, tensor.tensor_type)
        values = unpermuted(arch, tensor.name, values, config)
        code, data = stored(values, config["dtype"])
        shard[name] = (code, data, values.shape)
        size += data.nbytes
        if size >= shard_bytes:
            flush()
    flush()
    missing = sorted(wanted - set(weight_map))
    if missing:  # a model with a weight left at a fresh initialisation is another model
        for name in files:
            (out / name).unlink()
        raise ConversionError(
            f"the GGUF holds no weights for {len(missing)} tensors "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
    if len(files) == 1:
        (out / files[0]).rename(out / "model.safetensors")
    else:
        total = sum((out / n).stat().st_size for n in files)
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def tokenizer_parts(reader: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(architecture, tokenizer_dict, tokenizer_config)`` as Transformers' own GGUF
    reader returns them (``get_gguf_tokenizer``), read with the gguf library."""
    arch = str(_field(reader, "general.architecture"))
    tokenizer = {name: _field(reader, f"tokenizer.{key}") for key, name in _TOKENIZER_KEYS.items()
                 if f"tokenizer.{key}" in reader.fields}
    settings: dict[str, Any] = {}
    for key, name in (("chat_template", "chat_template"), ("ggml.add_bos_token", "add_bos_token"),
                      ("ggml.add_eos_token", "add_eos_token")):
        if f"tokenizer.{key}" in reader.fields:
            settings[name] = _field(reader, f"tokenizer.{key}")
    if tokenizer.get("tokenizer_type") == "llama":
        settings.setdefault("add_bos_token", True)  # llama.cpp's default for sentencepiece
    for name, short in _SPECIAL.items():
        token_id = _field(reader, f"tokenizer.ggml.{short}_token_id")
        settings[name] = tokenizer["tokens"][int(token_id)] if token_id is not None else None
    return arch, tokenizer, settings


def _gguf_tokenizer_builder() -> Callable[[str, dict[str, Any]], tuple[Any, dict[str, Any]]]:
    try:  # Transformers >= 5
        from transformers.integrations.gguf import convert_gguf_tokenizer
    except ImportError:  # 4.x
        from transformers.integrations.ggml import convert_gguf_tokenizer
    return convert_gguf_tokenizer  # type: ignore[no-any-return]


def write_tokenizer(reader: Any, out: Path) -> None:
    """tokenizer.json, tokenizer_config.json and the chat template, built by Transformers."""
    from transformers import PreTrainedTokenizerFast

    arch, tokenizer_dict, settings = tokenizer_parts(reader)
    try:
        backend, extra = _gguf_tokenizer_builder()(arch, tokenizer_dict)
    except (ValueError, KeyError) as exc:
        raise ConversionError(f"Transformers cannot build its tokenizer: {exc}") from exc
    PreTrainedTokenizerFast(tokenizer_object=backend, **settings, **extra).save_pretrained(out)


def convert(path: Path, out: Path, dtype: str, shard_bytes: int) -> None:
    """Weights, config, generation config and tokenizer of GGUF ``path`` into folder ``out``.

    ``dtype`` is ``float16`` or ``bfloat16`` (``gguf_base`` decides); raises
    :class:`ConversionError` with one sentence for a file this module cannot convert.
    """
    import gguf

    reader = gguf.GGUFReader(path)
    config = hf_config(reader, dtype)
    convert_weights(reader, out, config, shard_bytes)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n",
                                     encoding="utf-8")
    generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")
                  if k in config}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n",
                                                encoding="utf-8")
    del reader  # the vocabulary is read again below: never both copies at once
    write_tokenizer(gguf.GGUFReader(path), out)
