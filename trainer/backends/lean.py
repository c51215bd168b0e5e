"""When a round runs lean: its decoder blocks recompute their insides in the backward
instead of keeping them, because one sequence's activations would not leave the machine
room. Both backends decide with these figures, each measuring its own model.

Measured on torch (bench/README.md, "Recomputing the blocks" and "A lean round"):
SmolLM2-135M at 300 tokens, one CPU thread, peaked at 1.32-1.40 GB a step instead of
1.69-1.72 with the step ~1.4x as long; with freed memory also handed back to the OS,
1,117 MiB at ~1.6x. So it is for the machine whose memory would otherwise not hold the
round (a 3B model's 512 tokens keep ~5.6 GB), not a default.
"""

from __future__ import annotations

from .machine_memory import available_bytes
from .switches import env_switch

#: Bytes a training forward keeps for backward per token, hidden unit and layer (fp32,
#: measured: SmolLM2-135M's step peaked 1.63 GB higher for ~750 more tokens in a batch,
#: ~125 B per 576 x 30).
ACTIVATION_BYTES = 128
#: Where one sequence alone would keep more than this share of the memory available at
#: the round's start, the round runs lean.
RECOMPUTE_SHARE = 1 / 4


def activation_bytes(width: int, hidden: int, layers: int) -> int:
    """What one ``width``-token sequence's training forward keeps for the backward."""
    return max(1, width) * max(0, hidden) * max(0, layers) * ACTIVATION_BYTES


class LeanChoice:
    """Whether a pass that keeps ``needed`` bytes of activations runs lean; the memory
    available is read once, at the round's first question, so one round decides the
    same way throughout. ``RLTRAY_TRAINER_RECOMPUTE=1`` (or ``0``) decides instead."""

    def __init__(self) -> None:
        self.available_at_start: int | None = None

    def __call__(self, needed: int) -> bool:
        forced = env_switch("RLTRAY_TRAINER_RECOMPUTE")
        if forced is not None:
            return forced
        if not needed:
            return False
        if self.available_at_start is None:
            self.available_at_start = available_bytes()
        return needed > RECOMPUTE_SHARE * self.available_at_start
