"""What keeps a torch training pass's memory down, apart from the backend that decides
when to use it (``torch_peft.TorchPeftBackend``).

* :data:`HeadLogprob`: a trained position's log-prob under the frozen output head with
  its gradient to the hidden state computed chunk by chunk in the forward, so no N x V
  tensor outlives its chunk.
* :func:`recompute_blocks`: the decoder blocks keep only their inputs in one training
  pass and run again in the backward (``TorchPeftBackend.recomputes`` says when).

torch is imported on first use: importing this module costs nothing.
"""

from __future__ import annotations

from typing import Any


def _head_logprob_class() -> Any:
    """:class:`HeadLogprob`, built on first use (torch is imported lazily)."""
    import torch

    class _HeadLogprob(torch.autograd.Function):
        """log p(target) = (h W^T)[target] - logsumexp(h W^T) of (N, d) hidden states
        under a frozen head ``W`` (V, d), with the gradient to ``h`` only.

        Why its own function: autograd keeps a trained position's logits, their
        log-softmax and their gradient, three N x V fp32 tensors (on SmolLM2 at 4 x
        300 trained tokens ~0.7 GB, on a 152k vocabulary three times that). The
        head is frozen (LoRA never targets it), so the only gradient is
        ``d logp / d h = W[target] - softmax(h W^T) W``: N x d, computed in the
        forward a chunk of positions at a time while that chunk's softmax is at
        hand. The product ``softmax W`` is the matmul the backward would have
        done anyway, so nothing is computed twice and no N x V tensor outlives
        its chunk.
        """

        @staticmethod
        def forward(ctx: Any, h: Any, targets: Any, weight: Any, chunk: int,
                    low: Any) -> Any:
            w = weight.detach()
            w_mm = w if low is None else w.to(low)  # the bf16 head autocast would use
            out = h.new_empty(h.shape[0], dtype=torch.float32)
            jac = h.new_empty(h.shape, dtype=torch.float32)
            for s in range(0, h.shape[0], chunk):
                hc, tc = h[s : s + chunk], targets[s : s + chunk]
                z = (hc.to(w_mm.dtype) @ w_mm.T).float()
                lse = torch.logsumexp(z, dim=-1)
                out[s : s + chunk] = z.gather(1, tc[:, None])[:, 0] - lse
                p = torch.exp(z.sub_(lse[:, None]))
                # softmax x W in the head's own matmul dtype, as autograd's backward of
                # the bf16 logits would run it: in fp32 it ran at half the bf16 speed
                # and was a fifth of a bf16 SmolLM2 step
                jac[s : s + chunk] = w[tc].float() - (p.to(w_mm.dtype) @ w_mm).float()
            ctx.save_for_backward(jac)
            ctx.h_dtype = h.dtype
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (jac,) = ctx.saved_tensors
            return (grad[:, None] * jac).to(ctx.h_dtype), None, None, None, None

    return _HeadLogprob


class _LazyFunction:
    """``HeadLogprob.apply`` that builds the autograd function on first call."""

    _fn: Any = None

    def apply(self, *args: Any) -> Any:
        if _LazyFunction._fn is None:
            _LazyFunction._fn = _head_logprob_class()
        return _LazyFunction._fn.apply(*args)


HeadLogprob = _LazyFunction()


def recompute_blocks(model: Any, on: bool) -> Any:
    """Turn on Transformers' activation checkpointing for the decoder blocks of ``model``
    (its ``GradientCheckpointingLayer`` modules) for one training pass; returns the call
    that turns it off. Why not ``gradient_checkpointing_enable()``: that checkpoints only
    in training mode, which would also switch on dropout the objective keeps off (the
    policy's log-probs must match the old ones computed in eval). Only each block's own
    ``training`` flag is set, which its checkpoint wrapper reads and nothing inside it."""
    if not on:
        return lambda: None
    from functools import partial

    from torch.utils.checkpoint import checkpoint
    from transformers.modeling_layers import GradientCheckpointingLayer

    blocks = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    was = [m.__dict__.get("gradient_checkpointing") for m in blocks]
    for m in blocks:
        m.gradient_checkpointing = True
        m._gradient_checkpointing_func = partial(checkpoint, use_reentrant=False)
        m.training = True

    def off() -> None:  # each block back in the mode the rest of the model is in now
        for m, flag in zip(blocks, was, strict=True):
            m.training = model.training
            if flag is None:
                m.__dict__.pop("gradient_checkpointing", None)
            else:
                m.gradient_checkpointing = flag

    return off
