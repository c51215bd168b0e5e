"""Pause/resume checkpoints of a training round: one folder holds everything.

Why a folder of its own (``<job folder>/checkpoint/``): a paused round must be able
to end **bit-identical** to one that never paused. That needs more than the LoRA
weights: the optimizer moments and step (the backend saves those plus its RNG
state into ``backend/``), where the round was (epoch, step within it, the epoch's
example order), the round-start log-probs ``o`` and ``f`` (recomputing ``o`` after
training started would use the *trained* policy, not the round-start one), the
parent's held-out metrics measured before training, and the drift guard's state
(its LoRA snapshots of unmeasured steps, known-good step and schedule: where a stop
walks back to).

A checkpoint is written into a temp folder next to it and swapped in with
renames, ``state.json`` last, so a crash while pausing leaves the previous
checkpoint (or none) — never a half-written one that resumes into garbage.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

STATE_FILE = "state.json"
LOGPROBS_FILE = "logprobs.npz"
GUARD_FILE = "guard.npz"
BACKEND_DIR = "backend"


@dataclass
class RoundState:
    """Where a round is and what it computed at its start.

    ``old`` / ``base`` hold one float32 vector per *kept* training example (its
    (L_i - 1) token log-probs, see ``backends.base``); ``held_base`` the same for
    kept held-out examples. ``epoch`` / ``step`` name the next optimizer step to
    run (step within the epoch); ``order`` is that epoch's example order.
    """

    job_id: str
    data_hash: str
    kept: list[int]
    held_kept: list[int]
    old: list[np.ndarray]
    base: list[np.ndarray]
    held_base: list[np.ndarray]
    epoch: int = 0
    step: int = 0
    global_step: int = 0
    elapsed_s: float = 0.0
    order: list[int] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    #: Hash of everything else that shapes the round (hyperparameters, seed, base,
    #: parent, baseline): a checkpoint only resumes the very same round.
    fingerprint: str = ""
    #: The drift guard's state (``guard.Guard.state``): its JSON part here, its arrays
    #: (LoRA snapshots of unmeasured steps, measured log-prob rows) in ``guard.npz``.
    #: Without it a round paused between an unmeasured crossing of the guard's line
    #: and the next measurement could not walk back as the unpaused round does.
    guard: dict[str, Any] = field(default_factory=dict)
    guard_arrays: dict[str, np.ndarray] = field(default_factory=dict)
    #: The capability check's round-start part (``capability.round_start``): prompts,
    #: the base's greedy answers (token ids) and their NLL under base and parent. Kept
    #: so a resumed round scores the very same answers instead of generating anew.
    reference: dict[str, Any] = field(default_factory=dict)
    #: Set once every optimizer step ran (or the drift guard ended them): a round
    #: resumed from here goes straight to its finish, with the guard's sentence that
    #: ended the steps (``""`` when all ran). The finish of a large model takes many
    #: minutes; a pause or a hard kill in it no longer costs the steps since the last
    #: periodic checkpoint.
    steps_done: bool = False
    stopped_early: str = ""

    def position(self) -> dict[str, Any]:
        """The JSON part (everything except the arrays)."""
        d = asdict(self)
        for k in ("old", "base", "held_base", "guard_arrays"):
            d.pop(k)
        return d


def _pack(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    flat = (
        np.concatenate([np.asarray(r, dtype=np.float32) for r in rows])
        if rows
        else np.zeros(0, np.float32)
    )
    return flat, lengths


def _unpack(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    out, start = [], 0
    for n in lengths.tolist():
        out.append(flat[start : start + n].copy())
        start += n
    return out


def save(folder: Path, state: RoundState, backend: Any) -> Path:
    """Write ``state`` and ``backend``'s checkpoint to ``folder``, atomically; return it."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    tmp = folder.parent / f".{folder.name}.tmp-{tag}"
    old = folder.parent / f".{folder.name}.old-{tag}"
    tmp.mkdir(mode=0o700)
    try:
        backend.save_checkpoint(tmp / BACKEND_DIR)
        arrays = {}
        for key in ("old", "base", "held_base"):
            arrays[f"{key}_flat"], arrays[f"{key}_len"] = _pack(getattr(state, key))
        np.savez(tmp / LOGPROBS_FILE, **arrays)
        np.savez(tmp / GUARD_FILE, **state.guard_arrays)
        (tmp / STATE_FILE).write_text(json.dumps(state.position(), indent=1), encoding="utf-8")
        if folder.exists():
            os.rename(folder, old)
        os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not folder.exists():
            os.rename(old, folder)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return folder


def save_with_guard(folder: Path, state: RoundState, backend: Any, guard: Any) -> Path:
    """:func:`save` with the drift guard's state (``guard.Guard.state``) taken into
    ``state`` first: every checkpoint of a running round carries it."""
    state.guard, state.guard_arrays = guard.state()
    return save(folder, state, backend)


def load(folder: Path) -> RoundState | None:
    """The saved round state, or ``None`` when there is no complete checkpoint."""
    folder = Path(folder)
    state_path = folder / STATE_FILE
    if not state_path.is_file():
        return None
    pos = json.loads(state_path.read_text(encoding="utf-8"))
    with np.load(folder / LOGPROBS_FILE) as z:
        arrays = {
            key: _unpack(z[f"{key}_flat"], z[f"{key}_len"]) for key in ("old", "base", "held_base")
        }
    guard_arrays: dict[str, np.ndarray] = {}
    if (folder / GUARD_FILE).is_file():  # absent in an older trainer's checkpoint
        with np.load(folder / GUARD_FILE) as z:
            guard_arrays = {k: z[k] for k in z.files}
    return RoundState(**pos, **arrays, guard_arrays=guard_arrays)


def backend_dir(folder: Path) -> Path:
    """Where the backend's own checkpoint files live inside a checkpoint folder."""
    return Path(folder) / BACKEND_DIR


def remove(folder: Path) -> None:
    """Delete a checkpoint (after the round finished, or when it belongs to another job)."""
    shutil.rmtree(folder, ignore_errors=True)


#: Seconds between the checkpoints a running round writes on its own (``0``: none).
#: Why: a hard kill (a remote cluster's SIGKILL after its stop grace, a power cut, an
#: OOM kill) skips the pause checkpoint; with these, it loses at most this much work.
PERIODIC_ENV = "RLTRAY_TRAINER_CHECKPOINT_S"
PERIODIC_DEFAULT_S = 300.0


class Periodic:
    """Says when a running round is due its next periodic checkpoint, and writes it."""

    def __init__(self, interval_s: float | None = None, clock: Any = None) -> None:
        import time

        if interval_s is None:
            try:
                interval_s = float(os.environ.get(PERIODIC_ENV, PERIODIC_DEFAULT_S))
            except ValueError:
                interval_s = PERIODIC_DEFAULT_S
        self.interval_s = interval_s
        self.clock = clock or time.monotonic
        self.last = self.clock()
        self.saved = 0

    def due(self) -> bool:
        return self.interval_s > 0 and self.clock() - self.last >= self.interval_s

    def save(self, folder: Path, state: RoundState, backend: Any, guard: Any) -> Path:
        """Write the round's position after a finished step: the very checkpoint a pause
        at the next step would write (so resuming from it stays bit-identical)."""
        path = save_with_guard(folder, state, backend, guard)
        self.last = self.clock()
        self.saved += 1
        return path
