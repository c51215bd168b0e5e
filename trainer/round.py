"""What one training round's phases share: :class:`Round`.

Why a dataclass: :func:`rltray.trainer.train.train` runs a round in three phases
(round start, the optimizer steps, the finish) that all read the same dozen things
— the job, its Hyper, the backend, the encoded examples, the drift set and guard,
the objective, the emitter. Passed one by one they made 11- to 13-parameter
signatures whose order was easy to get wrong; bundled, each phase takes the round
plus the little that changes as it runs (the checkpointed :class:`RoundState`).

Only what stays fixed for the whole round lives here; the position the round has
reached (epoch, step, log-probs, metrics) stays in
:class:`~rltray.trainer.checkpoint.RoundState`, which is what a pause saves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rltray.trainer.backends.base import Backend
from rltray.trainer.drift import DriftSet
from rltray.trainer.guard import Guard
from rltray.trainer.job import Example, TrainJob
from rltray.trainer.objective import Objective
from rltray.trainer.presets import Hyper

#: Receives every progress, metric and log line of a round as a dict.
Emit = Callable[[dict[str, Any]], None]


@dataclass
class Round:
    """One round's fixed inputs, shared by its round start, optimizer steps and finish.

    ``enc``/``kept`` are the training examples' encodings by example index and the
    indices that kept any response token (``held_enc``/``held_kept`` the held-out
    ones'); ``started`` is the ``time.monotonic()`` at which :func:`train` began.
    ``guard`` is set by :func:`train` once the round's state exists (the guard
    needs its step), before the optimizer steps.
    """

    backend: Backend
    job: TrainJob
    hyper: Hyper
    objective: Objective
    examples: Sequence[Example]
    heldout: Sequence[Example]
    enc: dict[int, Any]
    kept: list[int]
    held_enc: dict[int, Any]
    held_kept: list[int]
    pad_id: int
    data_hash: str
    drift: DriftSet
    emit: Emit
    should_stop: Callable[[], bool]
    started: float
    guard: Guard = field(init=False)
    #: Sequences per forward pass: ``hyper.batch_size``, or fewer where the backend says
    #: that many would not fit (``Backend.sequences_per_pass``; 0: ``hyper.batch_size``).
    sequences: int = 0

    @property
    def size(self) -> int:
        """Sequences per forward pass (at least 1)."""
        return max(1, int(self.sequences or self.hyper.batch_size))
