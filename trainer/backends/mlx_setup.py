"""Plain helpers of the MLX backend: log-prob gathering, the head split, padding and
seed rules, the warm-up formula. Split out of :mod:`.mlx` (as :mod:`.torch_setup`
is of the torch backend) so the backend file holds the training door only.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def lr_at(step: int, lr: float, warmup_steps: int) -> float:
    """Learning rate for 0-based optimizer step ``step``: linear warm-up, then constant.

    Step ``k < warmup_steps`` uses ``lr · (k + 1) / warmup_steps`` (never 0, so the
    first step moves), later steps ``lr``.
    """
    if warmup_steps > 0 and step < warmup_steps:
        return float(lr) * (step + 1) / warmup_steps
    return float(lr)

def no_float16(model: Any) -> bool:
    """Cast the model's float16 arrays to bfloat16 in place; True when there were any.

    Why: MLX computes in the type the weights are stored in, and float16 overflows
    at 65504. Models whose activations go beyond it (the Gemma family) give inf,
    then NaN log-probs, and every round is rejected. A GGUF base materialized by an
    older rltray, or a float16 Hugging Face folder, would train so. bfloat16 keeps
    float32's range at the same 2 bytes per parameter, and is what the torch backend
    computes in on GPUs. Quantized layers keep their integer blocks (only their
    float16 scales and biases change).
    """
    import mlx.core as mx

    found = False

    def cast(x: Any) -> Any:
        nonlocal found
        if x.dtype == mx.float16:
            found = True
            return x.astype(mx.bfloat16)
        return x

    model.apply(cast)
    return found


def gather_logprobs(logits: Any, input_ids: Any, shifted: bool = False) -> Any:
    """(B, L-1) fp32 log-softmax of ``logits[:, :-1]`` at the next tokens.

    ``shifted``: ``logits`` are already those of the positions that predict
    ``input_ids[:, 1:]`` (one fewer column than ``input_ids``).
    """
    import mlx.core as mx

    z = (logits if shifted else logits[:, :-1, :]).astype(mx.float32)
    picked = mx.take_along_axis(z, input_ids[:, 1:, None], axis=-1).squeeze(-1)
    return picked - mx.logsumexp(z, axis=-1)


def body_and_head(model: Any, vocab: int) -> tuple[Any, Any] | None:
    """``(body, head)`` when this model's logits are exactly ``head(body(ids))``, else None.

    mlx-lm models compute ``model.model(ids)`` then ``lm_head`` or the tied
    embedding's ``as_linear``; some add softcapping or scaling in between, so the
    split is checked once on a few tokens against the model's own output and used
    only when it matches. Why: a training step then asks for no logits of the prompt.
    """
    import mlx.core as mx

    body = getattr(model, "model", None)
    if body is None or not callable(body):
        return None
    heads = [getattr(model, "lm_head", None)]
    embed = getattr(body, "embed_tokens", None)
    heads.append(getattr(embed, "as_linear", None))
    ids = mx.array([[i % max(vocab, 1) for i in range(1, 9)]], dtype=mx.int32)
    try:
        want = model(ids)
        hidden = body(ids)
        for head in heads:
            if head is None:
                continue
            got = head(hidden)
            if got.shape == want.shape and bool(mx.allclose(got, want, rtol=1e-5, atol=1e-5)):
                return body, head
    except Exception:  # any surprise: the plain whole-model path is always right
        return None
    return None


def check_right_padded(batch: Any) -> None:
    """Refuse batches this backend would mis-handle (left padding, packing)."""
    attn = np.asarray(batch.attention_mask)
    lengths = attn.sum(axis=1)
    width = attn.shape[1]
    expected = (np.arange(width)[None, :] < lengths[:, None]).astype(attn.dtype)
    if not np.array_equal(attn, expected):
        raise ValueError("the MLX backend needs right-padded batches (no left padding, no gaps)")
    pos = np.asarray(batch.position_ids)
    arange = np.broadcast_to(np.arange(width), pos.shape)
    if not np.array_equal(np.where(expected > 0, pos, 0), np.where(expected > 0, arange, 0)):
        raise ValueError("the MLX backend needs position_ids 0..len-1 per row (no packing)")


def paths_key(path: str) -> list[Any]:
    """Sort key that orders ``layers.10`` after ``layers.9``."""
    return [int(p) if p.isdigit() else p for p in path.split(".")]


def in_dims(module: Any) -> int:
    import mlx.nn as nn

    width = int(module.weight.shape[1])
    if isinstance(module, nn.QuantizedLinear):
        width = width * 32 // module.bits
    return width


def mix_seed(seed: int, counter: int) -> int:
    """A 63-bit seed from (job seed, counter), stable across runs and platforms."""
    x = (seed * 0x9E3779B97F4A7C15 + counter * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 31
    return x & 0x7FFFFFFFFFFFFFFF
