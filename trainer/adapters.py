"""Adapter folders: the one on-disk format both backends write and read.

Why this module exists: an adapter must load in PEFT, mlx-lm, llama.cpp and
Ollama whichever backend trained it, and must never be half-written. So:

* The folder is **PEFT layout**: ``adapter_config.json`` (with ``r`` *and*
  ``lora_alpha``, so every consumer applies the same ``alpha / r`` scale) and
  ``adapter_model.safetensors`` with PEFT tensor names, plus our ``rltray.json``
  (base model id + revision, parent, metrics, data hash, trainer version).
* It is written into a temp folder next to ``out`` — config first, then tensors,
  then metadata — and renamed into place only when complete.
* :func:`validate_adapter` reports **every** problem at once (missing files,
  non-finite tensors, missing scale, shape mismatches, unknown names), so a user
  fixes a bad folder in one go instead of one error per attempt.
* MLX stores LoRA transposed (``lora_a`` (in, r), ``lora_b`` (r, out)) under the
  module path and a ``scale`` instead of ``lora_alpha``; the helpers at the end
  convert both ways so the MLX backend never invents its own names.

PEFT names: ``base_model.model.<module path>.lora_A.weight`` (r, in) and
``base_model.model.<module path>.lora_B.weight`` (out, r), where ``<module path>``
is the module's dotted path in the Hugging Face model (``model.layers.0.self_attn.q_proj``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import secrets
import shutil
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

# Names and layouts live in adapter_names; re-exported so callers need one import.
from rltray.trainer.adapter_names import (
    PEFT_PREFIX as PEFT_PREFIX,
)
from rltray.trainer.adapter_names import alpha_from_scale as alpha_from_scale
from rltray.trainer.adapter_names import mlx_name as mlx_name
from rltray.trainer.adapter_names import mlx_to_peft as mlx_to_peft
from rltray.trainer.adapter_names import parse_mlx_name as parse_mlx_name
from rltray.trainer.adapter_names import parse_peft_name as parse_peft_name
from rltray.trainer.adapter_names import peft_name as peft_name
from rltray.trainer.adapter_names import peft_to_mlx as peft_to_mlx
from rltray.trainer.adapter_names import scale_from_alpha as scale_from_alpha
from rltray.trainer.adapter_names import target_leaf_names as target_leaf_names

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
META_FILE = "rltray.json"

#: Module leaf names of the llama family's transformer blocks (attention + MLP), used
#: to derive expected shapes from a config.json when no loaded model is at hand.
_LLAMA_LIKE = {
    "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo", "olmo2",
    "granite", "smollm3",
}  # fmt: skip


class AdapterError(ValueError):
    """An adapter folder cannot be used; the message lists every problem found."""

    def __init__(self, folder: Path | str, problems: list[str]) -> None:
        self.folder = Path(folder)
        self.problems = list(problems)
        super().__init__(f"adapter {self.folder} is not usable: " + "; ".join(self.problems))


# --------------------------------------------------------------------------------------
# data hash + metadata
# --------------------------------------------------------------------------------------


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot hash {type(obj).__name__}")


def examples_hash(examples: Iterable[Any]) -> str:
    """sha256 hex of the training examples, order-sensitive and layout-independent.

    Each example (dataclass, pydantic model or dict) is serialised as canonical JSON
    (sorted keys) on its own line, so the same data gives the same hash whatever
    file formatting it came from; stored in ``rltray.json`` to tell what a version saw.
    """
    h = hashlib.sha256()
    for ex in examples:
        line = json.dumps(ex, sort_keys=True, ensure_ascii=False, default=_jsonable)
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def trainer_version() -> str:
    """The installed rltray version (``"unknown"`` for a bare source tree)."""
    try:
        from importlib.metadata import version

        return version("rltray")
    except Exception:
        return "unknown"


# --------------------------------------------------------------------------------------
# write
# --------------------------------------------------------------------------------------


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def adapter_config(
    *,
    rank: int,
    alpha: float,
    target_modules: list[str],
    base_model: str,
    dropout: float = 0.0,
    revision: str | None = None,
) -> dict[str, Any]:
    """The ``adapter_config.json`` PEFT reads (LoraConfig fields; inference mode)."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": int(rank),
        "lora_alpha": float(alpha),
        "target_modules": sorted(target_modules),
        "lora_dropout": float(dropout),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "base_model_name_or_path": base_model,
        "revision": revision,
        "inference_mode": True,
        "modules_to_save": None,
    }


