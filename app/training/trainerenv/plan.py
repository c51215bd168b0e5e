"""Which training stack a trainer environment gets on this machine, and from where.

One backend's pinned packages (``rltray trainer-env create``, see ``trainerenv.py``):

* ``cuda``: torch with CUDA (PyTorch's CUDA index; chosen only when an NVIDIA
  GPU answers ``nvidia-smi -L``);
* ``mps``: torch from PyPI (its macOS wheels carry Metal support);
* ``mlx``: mlx + mlx-lm (Apple Silicon);
* ``cpu``: the CPU build of torch (PyTorch's CPU index on Linux and Windows,
  where PyPI's default wheel pulls gigabytes of CUDA libraries).

torch is always pinned (``TORCH_PIN``): a bare ``torch`` requirement resolves to
whatever is newest, which is the multi-gigabyte CUDA build on Linux. The other
requirements are rltray's own extras, read from its metadata (or its bundled wheel).
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rltray.app.errors import ExitCode, UserError

TORCH_PIN = "torch==2.13.0"  # the Makefile's pin too; packaging/training_extras.py reads it here
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CUDA_INDEX = "https://download.pytorch.org/whl/cu128"
EXTRAS = {"cuda": ("torch", "export"), "mps": ("torch", "export"), "cpu": ("torch", "export"),
          "mlx": ("mlx", "export")}  # fmt: skip


# Neither training stack installs on an x86_64 Mac: PyTorch's last macOS x86_64 wheels are
# 2.2.2, MLX is Apple Silicon only. Said before pip runs, never as pip's raw error (issue 23
# item 3); packaging/training_extras.py reads them from here for `make run`.
INTEL_MAC = (
    "PyTorch publishes no wheels for Intel Macs after 2.2.2 (rltray needs torch 2.13.0) and "
    "MLX needs Apple Silicon, so this Mac cannot train; rltray still captures and rates turns."
)
ROSETTA = (
    "This Python runs as x86_64 under Rosetta, where neither torch 2.13.0 nor MLX installs; "
    "use an arm64 Python (python.org's installer, or Homebrew's in /opt/homebrew) to train "
    "with MLX on this Apple Silicon Mac."
)


def mac_problem(plat: str, machine: str, translated: bool) -> str | None:
    """Why no training stack installs on this Mac (``translated``: under Rosetta), or None."""
    if plat != "darwin" or machine.lower() == "arm64":
        return None
    return ROSETTA if translated else INTEL_MAC


def under_rosetta() -> bool:
    """True when this process is x86_64 code translated by Rosetta on Apple Silicon."""
    try:
        done = subprocess.run(["sysctl", "-n", "sysctl.proc_translated"],
                              capture_output=True, text=True, timeout=5)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.strip() == "1"


class TrainerEnvError(UserError):
    """Any step of ``trainer-env`` failing (plan, base Python, build): one sentence."""

    exit_code = ExitCode.NOT_AVAILABLE


@dataclass(frozen=True)
class Plan:
    """What to install for one backend, and why that backend."""

    backend: str
    why: str
    pins: tuple[str, ...]
    requirements: tuple[str, ...]
    index: str | None
    source: str  # what pip installs as rltray itself (a wheel, the source tree, a name)

    @property
    def library(self) -> str:
        """The trainer's backend setting (training.backend) this environment serves."""
        return "mlx" if self.backend == "mlx" else "torch"


def detect_backend(plat: str | None = None, machine: str | None = None) -> tuple[str, str]:
    """The backend this machine should train with, and why (one phrase)."""
    plat = plat or sys.platform
    machine = (machine or platform.machine()).lower()
    if plat == "darwin":
        if machine == "arm64":
            return "mlx", "Apple Silicon: MLX"
        return "mps", "a Mac: torch with Metal (MPS)"
    gpu = nvidia_gpu()
    if gpu:
        return "cuda", f"NVIDIA GPU found ({gpu}): torch with CUDA"
    return "cpu", "no CUDA GPU found: the CPU build of torch"


