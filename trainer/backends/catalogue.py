"""The training backends: name -> module, class and the modules it needs importable.

One table for everything on the trainer's side that names a backend: the job
reader's choices (``job.BACKENDS``), building one (``make_backend``, used by
``__main__`` and ``envcheck``) and saying what is missing. The app keeps its
own table (``app/training/backends.py``: pip extra, platform rule) because it
never imports the trainer; ``tests/app/test_mirrors.py`` ties the two.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BackendEntry:
    name: str
    module: str
    cls: str
    requires: tuple[str, ...]  # top-level modules that must be importable

    def missing(self) -> list[str]:
        """The required modules this Python cannot import (without importing them)."""
        return [m for m in self.requires if importlib.util.find_spec(m) is None]


CATALOGUE: dict[str, BackendEntry] = {
    "torch": BackendEntry(
        "torch", "rltray.trainer.backends.torch_peft", "TorchPeftBackend",
        ("torch", "transformers", "peft"),
    ),
    "mlx": BackendEntry("mlx", "rltray.trainer.backends.mlx", "MlxBackend", ("mlx", "mlx_lm")),
}  # fmt: skip


def make_backend(job: Any, hyper: Any) -> Any:
    """The backend the job names, imported only now (MLX never loads on a torch run)."""
    entry = CATALOGUE[job.backend]
    return getattr(importlib.import_module(entry.module), entry.cls)(job, hyper)
