"""The output head's weight in the dtype its matmuls run in, under CPU bf16 autocast.

Why: autocast casts the head's fp32 weight to bf16 at every call. In a greedy answer
that is every decoding step: on SmolLM2 (a 49k vocabulary) the cast made a 16-row step
150 ms where the bf16 head takes 108, the same answers. In the log-prob and drift passes
it is every chunk of positions: on a 128k vocabulary a 32 MiB chunk is 65 positions, and
each cast of a 3B model's head reads 1.5 GB and writes 0.75.

An untied head is read by matmuls only, so it is kept in bf16 from the load
(``torch_load.matmul_weights``). A head tied to the input embeddings keeps its fp32
weight for the lookup; inside :func:`head_in` its matmuls read one bf16 copy, made on
entry and dropped on exit, so a greedy answer or a pass over a batch casts the head
once, and no copy outlives it (a training pass's head, ``HeadLogprob``, casts once per
call already). Every logit is the number autocast computed before.

torch is imported on first use: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def head_in(model: Any, low: Any) -> Iterator[None]:
    """Inside the block the output head of ``model`` reads its weight in ``low``: its own
    where it already is (and where ``low`` is None, as it is), else a copy. Nested blocks
    reuse the outer one's copy."""
    head = model.get_output_embeddings() if low is not None else None
    own = getattr(head, "weight", None)
    if own is None or own.dtype == low:
        yield
        return
    import torch

    head.weight = torch.nn.Parameter(own.detach().to(low), requires_grad=False)
    try:
        yield
    finally:
        head.weight = own
