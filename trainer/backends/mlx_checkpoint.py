"""A paused MLX round's training state on disk, so the resumed round is bit-identical.

One safetensors file holds the LoRA weights (``lora.`` + MLX name), AdamW's state
(``optim.`` + its flattened tree) and, in the metadata, the step counts, rank and alpha;
the base weights are the job's model, loaded again. Written to a temporary name and
renamed, so a crash mid-write leaves the previous checkpoint whole.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .base import checkpoint_mismatch, job_error

CHECKPOINT_FILE = "mlx_state.safetensors"
CHECKPOINT_FORMAT = "rltray-mlx-checkpoint-1"


def save(folder: Path, lora: dict[str, np.ndarray], optimizer_state: Any,
         meta: dict[str, str]) -> None:
    """Write ``lora`` (MLX name -> array), the optimizer's state tree and ``meta``."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    folder.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {"lora." + k: mx.array(v) for k, v in lora.items()}
    for k, v in tree_flatten(optimizer_state):
        arrays["optim." + k] = v
    tmp = folder / f".{CHECKPOINT_FILE}.tmp-{os.getpid()}.safetensors"
    mx.save_safetensors(str(tmp), arrays, metadata={"format": CHECKPOINT_FORMAT, **meta})
    os.chmod(tmp, 0o600)
    os.replace(tmp, folder / CHECKPOINT_FILE)


def load(folder: Path, live: dict[str, np.ndarray], rank: int
         ) -> tuple[dict[str, np.ndarray], Any, dict[str, str]]:
    """What :func:`save` wrote: the LoRA arrays, the optimizer's state tree and the
    metadata, after checking them against the ``live`` LoRA (name -> array) and ``rank``:
    a checkpoint of other tensors is refused whole (``JobError`` naming each one)."""
    import mlx.core as mx
    from mlx.utils import tree_unflatten

    path = folder / CHECKPOINT_FILE
    try:
        arrays, meta = mx.load(str(path), return_metadata=True)
    except (OSError, ValueError, RuntimeError) as exc:
        raise job_error(f"the checkpoint {path} is unreadable: {exc}") from exc
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise job_error(f"the checkpoint {path} is not an MLX rltray checkpoint")
    lora = {k[5:]: np.array(v) for k, v in arrays.items() if k.startswith("lora.")}
    problems = checkpoint_mismatch({k: v.shape for k, v in lora.items()},
                                   {k: v.shape for k, v in live.items()})
    if int(meta.get("rank", rank)) != rank:
        problems.append(f"rank {meta.get('rank')} vs {rank}")
    if problems:
        raise job_error(
            f"the checkpoint in {folder} does not match this model: " + "; ".join(problems)
        )
    optim = tree_unflatten([(k[6:], v) for k, v in arrays.items() if k.startswith("optim.")])
    return lora, optim, meta