def write_adapter(
    out: Path | str,
    tensors: Mapping[str, np.ndarray],
    *,
    rank: int,
    alpha: float,
    base_model: str,
    revision: str | None = None,
    dropout: float = 0.0,
    parent: str | None = None,
    metrics: Mapping[str, Any] | None = None,
    data_hash: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write a complete PEFT-layout adapter folder at ``out``, atomically.

    ``tensors`` maps PEFT names to arrays (stored as float32). Files go into a
    temp folder next to ``out`` (config first, tensors, then ``rltray.json``) which
    is renamed to ``out`` only when everything is on disk; on any failure the temp
    folder is removed and ``out`` does not exist. An existing non-empty ``out`` is
    refused (versions are never overwritten). Returns ``out``.
    """
    from safetensors.numpy import save_file

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"adapter folder {out} already exists")
    paths = []
    for name in tensors:
        parsed = parse_peft_name(name)
        if parsed is None:
            raise ValueError(f"not a PEFT LoRA tensor name: {name}")
        paths.append(parsed[0])
    if not paths:
        raise ValueError("an adapter needs at least one LoRA tensor")

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir(mode=0o700)
    try:
        config = adapter_config(
            rank=rank,
            alpha=alpha,
            target_modules=target_leaf_names(paths),
            base_model=base_model,
            dropout=dropout,
            revision=revision,
        )
        _write_private(tmp / CONFIG_FILE, (json.dumps(config, indent=2) + "\n").encode())
        arrays = {
            k: np.ascontiguousarray(np.asarray(v, dtype=np.float32)) for k, v in tensors.items()
        }
        save_file(arrays, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        os.chmod(tmp / WEIGHTS_FILE, 0o600)
        meta = {
            "v": 1,
            "base_model": base_model,
            "revision": revision,
            "parent": parent,
            "rank": int(rank),
            "lora_alpha": float(alpha),
            "metrics": dict(metrics or {}),
            "data_sha256": data_hash,
            "trainer_version": trainer_version(),
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        meta.update(extra or {})
        _write_private(tmp / META_FILE, (json.dumps(meta, indent=2) + "\n").encode())
        if out.exists():
            out.rmdir()  # empty placeholder folder (checked above)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    with contextlib.suppress(OSError):  # make the rename durable where the OS allows it
        dfd = os.open(out.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return out


# --------------------------------------------------------------------------------------
# read + validate
# --------------------------------------------------------------------------------------


def read_adapter_config(folder: Path | str) -> dict[str, Any]:
    """``adapter_config.json`` as a dict (raises ``AdapterError`` if unreadable)."""
    path = Path(folder) / CONFIG_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AdapterError(folder, [f"{CONFIG_FILE} unreadable: {exc}"]) from exc
    if not isinstance(data, dict):
        raise AdapterError(folder, [f"{CONFIG_FILE} is not a JSON object"])
    return data


def read_metadata(folder: Path | str) -> dict[str, Any]:
    """``rltray.json`` as a dict; an empty dict for a foreign PEFT folder without one."""
    path = Path(folder) / META_FILE
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def load_adapter_tensors(folder: Path | str) -> dict[str, np.ndarray]:
    """PEFT name -> float32 numpy array from ``adapter_model.safetensors``."""
    from safetensors.numpy import load_file

    path = Path(folder) / WEIGHTS_FILE
    try:
        raw = load_file(str(path))
    except Exception as exc:
        raise AdapterError(folder, [f"{WEIGHTS_FILE} unreadable: {exc}"]) from exc
    return {k: np.asarray(v, dtype=np.float32) for k, v in raw.items()}


def module_shapes_from_config(config: Mapping[str, Any]) -> dict[str, tuple[int, int]] | None:
    """Expected ``(out, in)`` of each block linear layer for a llama-family config.json.

    Returns ``None`` for other architectures (the caller then has no shapes to check
    against; a backend with the model loaded passes exact shapes instead).
    """
    if config.get("model_type") not in _LLAMA_LIKE:
        return None
    try:
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        kv = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
        inter = int(config["intermediate_size"])
    except (KeyError, TypeError, ValueError):
        return None
    shapes: dict[str, tuple[int, int]] = {}
    for i in range(layers):
        p = f"model.layers.{i}"
        shapes[f"{p}.self_attn.q_proj"] = (heads * head_dim, hidden)
        shapes[f"{p}.self_attn.k_proj"] = (kv * head_dim, hidden)
        shapes[f"{p}.self_attn.v_proj"] = (kv * head_dim, hidden)
        shapes[f"{p}.self_attn.o_proj"] = (hidden, heads * head_dim)
        shapes[f"{p}.mlp.gate_proj"] = (inter, hidden)
        shapes[f"{p}.mlp.up_proj"] = (inter, hidden)
        shapes[f"{p}.mlp.down_proj"] = (hidden, inter)
    return shapes


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _positive_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def validate_adapter(
    folder: Path | str,
    base_config: Mapping[str, Any] | None = None,
    *,
    base_shapes: Mapping[str, tuple[int, int]] | None = None,
    require_metadata: bool = True,
) -> list[str]:
    """Every problem with an adapter folder, as a list of short sentences (empty = fine).

    Checks: the three files exist (``rltray.json`` only with ``require_metadata``);
    the config is PEFT LoRA with positive ``r`` and ``lora_alpha`` (the scale); every
    tensor name is a PEFT LoRA name; every tensor is finite; each module has both A
    and B with ``A`` (r, in), ``B`` (out, r) and ``r`` matching the config; and, when
    the base's module shapes are known (``base_shapes`` from a loaded model, or
    derived from ``base_config`` = the base's config.json), every module exists in
    the base with matching in/out sizes. Nothing is raised for a bad folder: the
    caller decides (publish gate rejects, parent loading raises ``AdapterError``).
    """
    folder = Path(folder)
    problems: list[str] = []
    if not folder.is_dir():
        return [f"adapter folder {folder} does not exist"]
    required = [CONFIG_FILE, WEIGHTS_FILE] + ([META_FILE] if require_metadata else [])
    for name in required:
        if not (folder / name).is_file():
            problems.append(f"{name} is missing")

    rank: int | None = None
    rank_pattern: Mapping[str, Any] = {}
    if (folder / CONFIG_FILE).is_file():
        try:
            cfg = read_adapter_config(folder)
        except AdapterError as exc:
            problems.extend(exc.problems)
            cfg = {}
        if cfg:
            if str(cfg.get("peft_type", "")).upper() != "LORA":
                problems.append(f"peft_type is {cfg.get('peft_type')!r}, expected 'LORA'")
            if _positive_int(cfg.get("r")):
                rank = cfg["r"]
            else:
                problems.append(f"r is missing or not a positive integer ({cfg.get('r')!r})")
            if not _positive_number(cfg.get("lora_alpha")):
                problems.append(
                    f"lora_alpha (the scale) is missing or not positive ({cfg.get('lora_alpha')!r})"
                )
            if cfg.get("use_dora"):
                problems.append("DoRA adapters are not supported")
            if cfg.get("fan_in_fan_out"):
                problems.append("fan_in_fan_out adapters are not supported")
            rank_pattern = cfg.get("rank_pattern") or {}

    if base_shapes is None and base_config is not None:
        base_shapes = module_shapes_from_config(base_config)

    if (folder / WEIGHTS_FILE).is_file():
        try:
            tensors = load_adapter_tensors(folder)
        except AdapterError as exc:
            problems.extend(exc.problems)
            tensors = {}
        problems.extend(_tensor_problems(tensors, rank, rank_pattern, base_shapes))
        if not tensors and (folder / WEIGHTS_FILE).is_file() and not problems:
            problems.append(f"{WEIGHTS_FILE} holds no tensors")
    if (folder / META_FILE).is_file():
        try:
            meta = read_metadata(folder)
            if not isinstance(meta, dict):
                problems.append(f"{META_FILE} is not a JSON object")
        except (OSError, ValueError) as exc:
            problems.append(f"{META_FILE} unreadable: {exc}")
    return problems


def _module_rank(path: str, rank: int | None, rank_pattern: Mapping[str, Any]) -> int | None:
    for pattern, r in rank_pattern.items():
        if path == pattern or path.endswith("." + pattern):
            return int(r)
    return rank


def _tensor_problems(
    tensors: Mapping[str, np.ndarray],
    rank: int | None,
    rank_pattern: Mapping[str, Any],
    base_shapes: Mapping[str, tuple[int, int]] | None,
) -> list[str]:
    problems: list[str] = []
    modules: dict[str, dict[str, np.ndarray]] = {}
    for name, value in sorted(tensors.items()):
        parsed = parse_peft_name(name)
        if parsed is None:
            problems.append(f"unknown tensor name {name}")
            continue
        path, which = parsed
        modules.setdefault(path, {})[which] = value
        if not np.all(np.isfinite(value)):
            bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
            problems.append(f"{name} has {bad} non-finite values (NaN or inf)")
        if value.ndim != 2:
            problems.append(f"{name} is {value.ndim}-D, expected 2-D")
    for path, pair in sorted(modules.items()):
        a, b = pair.get("A"), pair.get("B")
        if a is None or b is None:
            missing = "lora_A" if a is None else "lora_B"
            problems.append(f"{path} has no {missing}")
            continue
        if a.ndim != 2 or b.ndim != 2:
            continue
        r_mod = _module_rank(path, rank, rank_pattern)
        if a.shape[0] != b.shape[1]:
            problems.append(f"{path}: lora_A {a.shape} and lora_B {b.shape} disagree on the rank")
        elif r_mod is not None and a.shape[0] != r_mod:
            problems.append(f"{path}: rank {a.shape[0]} but the config says r={r_mod}")
        if base_shapes is not None:
            if path not in base_shapes:
                problems.append(f"{path} is not a linear layer of the base model")
            else:
                out_f, in_f = base_shapes[path]
                if a.shape[1] != in_f or b.shape[0] != out_f:
                    problems.append(
                        f"{path}: adapter maps {a.shape[1]}->{b.shape[0]} but the base layer "
                        f"maps {in_f}->{out_f}"
                    )
    return problems
