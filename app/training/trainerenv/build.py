"""The trainer environment on disk: where it lives, building it safely, its status.

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
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.app import childpython
from rltray.app.training.trainerenv import stamp
from rltray.app.training.trainerenv.plan import Plan, TrainerEnvError

if TYPE_CHECKING:
    from rltray.app.paths import Paths

ENV_DIR = stamp.ENV_DIR
VERIFY_TIMEOUT_S = 900
Say = Callable[[str], None]


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
    # -I: venv needs the standard library only, never a venv.py in the current folder
    _run([*argv, "-I", "-m", "venv", str(folder)], say, "creating the virtual environment")
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
    stamp.write(folder)  # which rltray's trainer it holds: a round after an upgrade updates it
    return python


def _pip_version(python: Path) -> tuple[int, ...]:
    done = subprocess.run(
        [str(python), "-m", "pip", "--version"], capture_output=True, text=True, timeout=60,
        **childpython.options(),
    )  # fmt: skip
    found = re.match(r"pip (\d+)\.(\d+)", done.stdout)
    return (int(found.group(1)), int(found.group(2))) if found else (0,)


def verify(python: Path | str, the_plan: Plan) -> dict[str, Any]:
    device = {"cuda": "cuda", "mps": "mps", "cpu": "cpu"}.get(the_plan.backend, "auto")
    argv = [str(python), "-m", "rltray.trainer.envcheck", "--backend", the_plan.library,
            "--device", device]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=VERIFY_TIMEOUT_S,
                              **childpython.options())  # fmt: skip
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
        capture_output=True, text=True, timeout=60, **childpython.options(),
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
    try:  # from a private folder, the current one off sys.path (app/childpython.py)
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            **childpython.options(env),
        )  # fmt: skip
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
    from rltray.app import config
    from rltray.app.training import backends

    config.set_value(paths, "training.python", str(python))
    current = config.load_config(paths).training.backend
    if backends.resolve(current).name != the_plan.library:
        config.set_value(paths, "training.backend", the_plan.library)


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