def nvidia_gpu() -> str | None:
    """The first GPU `nvidia-smi -L` lists, or None (no driver, no GPU)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("GPU ")]
    return lines[0].split(" (UUID")[0] if done.returncode == 0 and lines else None


def torch_index(backend: str, override: str | None = None, plat: str | None = None) -> str | None:
    """The extra index torch comes from; ``override`` 'none' means the configured ones only."""
    if override is not None:
        return None if override.strip().lower() in ("", "none") else override
    plat = plat or sys.platform
    if backend == "cuda":
        return CUDA_INDEX
    if backend == "cpu" and plat != "darwin":
        return CPU_INDEX
    return None


def plan(
    backend: str | None = None,
    index: str | None = None,
    plat: str | None = None,
    machine: str | None = None,
) -> Plan:
    """What ``trainer-env create`` installs; ``plat``/``machine`` default to this machine's."""
    plat = plat or sys.platform
    machine = machine or platform.machine()
    intel = plat == "darwin" and machine.lower() != "arm64"
    problem = mac_problem(plat, machine, translated=intel and under_rosetta())
    if problem:
        raise TrainerEnvError(problem)
    if backend is None:
        backend, why = detect_backend(plat, machine)
    else:
        why = "chosen with --backend"
    if backend not in EXTRAS:
        raise TrainerEnvError(f"Unknown backend {backend!r}; choose cuda, mps, mlx or cpu.")
    if backend == "cuda" and nvidia_gpu() is None:
        raise TrainerEnvError(
            "No NVIDIA GPU answers `nvidia-smi -L`, so a CUDA environment could not train; "
            "install the NVIDIA driver, or use --backend cpu."
        )
    source, requires = rltray_source()
    return Plan(
        backend=backend,
        why=why,
        pins=() if backend == "mlx" else (TORCH_PIN,),
        requirements=tuple(requirements_for(requires, EXTRAS[backend])),
        index=None if backend == "mlx" else torch_index(backend, index),
        source=source,
    )


def rltray_source() -> tuple[str, list[str]]:
    """What pip installs as rltray (``--no-deps``), and rltray's Requires-Dist lines.

    The bundle carries rltray's wheel (packaging/build.py); a source checkout
    installs its own tree; a plain pip install reinstalls the same version.
    """
    source = rltray_package()
    if source.endswith(".whl"):
        return source, wheel_requires(Path(source))
    from importlib import metadata

    return source, metadata.requires("rltray") or []


def rltray_package() -> str:
    """What pip installs as rltray: the bundle's wheel, this source tree, or ``rltray==X``
    (``rltray_source`` without reading any metadata: ``trainerenv.stamp`` asks it before
    every round)."""
    from rltray.app import bundle

    folder = bundle.bundle_folder()
    if folder is not None:
        wheels = sorted((folder / "rltray" / "wheels").glob("rltray-*.whl"))
        if not wheels:
            raise TrainerEnvError(
                f"This rltray bundle lacks its own wheel ({folder / 'rltray' / 'wheels'}); "
                "download rltray again."
            )
        return str(wheels[-1])
    from importlib import metadata

    root = Path(__file__).resolve().parents[3]  # app/training/trainerenv/plan.py -> the tree
    if (root / "pyproject.toml").is_file() and (root / "trainer" / "__main__.py").is_file():
        return str(root)
    return f"rltray=={metadata.version('rltray')}"


def wheel_requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        text = zf.read(name).decode("utf-8")
    return [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Requires-Dist:")]  # fmt: skip


_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def requirements_for(requires: Sequence[str], extras: Sequence[str]) -> list[str]:
    """The Requires-Dist lines of ``extras``, with the extra clause removed (pip evaluates
    the remaining platform markers itself); torch lines are left to the pin."""
    out: list[str] = []
    for line in requires:
        requirement, _, marker = line.partition(";")
        found = _EXTRA.search(marker)
        if not found or found.group(1) not in extras:
            continue
        rest = _EXTRA.sub("", marker)
        rest = re.sub(r"^\s*(and|or)\s+|\s+(and|or)\s*$|\(\s*\)", "", rest.strip()).strip()
        name = re.split(r"[\s<>=!~\[;(]", requirement.strip(), maxsplit=1)[0].lower()
        if name == "torch":
            continue
        text = requirement.strip() + (f"; {rest}" if rest else "")
        if text not in out:
            out.append(text)
    return out
