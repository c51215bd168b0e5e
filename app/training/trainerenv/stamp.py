"""Which rltray a trainer environment holds, and bringing it up to this rltray.

Why: a trainer environment gets rltray's trainer package once, when it is built
(`rltray trainer-env create`). After rltray is upgraded, the app writes job files
and example lines the old trainer cannot read, and every round failed with
"unknown key 'replay'" (review 3, finding 3; /tmp/review3-packaging/stale_trainer_env.sh).
So the build records what it installed (``rltray-trainer.json`` beside the
environment's ``pyvenv.cfg``: rltray's version and the sha256 of the carried wheel
or of the source tree's trainer), and before a round or an export
(``jobbuild.training_python``) the record is compared with this rltray. An
environment rltray built that holds another trainer gets this one
(``pip install --no-deps --force-reinstall``: the bundle's own wheel, seconds, no
download); when that fails the round fails with "run `rltray trainer-env create`".
Doctor and the self-test say the same without changing anything.

A Python the user set up themselves (no ``pyvenv.cfg`` with rltray's record, not
rltray's ``trainer-env`` folder) is theirs to update: never touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rltray.app.training.trainerenv.plan import TrainerEnvError, rltray_package

STAMP = "rltray-trainer.json"
ENV_DIR = "trainer-env"  # the folder `trainer-env create` builds (build.ENV_DIR)
REFRESH_TIMEOUT_S = 600


def root(python: str | os.PathLike[str]) -> Path:
    """The environment folder of a venv's interpreter (``bin/python``, ``Scripts/python.exe``)."""
    return Path(python).parent.parent


def current() -> dict[str, Any]:
    """What this rltray would install as the trainer: its version, the source, its digest."""
    import rltray.app

    try:
        source = rltray_package()
    except TrainerEnvError:  # a bundle without its wheel: the version alone
        source = ""
    return {"version": rltray.app.__version__, "source": source, "sha256": _digest(source)}


def recorded(python: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The record the build (or the last refresh) left in ``python``'s environment."""
    try:
        data = json.loads((root(python) / STAMP).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write(folder: Path, record: dict[str, Any] | None = None) -> None:
    """Record (``current()`` by default) what ``folder``'s environment holds now."""
    (folder / STAMP).write_text(json.dumps(record or current(), indent=1) + "\n", "utf-8")


def built_by_rltray(python: str | os.PathLike[str]) -> bool:
    """A venv rltray built: its record is there, or it is the data folder's trainer-env."""
    folder = root(python)
    if not (folder / "pyvenv.cfg").is_file():
        return False
    return (folder / STAMP).is_file() or folder.name == ENV_DIR


def stale(python: str | os.PathLike[str]) -> str | None:
    """Why ``python``'s environment holds another trainer than this rltray's; None when it
    holds this one, or when rltray did not build it."""
    if not built_by_rltray(python):
        return None
    had, now = recorded(python), current()
    if had is None:
        return f"it was built by an older rltray, and this is rltray {now['version']}"
    if had.get("version") != now["version"]:
        return (f"it holds the trainer of rltray {had.get('version')}, and this is rltray "
                f"{now['version']}")  # fmt: skip
    if had.get("sha256") and now["sha256"] and had["sha256"] != now["sha256"]:
        return f"it holds the trainer of another build of rltray {now['version']}"
    return None


def refresh(python: str | os.PathLike[str], say: Callable[[str], None] | None = None) -> None:
    """Install this rltray's trainer into ``python``'s environment (its packages stay), then
    record it. Raises TrainerEnvError with pip's last lines when that fails."""
    from rltray.app import childpython

    now = current()
    if not now["source"]:
        raise TrainerEnvError("this rltray carries no trainer to install")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_NO_INPUT"] = "1"
    argv = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-deps",
            "--force-reinstall", "--quiet", now["source"]]  # fmt: skip
    if say:
        say(f"Updating the trainer in {root(python)} to rltray {now['version']} ...")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=REFRESH_TIMEOUT_S,
                              **childpython.options(env))  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TrainerEnvError(f"pip did not run ({exc})") from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-2:]) or "no output"
        raise TrainerEnvError(f"pip exited {done.returncode}: {tail}")
    write(root(python), now)


def ensure_current(python: str | os.PathLike[str]) -> None:
    """Before a round or an export: a stale environment rltray built gets this rltray's
    trainer; raises TrainerEnvError naming `rltray trainer-env create` when it cannot."""
    why = stale(python)
    if why is None:
        return
    try:
        refresh(python)
    except TrainerEnvError as exc:
        raise TrainerEnvError(
            f"The trainer environment {root(python)} is out of date ({why}) and updating it "
            f"failed: {exc}; run `rltray trainer-env create`."
        ) from None


def _digest(source: str) -> str | None:
    """sha256 of a wheel file, or of a source tree's trainer files; None for a package name."""
    path = Path(source) if source else None
    if path is None:
        return None
    sha = hashlib.sha256()
    if path.is_file():
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
        return sha.hexdigest()
    trainer = path / "trainer"
    if not trainer.is_dir():
        return None
    for file in sorted(trainer.rglob("*.py")):
        if "__pycache__" not in file.parts:
            sha.update(str(file.relative_to(path)).encode() + b"\0" + file.read_bytes())
    return sha.hexdigest()
