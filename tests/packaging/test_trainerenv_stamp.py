"""A trainer environment built by an older rltray gets this rltray's trainer before a round.

Regression pinned (review 3, finding 3; /tmp/review3-packaging/stale_trainer_env.sh):
`trainer-env create` installed the bundle's wheel once; after an upgrade the
environment kept the old trainer, which refused today's example lines ("unknown key
'replay'") in every round, and the self-test only asked for torch.

Real parts: a venv made by `python -m venv` with its own pip, real wheels (an "old" and
a "new" rltray trainer, built here as zip files with their RECORD), the bundle's wheel
folder as rltray_source() reads it (sys.frozen and sys._MEIPASS as PyInstaller sets
them), pip installing into the venv, the config file, and the trainer's interpreter
asked what it imports.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from rltray.app import config
from rltray.app.paths import Paths
from rltray.app.training import jobbuild
from rltray.app.training.trainerenv import stamp

VERSION = "0.1.0"  # this checkout's version: the old and the new build differ in content only


def make_wheel(folder: Path, mark: str) -> Path:
    """An rltray wheel whose trainer says ``mark`` (what a build of that release carries)."""
    import rltray.app

    assert rltray.app.__version__ == VERSION
    folder.mkdir(parents=True, exist_ok=True)
    info = f"rltray-{VERSION}.dist-info"
    files = {
        "rltray/__init__.py": "",
        "rltray/trainer/__init__.py": f"MARK = {mark!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: rltray\nVersion: {VERSION}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
    }  # fmt: skip
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    wheel = folder / f"rltray-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def trainer_mark(python: Path) -> str:
    done = subprocess.run([str(python), "-c", "import rltray.trainer as t; print(t.MARK)"],
                          capture_output=True, text=True, timeout=60,
                          cwd=python.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("venv") / "trainer-env"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    return folder


@pytest.fixture
def old_env(base_venv: Path, rltray_home: Path, tmp_path: Path) -> Path:
    """The data folder's trainer-env as an older bundle left it: its trainer, no record."""
    folder = rltray_home / "trainer-env"
    shutil.copytree(base_venv, folder, symlinks=True)
    python = folder / "bin" / "python"
    old = make_wheel(tmp_path / "old", "old")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                    "--disable-pip-version-check", str(old)], check=True, timeout=300)  # fmt: skip
    assert trainer_mark(python) == "old"
    config.set_value(Paths.from_env(), "training.python", str(python))
    return python


@pytest.fixture
def upgraded_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process as the upgraded bundle: its _internal folder carries the new wheel."""
    internal = tmp_path / "bundle" / "_internal"
    wheel = make_wheel(internal / "rltray" / "wheels", "new")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(internal), raising=False)
    return wheel


pytestmark = pytest.mark.skipif(os.name != "posix", reason="the venv's bin/python layout")


def test_a_round_after_an_upgrade_installs_the_new_trainer_first(
    old_env: Path, upgraded_bundle: Path
) -> None:
    assert stamp.stale(old_env) == "it was built by an older rltray, and this is rltray 0.1.0"
    training = config.load_config(Paths.from_env()).training
    assert jobbuild.training_python(training) == str(old_env)  # what start() and resume() ask
    assert trainer_mark(old_env) == "new"
    record = stamp.recorded(old_env)
    assert record is not None and record["version"] == VERSION
    assert record["sha256"] == hashlib.sha256(upgraded_bundle.read_bytes()).hexdigest()
    assert stamp.stale(old_env) is None
    # another build of the same version (a rebuilt bundle) is told apart by its digest
    make_wheel(upgraded_bundle.parent, "newer")
    assert stamp.stale(old_env) == "it holds the trainer of another build of rltray 0.1.0"
    jobbuild.training_python(training)
    assert trainer_mark(old_env) == "newer"


def test_when_the_update_fails_the_round_names_trainer_env_create(
    old_env: Path, upgraded_bundle: Path
) -> None:
    upgraded_bundle.write_bytes(b"not a wheel")  # pip cannot install it: a real failure
    training = config.load_config(Paths.from_env()).training
    with pytest.raises(jobbuild.TrainingNotSetUp) as said:
        jobbuild.training_python(training)
    message = str(said.value)
    assert message.startswith(f"The trainer environment {old_env.parent.parent} is out of date")
    assert message.endswith("run `rltray trainer-env create`.")
    assert trainer_mark(old_env) == "old"


def test_a_python_rltray_did_not_build_is_left_alone(upgraded_bundle: Path) -> None:
    assert stamp.stale(sys.executable) is None  # the user's own: never reinstalled


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch here")
def test_doctor_and_the_selftest_say_the_trainer_is_old(
    old_env: Path, upgraded_bundle: Path
) -> None:
    """The old environment has torch (this test's own, through a .pth file), so the only
    thing wrong is its trainer; doctor says so instead of `pip install 'rltray[torch]'`."""
    from rltray.app.cli import doctor
    from rltray.app.cli.context import Context
    from rltray.app.cli.selftest import trainer_environment

    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    site = next((old_env.parent.parent / "lib").glob("python3*/site-packages"))
    (site / "outer.pth").write_text(str(Path(spec.origin).parent.parent) + "\n")
    state, detail = trainer_environment(dict(os.environ))
    assert state == "warn" and detail == (
        f"{old_env} has torch, but it was built by an older rltray, and this is rltray 0.1.0; "
        "the next round updates its trainer, or run `rltray trainer-env create`"
    )
    (check,) = doctor._training(Context(env=dict(os.environ)))
    assert (check.state, check.detail, check.fix) == (
        doctor.WARN, detail, "rltray trainer-env create"
    )
