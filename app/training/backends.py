"""The training backends as the app knows them: one table, one rule for which trains.

The app never imports the trainer (it may run in another Python), so this
mirrors ``trainer/backends/catalogue.py`` (names, required modules; tied by
``tests/app/test_mirrors.py``) and adds what only the app needs: the pip extra
that installs a backend and the platform rule for ``training.backend = auto``.
Config, job building, doctor, the self-test and the wizard's probe read it.
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    name: str
    requires: tuple[str, ...]  # top-level modules the trainer imports for it
    extra: str  # pip install 'rltray[<extra>]'
    platforms: tuple[tuple[str, str], ...] = ()  # (sys.platform, machine) auto picks it on

    @property
    def library(self) -> str:
        """The module whose presence says this Python can train with it (checked first)."""
        return self.requires[0]

    def missing(self) -> list[str]:
        """Required modules this Python lacks (``find_spec``: nothing heavy is imported)."""
        return [m for m in self.requires if importlib.util.find_spec(m) is None]


BACKENDS: dict[str, Backend] = {
    "torch": Backend("torch", ("torch", "transformers", "peft"), "torch"),
    "mlx": Backend("mlx", ("mlx", "mlx_lm"), "mlx", platforms=(("darwin", "arm64"),)),
}
PROBED_MODULES = tuple(dict.fromkeys(m for b in BACKENDS.values() for m in b.requires))


def resolve(setting: str, plat: str | None = None, machine: str | None = None) -> Backend:
    """The backend ``training.backend`` means here: ``auto`` is the first whose platform
    rule matches (MLX on Apple Silicon), else torch."""
    if setting in BACKENDS:
        return BACKENDS[setting]
    here = (
        sys.platform if plat is None else plat,
        platform.machine() if machine is None else machine,
    )
    for backend in BACKENDS.values():
        if here in backend.platforms:
            return backend
    return BACKENDS["torch"]
