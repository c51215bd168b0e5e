"""The trainer environment: a venv in the data folder with the training stack for this machine.

Why: the tray app (and above all the frozen bundle) never holds torch or mlx;
training runs as ``<training.python> -m rltray.trainer JOB``. This builds that
Python: ``<data folder>/trainer-env`` with rltray's trainer package and the
pinned packages of one backend:

* ``cuda``: torch with CUDA (PyTorch's CUDA index; chosen only when an NVIDIA
  GPU answers ``nvidia-smi -L``);
* ``mps``: torch from PyPI (its macOS wheels carry Metal support);
* ``mlx``: mlx + mlx-lm (Apple Silicon);
* ``cpu``: the CPU build of torch (PyTorch's CPU index on Linux and Windows,
  where PyPI's default wheel pulls gigabytes of CUDA libraries).

torch is always pinned (``TORCH_PIN``): a bare ``torch`` requirement resolves to
whatever is newest, which is the multi-gigabyte CUDA build on Linux.

Safe re-runs: the new environment is built beside the old one
(``trainer-env.new``), proven by one real training step on a tiny model
(``python -m rltray.trainer.envcheck``), and only then swapped in; any failure
deletes the half-built one and leaves the previous environment and
``training.python`` as they were. Every command is run by ``python -m ...``
(never a venv script), because scripts keep the folder name they were built
in and the folder is renamed at the end.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.app.errors import ExitCode, UserError

if TYPE_CHECKING:
    from rltray.app.context import Context
    from rltray.app.paths import Paths

ENV_DIR = "trainer-env"
TORCH_PIN = "torch==2.13.0"  # the same pin as the Makefile and packaging/training_extras.py
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CUDA_INDEX = "https://download.pytorch.org/whl/cu128"
EXTRAS = {"cuda": ("torch", "export"), "mps": ("torch", "export"), "cpu": ("torch", "export"),
          "mlx": ("mlx", "export")}  # fmt: skip
MIN_PYTHON = (3, 10)
VERIFY_TIMEOUT_S = 900
Say = Callable[[str], None]


class TrainerEnvError(UserError):
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


@dataclass
class Layout:
    home: Path
    final: Path = field(init=False)
    new: Path = field(init=False)
    old: Path = field(init=False)

    def __post_init__(self) -> None:
        self.final = self.home / ENV_DIR
        self.new = self.home / f"{ENV_DIR}.new"
        self.old = self.home / f"{ENV_DIR}.old"


def venv_python(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


# -- choosing ---------------------------------------------------------------------


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


def plan(backend: str | None = None, index: str | None = None) -> Plan:
    if backend is None:
        backend, why = detect_backend()
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
    from rltray.app import bundle

    folder = bundle.bundle_folder()
    if folder is not None:
        wheels = sorted((folder / "rltray" / "wheels").glob("rltray-*.whl"))
        if not wheels:
            raise TrainerEnvError(
                f"This rltray bundle lacks its own wheel ({folder / 'rltray' / 'wheels'}); "
                "download rltray again."
            )
        return str(wheels[-1]), wheel_requires(wheels[-1])
    from importlib import metadata

    requires = metadata.requires("rltray") or []
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "trainer" / "__main__.py").is_file():
        return str(root), requires
    return f"rltray=={metadata.version('rltray')}", requires


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


def find_base_python(explicit: str | None = None) -> str:
    """A Python >= 3.10 with venv and ensurepip to build from.

    Outside a bundle rltray's own interpreter qualifies; a bundle has no full
    Python of its own, so it looks for the system's.
    """
    from rltray.app import bundle

    if explicit:
        candidates = [explicit]
    elif not bundle.frozen():
        candidates = [sys.executable]
    else:
        candidates = system_pythons()
    problems = []
    for candidate in candidates:
        reason = _unusable(candidate)
        if reason is None:
            return candidate
        problems.append(f"{candidate}: {reason}")
    looked = "; ".join(problems) or "none on PATH"
    raise TrainerEnvError(
        f"No Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]}+ with venv to build the trainer "
        f"environment from ({looked}). Install one (Debian/Ubuntu: sudo apt install "
        "python3-venv; macOS/Windows: python.org), or name it with --python."
    )


def system_pythons(plat: str | None = None) -> list[str]:
    """Pythons to try, best first, without any that would pop up an installer.

    An app started at login gets a short PATH, so macOS also looks where
    Homebrew and python.org install; its /usr/bin/python3 is only a stub that
    offers to install the developer tools unless they are installed. On
    Windows the ``py`` launcher comes first: ``python`` may be the Microsoft
    Store alias.
    """
    plat = plat or sys.platform
    versioned = [f"python3.{minor}" for minor in range(14, MIN_PYTHON[1] - 1, -1)]
    names = ["py", "python3", "python"] if plat == "win32" else [*versioned, "python3"]
    path = os.environ.get("PATH", "")
    if plat == "darwin":
        extra = ["/opt/homebrew/bin", "/usr/local/bin",
                 "/Library/Frameworks/Python.framework/Versions/Current/bin"]  # fmt: skip
        path = os.pathsep.join([path, *extra])
    found: list[str] = []
    for name in names:
        where = shutil.which(name, path=path)
        if where and where not in found:
            found.append(where)
    if plat == "darwin" and not _developer_tools_installed():
        found = [p for p in found if not p.startswith("/usr/bin/")]
    return found


def _developer_tools_installed() -> bool:
    try:
        done = subprocess.run(["xcode-select", "-p"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _unusable(python: str) -> str | None:
    code = (
        "import sys, venv, ensurepip; "
        f"sys.exit(0 if sys.version_info >= {MIN_PYTHON} else 3)"
    )
    argv = [python, "-3", "-c", code] if Path(python).stem == "py" else [python, "-c", code]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"does not run ({exc})"
    if done.returncode == 3:
        return "older than 3.10"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return f"has no venv/ensurepip ({last})"
    return None


# -- building ---------------------------------------------------------------------


def build(paths: Paths, the_plan: Plan, base: str, say: Say) -> dict[str, Any]:
    """Build beside, verify, swap in; returns the verification result. Raises TrainerEnvError
    with the previous environment untouched when any step fails."""
    layout = Layout(paths.home)
    paths.ensure()
    shutil.rmtree(layout.new, ignore_errors=True)  # left by an interrupted run
    try:
        python = _populate(layout.new, the_plan, base, say)
        say("Checking it: one training step on a tiny model ...")
        result = verify(python, the_plan)
        if not result.get("ok"):
            raise TrainerEnvError(
                f"The new environment cannot train: {result.get('why') or result}. "
                "The previous trainer environment is unchanged."
            )
        _swap(layout)
    except BaseException:
        shutil.rmtree(layout.new, ignore_errors=True)
        raise
    return result


def _populate(folder: Path, the_plan: Plan, base: str, say: Say) -> Path:
    argv = [base, "-3"] if Path(base).stem == "py" else [base]
    say(f"Creating a virtual environment in {folder} ...")
    _run([*argv, "-m", "venv", str(folder)], say, "creating the virtual environment")
    python = venv_python(folder)
    # pip >= 24.1 prints "Progress N of M" lines (its real download progress) for the
    # wizard's bar and the terminal's; an older pip in a fresh venv gets no bar.
    bar = "raw" if _pip_version(python) >= (24, 1) else "off"
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check",
           "--progress-bar", bar]  # fmt: skip
    packages = [*the_plan.pins, *the_plan.requirements]
    index = ["--extra-index-url", the_plan.index] if the_plan.index else []
    say(f"Installing {', '.join(packages)} ...")
    _run([*pip, *index, *packages], say, "installing the training packages")
    say(f"Installing rltray's trainer from {the_plan.source} ...")
    _run([*pip, "--no-deps", the_plan.source], say, "installing rltray's trainer")
    return python


def _pip_version(python: Path) -> tuple[int, ...]:
    done = subprocess.run(
        [str(python), "-m", "pip", "--version"], capture_output=True, text=True, timeout=60
    )
    found = re.match(r"pip (\d+)\.(\d+)", done.stdout)
    return (int(found.group(1)), int(found.group(2))) if found else (0,)


def verify(python: Path | str, the_plan: Plan) -> dict[str, Any]:
    device = {"cuda": "cuda", "mps": "mps", "cpu": "cpu"}.get(the_plan.backend, "auto")
    argv = [str(python), "-m", "rltray.trainer.envcheck", "--backend", the_plan.library,
            "--device", device]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=VERIFY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"the check did not finish in {VERIFY_TIMEOUT_S} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"ok": False, "why": f"exited {done.returncode}: {tail}"}


def _swap(layout: Layout) -> None:
    """new -> final, keeping the old one until the new one answers from its final place."""
    shutil.rmtree(layout.old, ignore_errors=True)
    if layout.final.exists():
        layout.final.rename(layout.old)
    layout.new.rename(layout.final)
    probe = subprocess.run(
        [str(venv_python(layout.final)), "-c", "import rltray.trainer"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if probe.returncode != 0:
        layout.final.rename(layout.new)
        if layout.old.exists():
            layout.old.rename(layout.final)
        raise TrainerEnvError(
            "The new environment broke when moved into place; the previous one is restored."
        )
    shutil.rmtree(layout.old, ignore_errors=True)


def _run(argv: list[str], say: Say, what: str) -> None:
    """Run ``argv`` and pass each line it prints to ``say`` (pip's progress)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PIP_NO_INPUT": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)  # a bundle's settings must not leak into the new Python
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
    except OSError as exc:
        raise TrainerEnvError(f"Failed {what}: {argv[0]} did not start ({exc}).") from None
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if line:
            say(line)
            tail = [*tail[-4:], line]
    if proc.wait() != 0:
        raise TrainerEnvError(
            f"Failed {what} (exit {proc.returncode}): {' | '.join(tail[-2:])}. "
            "The previous trainer environment is unchanged."
        )


def record(paths: Paths, python: Path, the_plan: Plan) -> None:
    """Point training at the new environment (training.python, and the backend it serves)."""
    from rltray.app import config, jobbuild

    config.set_value(paths, "training.python", str(python))
    current = config.load_config(paths).training.backend
    if jobbuild.resolve_backend(current) != the_plan.library:
        config.set_value(paths, "training.backend", the_plan.library)


# -- status -------------------------------------------------------------------------


def status(paths: Paths) -> dict[str, Any]:
    from rltray.app import config

    layout = Layout(paths.home)
    python = venv_python(layout.final)
    configured = config.load_config(paths).training.python.strip()
    return {
        "folder": str(layout.final),
        "exists": python.is_file(),
        "python": str(python) if python.is_file() else None,
        "training_python": configured or None,
        "in_use": bool(configured) and Path(configured) == python,
    }


# -- the CLI faces -----------------------------------------------------------------


def create(
    ctx: Context,
    backend: str | None = None,
    base_python: str | None = None,
    torch_index: str | None = None,
) -> int:
    from rltray.app.paths import Paths

    paths = Paths.from_env(ctx.env)
    the_plan = plan(backend, torch_index)
    base = find_base_python(base_python)
    ctx.say(f"Trainer environment for {the_plan.backend} ({the_plan.why}), built with {base}.")
    result = build(paths, the_plan, base, _progress_say(ctx))
    python = venv_python(Layout(paths.home).final)
    record(paths, python, the_plan)
    ctx.say(
        ("Ready: ", "green"),
        f"one training step took {result.get('seconds', '?')} s on {result.get('device')}; "
        f"training.python is now {python}.",
    )
    return ExitCode.OK


def _progress_say(ctx: Context) -> Say:
    """pip's lines for a person or a program: a terminal hides the raw "Progress N of M"
    lines behind a percentage; a pipe (the setup wizard's job) gets them as they are."""
    terminal = ctx.out.is_terminal

    def say(line: str) -> None:
        found = _PIP_PROGRESS.match(line)
        if found is None or not terminal:
            ctx.say(line if found else ("  " + line, "dim"))
            return
        done, total = int(found.group(1)), int(found.group(2))
        if total:
            ctx.out.print(f"  downloading… {100 * done // total:3d}%", end="\r")

    return say


_PIP_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)")


def show_status(ctx: Context, json_out: bool = False) -> int:
    from rltray.app.paths import Paths

    info = status(Paths.from_env(ctx.env))
    if json_out:
        ctx.print_json(info)
    elif not info["exists"]:
        ctx.say(f"No trainer environment at {info['folder']}; run `rltray trainer-env create`.")
    elif info["in_use"]:
        ctx.say(f"Trainer environment {info['folder']} is in use (training.python).")
    else:
        ctx.say(
            f"Trainer environment {info['folder']} exists, but training.python is "
            f"{info['training_python'] or 'empty'}; run `rltray trainer-env create` to use it."
        )
    return ExitCode.OK if info["exists"] else ExitCode.NOT_AVAILABLE
