"""A paused torch round's training state on disk, so the resumed round is bit-identical.

It holds what the round cannot rebuild from the job: the LoRA weights, AdamW's moments,
the step count and both random generators (LoRA dropout draws from them). The base
weights are not in it: they are the job's model, loaded again. Written to a temporary
name and renamed, so a crash mid-write leaves the previous checkpoint whole.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rltray.trainer.backends.base import checkpoint_mismatch, job_error
from rltray.trainer.backends.torch_setup import first_sentence

CHECKPOINT_FILE = "torch_backend.pt"


def save(folder: Path, lora: dict[str, Any], optimizer: Any, steps_done: int) -> None:
    """Write the state of the live ``lora`` parameters (PEFT name -> parameter) and
    ``optimizer`` into ``folder``."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    state = {
        "lora": {k: p.detach().cpu().clone() for k, p in lora.items()},
        "optimizer": optimizer.state_dict(),
        "steps_done": steps_done,
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    tmp = folder / f".{CHECKPOINT_FILE}.tmp-{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, folder / CHECKPOINT_FILE)


def load(folder: Path, lora: dict[str, Any], optimizer: Any) -> int:
    """Put what :func:`save` wrote back into ``lora``, ``optimizer`` and the random
    generators; returns the steps done. A checkpoint of other tensors is refused whole
    (``JobError`` naming each one), never half applied."""
    import torch

    path = folder / CHECKPOINT_FILE
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise job_error(f"the checkpoint {path} is unreadable: {first_sentence(exc)}") from exc
    saved = state["lora"]
    problems = checkpoint_mismatch({k: tuple(v.shape) for k, v in saved.items()},
                                   {k: tuple(p.shape) for k, p in lora.items()})
    if problems:
        raise job_error(
            f"the checkpoint in {folder} does not match this model: " + "; ".join(problems)
        )
    with torch.no_grad():
        for k, p in lora.items():
            p.copy_(saved[k].to(p.device, p.dtype))
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng_cpu"])
    if state.get("rng_cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng_cuda"])
    return int(state["steps_done"])
