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

How the update runs (review 4, item 1; /tmp/review4-a/stamp/pip_under_lock.py): pip
once ran under the training runner's lock, so the tray, `/api/status` and the gate
waited for it; offline it failed and the gate ran it again every minute, two at once
(the gate's round and the publisher's export) into the same environment. Now:

- the runner asks before it takes its lock (``jobbuild.update_trainer``); under it only
  the no-pip check runs (``ensure_current(install=False)``);
- one update at a time per environment: a file lock beside ``pyvenv.cfg``
  (``rltray-trainer-refresh.lock``); who waited finds the work done;
- a failed update is remembered there (``rltray-trainer-refresh.json``: this rltray's
  version and digest, and pip's words) and not tried again until those change, the
  environment is rebuilt (`rltray trainer-env create`), or the user asks for a round
  (Train now: ``retry``); meanwhile a round fails at once with that sentence;
- only a trainer this rltray carries is installed by itself: its bundle's wheel or its
  source tree, seconds and no network. A plain pip install would have to fetch
  ``rltray==X`` from the package index (minutes, or never offline), so the round runs
  with the old trainer and the warning is logged, unless that trainer is known not to
  read today's jobs: its ``trainer/job.py`` lacks a job or example key this rltray's
  declares (read as text, never imported), and then the round fails naming
  `rltray trainer-env create`.

A Python the user set up themselves (no ``pyvenv.cfg`` with rltray's record, not
rltray's ``trainer-env`` folder) is theirs to update: never touched.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rltray.app import fileio
from rltray.app.training.trainerenv.plan import TrainerEnvError, rltray_package

STAMP = "rltray-trainer.json"
FAILED = "rltray-trainer-refresh.json"  # the last update that failed, beside the record
LOCK = "rltray-trainer-refresh.lock"  # one update at a time per environment
ENV_DIR = "trainer-env"  # the folder `trainer-env create` builds (build.ENV_DIR)
REFRESH_TIMEOUT_S = 600
LOCK_WAIT_S = REFRESH_TIMEOUT_S + 60  # another process's update may take that long
CREATE = "run `rltray trainer-env create`"


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
    """Record (``current()`` by default) what ``folder``'s environment holds now; a failed
    update remembered there is forgotten."""
    (folder / STAMP).write_text(json.dumps(record or current(), indent=1) + "\n", "utf-8")
    with contextlib.suppress(FileNotFoundError):
        (folder / FAILED).unlink()


def built_by_rltray(python: str | os.PathLike[str]) -> bool:
    """A venv rltray built: its record is there, or it is the data folder's trainer-env."""
    folder = root(python)
    if not (folder / "pyvenv.cfg").is_file():
        return False
    return (folder / STAMP).is_file() or folder.name == ENV_DIR


def stale(python: str | os.PathLike[str], now: dict[str, Any] | None = None) -> str | None:
    """Why ``python``'s environment holds another trainer than this rltray's; None when it
    holds this one, or when rltray did not build it. ``now``: :func:`current`, when the
    caller has it (it hashes the whole wheel or trainer tree)."""
    if not built_by_rltray(python):
        return None
    had, now = recorded(python), now or current()
    if had is None:
        return f"it was built by an older rltray, and this is rltray {now['version']}"
    if had.get("version") != now["version"]:
        return (f"it holds the trainer of rltray {had.get('version')}, and this is rltray "
                f"{now['version']}")  # fmt: skip
    if had.get("sha256") and now["sha256"] and had["sha256"] != now["sha256"]:
        return f"it holds the trainer of another build of rltray {now['version']}"
    return None


def refresh(python: str | os.PathLike[str], say: Callable[[str], None] | None = None,
            now: dict[str, Any] | None = None) -> None:
    """Install this rltray's trainer into ``python``'s environment (its packages stay), then
    record it (``now``: :func:`current`, when the caller has it). Raises TrainerEnvError
    with pip's last lines when that fails."""
    from rltray.app import childpython

    now = now or current()
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


def ensure_current(
    python: str | os.PathLike[str], *, install: bool = True, retry: bool = False
) -> str | None:
    """Before a round or an export: a stale environment rltray built gets this rltray's
    trainer (see the module's docstring for when). Returns None when it holds this
    trainer now, or the warning to log when the round goes on with the old one; raises
    TrainerEnvError naming `rltray trainer-env create` when the round cannot.

    ``install=False`` never runs pip (a caller holding a lock); ``retry`` tries again an
    update that failed before (the user asked for this round).
    """
    now = current()
    why = stale(python, now)
    if why is None:
        return None
    failed = failure(python, now)
    if install and carried(now["source"]) and (retry or failed is None):
        failed = _refresh_once(python, now, retry)
        if failed is None:
            return None
    goes_on, detail = _left_as_is(python, why, now, failed)
    said = f"The trainer environment {root(python)} is out of date ({why}); {detail}; {CREATE}."
    if not goes_on:
        raise TrainerEnvError(said)
    return said


def outlook(python: str | os.PathLike[str]) -> str | None:
    """What the next round does about a stale environment, for doctor and the self-test
    (nothing is changed); None when it holds this rltray's trainer."""
    now = current()
    why = stale(python, now)
    if why is None:
        return None
    failed = failure(python, now)
    if failed is None and carried(now["source"]):
        return f"{why}; the next round updates its trainer, or {CREATE}"
    return f"{why}; {_left_as_is(python, why, now, failed)[1]}; {CREATE}"


def carried(source: str) -> bool:
    """``source`` is a wheel file or a source tree here, not ``rltray==X`` from the index."""
    return bool(source) and Path(source).exists()


def failure(python: str | os.PathLike[str], now: dict[str, Any]) -> str | None:
    """pip's words from the last update of ``python``'s environment to ``now`` that failed;
    None when none did (or it was for another version or build)."""
    try:
        data = json.loads((root(python) / FAILED).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    same = all(data.get(k) == now.get(k) for k in ("version", "sha256", "source"))
    return str(data.get("error") or "it failed") if same else None


def _refresh_once(python: str | os.PathLike[str], now: dict[str, Any], retry: bool) -> str | None:
    """``refresh`` under the environment's lock, unless the process that held it before did
    it (or failed at it: not again, unless ``retry``). None when it holds this trainer
    now, else why not (a failure is remembered)."""
    from filelock import FileLock, Timeout

    folder = root(python)
    try:
        with FileLock(str(folder / LOCK)).acquire(timeout=LOCK_WAIT_S):
            if stale(python, now) is None:
                return None  # another process updated it while this one waited
            said = failure(python, now)
            if said is not None and not retry:
                return said
            try:
                refresh(python, now=now)
            except TrainerEnvError as exc:
                record = {**now, "error": str(exc)}
                with contextlib.suppress(OSError):
                    (folder / FAILED).write_text(json.dumps(record, indent=1) + "\n", "utf-8")
                return str(exc)
            return None
    except Timeout:
        return f"another update of it did not finish in {LOCK_WAIT_S} s"
    except OSError as exc:
        return f"its lock file could not be made ({exc.strerror or exc})"


def _left_as_is(
    python: str | os.PathLike[str], why: str, now: dict[str, Any], failed: str | None
) -> tuple[bool, str]:
    """Whether a round may go on with the old trainer, and what to say about it: not when
    the update failed (pip may have left it half done) or when the old trainer is known
    not to read this rltray's jobs."""
    if failed is not None:
        return False, f"updating it failed: {failed}"
    if carried(now["source"]):  # a caller that may not install now: the next one does
        how = "it is updated before the next round"
    else:
        how = (f"this rltray installs a trainer only from its own wheel or source tree, not "
               f"{now['source'] or 'from the package index'}")  # fmt: skip
    lacks = unreadable(python, now)
    if lacks is not None:
        return False, f"its trainer cannot read this rltray's jobs ({lacks}), and {how}"
    return True, f"rounds run with its old trainer ({how})"


def unreadable(python: str | os.PathLike[str], now: dict[str, Any]) -> str | None:
    """Which job or example key this rltray's trainer declares that the environment's
    trainer does not (its ``trainer/job.py``, read as text); None when it knows them
    all, or when either file cannot be found or read (then nothing is known)."""
    theirs = _keys(_installed_job(python))
    ours = _keys(_our_job(now["source"]))
    if theirs is None or ours is None:
        return None
    for kind, have, want in (("job", theirs[0], ours[0]), ("example", theirs[1], ours[1])):
        missing = sorted(want - have)
        if missing:
            return f"it does not know the {kind} key {missing[0]!r}"
    return None


def _installed_job(python: str | os.PathLike[str]) -> str | None:
    """The text of ``rltray/trainer/job.py`` in ``python``'s environment's site-packages."""
    folder = root(python)
    found = [*folder.glob("lib/python3*/site-packages/rltray/trainer/job.py"),
             *folder.glob("Lib/site-packages/rltray/trainer/job.py")]  # fmt: skip
    return _read(found[0]) if found else None


def _our_job(source: str) -> str | None:
    """The text of the trainer's ``job.py`` this rltray carries or is installed with."""
    path = Path(source) if source else None
    if path is not None and path.is_file():
        try:
            with zipfile.ZipFile(path) as wheel:
                return wheel.read("rltray/trainer/job.py").decode("utf-8")
        except (OSError, KeyError, ValueError, zipfile.BadZipFile):
            return None
    if path is not None and path.is_dir():
        return _read(path / "trainer" / "job.py")
    import rltray.app  # installed from the index: the trainer beside this app is that one

    return _read(Path(str(rltray.app.__file__)).parents[1] / "trainer" / "job.py")


def _read(path: Path) -> str | None:
    try:
        return path.read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _keys(text: str | None) -> tuple[frozenset[str], frozenset[str]] | None:
    """``JOB_KEYS`` and ``EXAMPLE_KEYS`` of a trainer's job.py, from its literal text."""
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found: dict[str, frozenset[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        else:
            continue
        items = value.keys if isinstance(value, ast.Dict) else getattr(value, "elts", [])
        if name in ("JOB_KEYS", "EXAMPLE_KEYS"):
            found[name] = frozenset(
                k.value for k in items if isinstance(k, ast.Constant) and isinstance(k.value, str)
            )
    if "JOB_KEYS" not in found or "EXAMPLE_KEYS" not in found:
        return None
    return found["JOB_KEYS"], found["EXAMPLE_KEYS"]


def _digest(source: str) -> str | None:
    """sha256 of a wheel file, or of a source tree's trainer files; None for a package name."""
    path = Path(source) if source else None
    if path is None:
        return None
    if path.is_file():
        return fileio.sha256_file(path)
    sha = hashlib.sha256()
    trainer = path / "trainer"
    if not trainer.is_dir():
        return None
    for file in sorted(trainer.rglob("*.py")):
        if "__pycache__" not in file.parts:
            sha.update(str(file.relative_to(path)).encode() + b"\0" + file.read_bytes())
    return sha.hexdigest()
