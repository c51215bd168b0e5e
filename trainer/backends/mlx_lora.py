"""LoRA layers for the MLX backend: wrapping, PEFT-compatible init, on/off switch.

Why our own small layer instead of ``mlx_lm.tuner.lora.LoRALinear``:

* the base model's log-probs ``f`` are computed with LoRA **switched off**
  (``enabled = False``), exactly and cheaply, without touching the weights;
* the scale is always ``alpha / rank`` (PEFT's convention, the one every
  consumer applies); mlx-lm's config key is a bare ``scale`` (its default 20 is
  not what PEFT would apply for the same files);
* the init is drawn from an explicit seed key so a job's seed makes it
  reproducible, independent of the global MLX RNG.

The parameter names and layouts are mlx-lm's (``<path>.lora_a`` (in, r),
``<path>.lora_b`` (r, out)), so :func:`rltray.trainer.adapters.mlx_to_peft`
converts them, and an mlx-lm user would recognise them. The init matches PEFT's
``kaiming_uniform_(a=sqrt(5))`` for ``lora_A``: uniform on ``±1/sqrt(in)``, and
``lora_B = 0`` so a fresh adapter leaves the model unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

#: Leaf names of the llama family's block linears; ``"all-linear"`` means "every
#: (quantized) linear layer inside ``model.layers``", which is these for llama,
#: qwen, mistral, gemma and friends.
LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoRALinear(nn.Module):
    """``y = linear(x) + scale · dropout(x) @ lora_a @ lora_b`` with a frozen ``linear``."""

    def __init__(
        self,
        linear: nn.Module,
        rank: int,
        scale: float,
        dropout: float = 0.0,
        *,
        key: mx.array | None = None,
    ) -> None:
        super().__init__()
        out_dims, in_dims = linear.weight.shape
        if isinstance(linear, nn.QuantizedLinear):
            in_dims = in_dims * 32 // linear.bits
        self.linear = linear
        self.in_dims = int(in_dims)
        self.out_dims = int(out_dims)
        self.rank = int(rank)
        self.scale = float(scale)
        self.enabled = True
        self.dropout = nn.Dropout(p=dropout) if dropout > 0 else None
        bound = 1.0 / math.sqrt(in_dims)
        self.lora_a = mx.random.uniform(
            low=-bound, high=bound, shape=(in_dims, rank), dtype=mx.float32, key=key
        )
        self.lora_b = mx.zeros((rank, out_dims), dtype=mx.float32)

    def __call__(self, x: mx.array) -> mx.array:
        y = self.linear(x)
        if not self.enabled:
            return y
        h = self.dropout(x) if self.dropout is not None else x
        z = (h.astype(mx.float32) @ self.lora_a) @ self.lora_b
        return y + (self.scale * z).astype(y.dtype)


def is_linear(module: Any) -> bool:
    """A layer LoRA can wrap: a plain or quantized linear (not an embedding, not MoE)."""
    return isinstance(module, (nn.Linear, nn.QuantizedLinear))


def block_linear_paths(model: nn.Module, targets: Iterable[str] | str) -> list[str]:
    """Dotted paths (model-relative, as in Hugging Face) of the block linears to wrap.

    Only modules under ``model.layers`` (the transformer blocks) are considered, so
    embeddings, ``lm_head`` and any vision/audio tower are never targeted.
    ``targets`` is ``"all-linear"`` or a list of leaf names (``q_proj`` …).
    MoE expert banks (mlx-lm ``SwitchLinear``) are not plain linears and are skipped.
    """
    wanted = None if targets == "all-linear" else set(targets)
    layers_prefix = _layers_prefix(model)
    paths: list[str] = []
    for path, module in model.named_modules():
        if not path.startswith(layers_prefix + "."):
            continue
        if not is_linear(module):
            continue
        if wanted is not None and path.rsplit(".", 1)[-1] not in wanted:
            continue
        paths.append(path)
    return sorted(paths, key=_natural_key)


def _layers_prefix(model: nn.Module) -> str:
    """Path of the block list: the one whose list object is ``model.layers``."""
    blocks = model.layers
    for path, module in model.named_modules():
        if isinstance(module, nn.Module) and path.endswith(".layers.0") and module is blocks[0]:
            return path[: -len(".0")]
    raise ValueError("could not find the transformer blocks (model.layers) in this model")


def _natural_key(path: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in path.split(".")]


def apply_lora(
    model: nn.Module,
    paths: list[str],
    *,
    rank: int,
    scale: float,
    dropout: float,
    seed: int,
) -> dict[str, LoRALinear]:
    """Freeze ``model`` and wrap each path in a :class:`LoRALinear`; only LoRA is trainable.

    Keys for ``lora_a`` come from ``seed`` split once per module in path order, so
    the same seed and model give the same init.
    """
    model.freeze()
    modules = dict(model.named_modules())
    keys = mx.random.split(mx.random.key(seed), max(len(paths), 1))
    wrapped: dict[str, LoRALinear] = {}
    for i, path in enumerate(paths):
        layer = LoRALinear(modules[path], rank, scale, dropout, key=keys[i])
        layer.freeze()
        layer.unfreeze(keys=["lora_a", "lora_b"], recurse=False)
        wrapped[path] = layer
    model.update_modules(tree_unflatten(list(wrapped.items())))
    mx.eval(model.parameters())
    return wrapped


@contextmanager
def lora_disabled(layers: Iterable[LoRALinear]) -> Iterator[None]:
    """Run the base model: every LoRA layer is bypassed inside the block."""
    layers = list(layers)
    before = [layer.enabled for layer in layers]
    for layer in layers:
        layer.enabled = False
    try:
        yield
    finally:
        for layer, was in zip(layers, before, strict=True):
            layer.enabled = was
