"""What keeps an MLX training pass's memory down, apart from the backend that decides
when to use it (``mlx.MlxBackend``); the MLX twin of :mod:`.torch_pass_memory`.

* :func:`head_logprob`: a trained position's log-prob under the frozen output head, with
  its gradient to the hidden state computed chunk by chunk in the forward, so no N x V
  logits outlive their chunk.
* :func:`recompute_blocks`: the decoder blocks keep only their inputs in one training
  pass and run again in the backward (a lean round).

mlx is imported on first use: importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def head_weight(head: Any) -> Any | None:
    """The (V, d) weight of an output head that is exactly ``h @ W.T``: an unquantized
    ``nn.Linear`` without bias, or the tied ``nn.Embedding.as_linear``; else None (a
    quantized or biased head keeps the plain path, which is always right)."""
    import mlx.nn as nn

    owner = getattr(head, "__self__", head)  # as_linear is a bound method of the embedding
    if isinstance(owner, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
        return None
    if isinstance(owner, nn.Linear) and "bias" not in owner:
        return owner.weight
    if isinstance(owner, nn.Embedding) and head == owner.as_linear:
        return owner.weight
    return None


def head_logprob(weight: Any, chunk: int) -> Callable[[Any, Any], Any]:
    """``f(h, targets)``: (N,) fp32 log p(target) = (h W^T)[target] - logsumexp(h W^T) of
    (N, d) hidden states under the frozen head ``weight`` (V, d), differentiable in ``h``.

    Why its own vjp: MLX's autograd keeps a trained position's logits and their
    log-softmax for the backward, N x V fp32 (on a 152k vocabulary ~0.6 MB a token).
    The head is frozen, so the only gradient is ``W[target] - softmax(h W^T) W`` (N x d),
    computed in the forward ``chunk`` positions at a time while that chunk's softmax is at
    hand. The matmuls run in the weight's dtype as the model's own head does (the logits
    are then made fp32, as the plain path makes them)."""
    import mlx.core as mx

    @mx.custom_function
    def f(h: Any, targets: Any) -> tuple[Any, Any]:
        # One (n, 1 + d) block per chunk, [log-prob | gradient]. MLX would run every
        # chunk's head matmul first and hold all their logits at once (the whole N x V
        # again); each chunk's input is made to depend on the block before it, so one
        # chunk's logits are made, used and freed before the next chunk's.
        blocks: list[Any] = []
        for s in range(0, h.shape[0], chunk):
            hc, t = h[s : s + chunk], targets[s : s + chunk]
            if blocks:
                hc = mx.depends(hc, blocks[-1])
            z = (hc.astype(weight.dtype) @ weight.T).astype(mx.float32)
            lse = mx.logsumexp(z, axis=-1, keepdims=True)
            picked = mx.take_along_axis(z, t[:, None], axis=-1) - lse
            p = mx.exp(z - lse).astype(weight.dtype)
            jac = weight[t].astype(mx.float32) - (p @ weight).astype(mx.float32)
            blocks.append(mx.concatenate([picked, jac], axis=1))
        both = mx.concatenate(blocks)
        return both[:, 0], both[:, 1:]

    @f.vjp
    def f_vjp(primals: Any, cotangents: Any, outputs: Any) -> tuple[Any, Any]:
        h, targets = primals
        grad = cotangents[0] if isinstance(cotangents, (list, tuple)) else cotangents
        return (grad[:, None] * outputs[1]).astype(h.dtype), mx.zeros_like(targets)

    return lambda h, targets: f(h, targets)[0]


@contextmanager
def recompute_blocks(layers: list[Any], on: bool) -> Iterator[None]:
    """While inside, each decoder block of ``layers`` keeps only its inputs for the
    backward and runs again there (``mx.checkpoint``): a training pass then holds one
    block's activations, not all of them, at about a third more compute.

    Python calls ``type(block).__call__``, so the blocks' class is patched, and put back
    on the way out: the trainer process holds one model, and nothing else calls its
    blocks inside (mlx-lm's own tuner patches the class for good)."""
    if not on:
        yield
        return
    import mlx.core as mx

    classes = {type(layer) for layer in layers}
    saved = {cls: cls.__dict__.get("__call__") for cls in classes}
    for cls in classes:
        plain = cls.__call__

        def checkpointed(block: Any, x: Any, *rest: Any, _plain: Any = plain, **kw: Any) -> Any:
            # only the hidden state and the LoRA weights are traced: the mask (an array,
            # "causal" or None) and the cache ride along as they are
            def run(params: Any, hidden: Any) -> Any:
                block.update(params)
                return _plain(block, hidden, *rest, **kw)

            return mx.checkpoint(run)(block.trainable_parameters(), x)

        cls.__call__ = checkpointed
    try:
        yield
    finally:
        for cls, call in saved.items():
            if call is None:
                del cls.__call__
            else:
                cls.__call__ = call
