"""LoRA tensor names and layouts: PEFT <-> mlx-lm, and the alpha <-> scale rule.

Why a module of its own: both backends and the exporters must agree on one naming
and one scale convention, and these are pure functions (numpy only) that the MLX
backend uses without importing the folder reader/writer. :mod:`.adapters`
re-exports everything here, so ``adapters.peft_name`` etc. keep working.

PEFT: ``base_model.model.<module path>.lora_A.weight`` (r, in) and ``.lora_B.weight``
(out, r). mlx-lm: ``<module path>.lora_a`` (in, r) and ``.lora_b`` (r, out), plus a
``scale`` (= ``lora_alpha / r``) in its config instead of ``lora_alpha``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import numpy as np

PEFT_PREFIX = "base_model.model."

_PEFT_RE = re.compile(r"^base_model\.model\.(?P<path>.+)\.lora_(?P<kind>[AB])\.weight$")
_MLX_RE = re.compile(r"^(?P<path>.+)\.lora_(?P<kind>[ab])$")

# --------------------------------------------------------------------------------------
# names
# --------------------------------------------------------------------------------------


def peft_name(module_path: str, which: str) -> str:
    """PEFT tensor name for ``module_path``'s LoRA ``"A"`` (r, in) or ``"B"`` (out, r)."""
    if which not in ("A", "B"):
        raise ValueError(f"which must be 'A' or 'B', got {which!r}")
    return f"{PEFT_PREFIX}{module_path}.lora_{which}.weight"


def parse_peft_name(name: str) -> tuple[str, str] | None:
    """``(module_path, "A"|"B")`` for a PEFT LoRA tensor name, ``None`` if it is not one."""
    m = _PEFT_RE.match(name)
    if not m:
        return None
    return m.group("path"), m.group("kind")


def mlx_name(module_path: str, which: str) -> str:
    """mlx-lm's parameter name for a module's LoRA (``<path>.lora_a`` / ``.lora_b``)."""
    if which not in ("A", "B"):
        raise ValueError(f"which must be 'A' or 'B', got {which!r}")
    return f"{module_path}.lora_{which.lower()}"


def parse_mlx_name(name: str) -> tuple[str, str] | None:
    """``(module_path, "A"|"B")`` for an mlx-lm LoRA parameter name, else ``None``."""
    m = _MLX_RE.match(name)
    if not m:
        return None
    return m.group("path"), m.group("kind").upper()


def scale_from_alpha(alpha: float, rank: int) -> float:
    """The factor the model applies to ``B @ A``: ``alpha / rank`` (PEFT, non-rsLoRA)."""
    return float(alpha) / float(rank)


def alpha_from_scale(scale: float, rank: int) -> float:
    """Inverse of :func:`scale_from_alpha`, for reading mlx-lm's ``scale``."""
    return float(scale) * float(rank)


def peft_to_mlx(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """PEFT names/layout -> mlx-lm names/layout (``lora_a`` (in, r), ``lora_b`` (r, out))."""
    out: dict[str, np.ndarray] = {}
    for name, value in tensors.items():
        parsed = parse_peft_name(name)
        if parsed is None:
            raise ValueError(f"not a PEFT LoRA tensor name: {name}")
        path, which = parsed
        out[mlx_name(path, which)] = np.ascontiguousarray(np.asarray(value).T)
    return out


def mlx_to_peft(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """mlx-lm names/layout -> PEFT names/layout (``lora_A`` (r, in), ``lora_B`` (out, r))."""
    out: dict[str, np.ndarray] = {}
    for name, value in tensors.items():
        parsed = parse_mlx_name(name)
        if parsed is None:
            raise ValueError(f"not an mlx-lm LoRA parameter name: {name}")
        path, which = parsed
        out[peft_name(path, which)] = np.ascontiguousarray(np.asarray(value).T)
    return out


def target_leaf_names(module_paths: Iterable[str]) -> list[str]:
    """Sorted distinct leaf names (``q_proj`` …) — what ``target_modules`` lists."""
    return sorted({p.rsplit(".", 1)[-1] for p in module_paths})
