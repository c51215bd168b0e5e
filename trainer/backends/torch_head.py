"""The output head's weight in the dtype its matmuls run in, under CPU bf16 autocast.

Why: autocast casts the head's fp32 weight to bf16 at every call. In a greedy answer
that is every decoding step: on SmolLM2 (a 49k vocabulary) the cast made a 16-row step
150 ms where the bf16 head takes 108, the same answers. In the log-prob and drift passes
it is every chunk of positions: on a 128k vocabulary a 32 MiB chunk is 65 positions, and
each cast of a 3B model's head reads 1.5 GB and writes 0.75. An untied head is read by
matmuls only, so it is kept in bf16 from the load (``torch_load.matmul_weights``); a head
tied to the input embeddings keeps its fp32 weight for the lookup, and its matmuls read
one bf16 copy made once. Every logit is the number autocast computed before.

torch is imported on first use: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def matmul_head(model: Any, low: Any) -> Any:
    """The weight the head's matmuls read in ``low``: the head's own when it is already
    in ``low`` (untied, kept so at the load), else one frozen copy; None without a head."""
    import torch

    head = model.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if weight is None:
        return None
    if weight.dtype == low:
        return weight
    return torch.nn.Parameter(weight.detach().to(low), requires_grad=False)


@contextlib.contextmanager
def head_reading(model: Any, weight: Any) -> Iterator[None]:
    """The model's output head reads ``weight`` inside the block (a tied head's embedding
    lookup keeps the fp32 weight); nothing changes where ``weight`` is None or already
    the head's."""
    head = model.get_output_embeddings() if weight is not None else None
    if head is None or head.weight is weight:
        yield
        return
    own = head.weight
    head.weight = weight
    try:
        yield
    finally:
        head.weight = own
