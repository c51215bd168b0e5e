"""What `make run` installs for training (packaging/training_extras.py), per machine.

The decision is a function of the platform, the CPU and Rosetta, tested here for
machines this one is not; on an x86_64 Mac it installs nothing and says why in one
sentence, the same sentence `rltray trainer-env create` says (issue 23 item 3).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from rltray.app.training.trainerenv import plan

SCRIPT = Path(__file__).parents[2] / "packaging" / "training_extras.py"


def training_extras() -> ModuleType:
    spec = importlib.util.spec_from_file_location("training_extras_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_intel_mac_installs_nothing_and_says_why_in_trainer_envs_words() -> None:
    extras = training_extras()
    assert extras.choose("darwin", "x86_64", translated=False) == ([], plan.INTEL_MAC)
    assert extras.choose("darwin", "x86_64", translated=True) == ([], plan.ROSETTA)
    assert extras.choose("darwin", "arm64", translated=False)[0] == [".[mlx]"]


def test_elsewhere_the_pinned_torch_build_where_the_memory_is() -> None:
    extras = training_extras()
    extras.total_ram_gib = lambda: 16.0
    args, why = extras.choose("win32", "AMD64")
    assert args[0] == plan.TORCH_PIN == extras.TORCH_PIN and "PyTorch" in why
    extras.total_ram_gib = lambda: 4.0
    assert extras.choose("linux", "x86_64")[0] == []
