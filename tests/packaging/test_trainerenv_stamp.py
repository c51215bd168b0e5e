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
import threading
import time
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


# -- review 4, item 1: the update holds no lock, runs once, and never from the index ------

PIP_S = 1.5  # how long the stand-in's pip takes before it fails


@pytest.fixture
def offline_env(rltray_home: Path) -> tuple[Path, Path]:
    """The data folder's trainer-env whose pip is slow and then fails, as offline: a shell
    script stands in for the environment's Python and logs each command it gets."""
    folder = rltray_home / "trainer-env"
    (folder / "bin").mkdir(parents=True)
    (folder / "pyvenv.cfg").write_text("home = /usr/bin\n")
    calls = rltray_home / "calls.log"
    python = folder / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nsleep {PIP_S}\n'
                      "echo 'ERROR: could not install' >&2\nexit 1\n")  # fmt: skip
    python.chmod(0o755)
    return python, calls


def pip_runs(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def test_the_update_holds_no_runner_lock_and_a_failure_waits_for_the_user(
    offline_env: tuple[Path, Path], upgraded_bundle: Path
) -> None:
    """Regression (review 4, item 1; /tmp/review4-a/stamp/pip_under_lock.py): pip ran under
    the runner's lock (running(), /api/status and the gate waited for it), and after it
    failed the gate's next tick ran it again, every minute."""
    from rltray.app.config import Config, TrainingSettings
    from rltray.app.store import Store
    from rltray.app.training.runner import TrainingRunner

    python, calls = offline_env
    paths = Paths.from_env()
    paths.ensure()
    training = TrainingSettings(base_model="/models/tiny", backend="torch", python=str(python))
    said: list[str] = []

    with Store(paths.db) as store:
        runner = TrainingRunner(store, paths, lambda: Config(training=training))

        def start(reason: str) -> None:
            try:
                runner.start(reason=reason)
            except jobbuild.TrainingNotSetUp as exc:
                said.append(str(exc))

        gate = threading.Thread(target=start, args=("scheduled",))
        gate.start()
        deadline = time.monotonic() + 30
        while not pip_runs(calls):
            assert time.monotonic() < deadline and gate.is_alive(), said
            time.sleep(0.02)
        asked = time.monotonic()
        assert runner.running() is False
        assert runner.progress["status"] == "idle"
        waited = time.monotonic() - asked
        assert gate.is_alive()  # pip was still running while running() answered
        assert waited < PIP_S / 3, waited
        gate.join(60)
        assert len(said) == 1 and "updating it failed: pip exited 1" in said[0], said
        assert said[0].endswith("run `rltray trainer-env create`.")

        began = time.monotonic()
        start("scheduled")  # the gate's next tick: the failure is remembered, no pip
        assert time.monotonic() - began < PIP_S and pip_runs(calls) == 1
        assert said[1] == said[0]
        start("manual")  # Train now tries again
        assert pip_runs(calls) == 2


def test_two_updates_at_once_run_pip_once(
    offline_env: tuple[Path, Path], upgraded_bundle: Path
) -> None:
    """The gate's round and the publisher's export asked at the same moment: the second
    waits on the environment's lock and finds the first one's answer."""
    python, calls = offline_env
    results: list[str] = []

    def ask() -> None:
        try:
            stamp.ensure_current(python)
        except Exception as exc:  # the answer is what is checked
            results.append(f"{type(exc).__name__}: {exc}")

    askers = [threading.Thread(target=ask) for _ in range(2)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(60)
    assert pip_runs(calls) == 1
    assert len(results) == 2 and all("updating it failed" in r for r in results), results
    assert (python.parent.parent / stamp.LOCK).exists()


def test_a_remembered_failure_ends_when_the_wheel_changes(
    old_env: Path, upgraded_bundle: Path
) -> None:
    """Real pip: the broken wheel fails once and is not tried again; the next rltray's
    wheel (another digest) is, and its success forgets the failure."""
    upgraded_bundle.write_bytes(b"not a wheel")
    training = config.load_config(Paths.from_env()).training
    with pytest.raises(jobbuild.TrainingNotSetUp, match="updating it failed: pip exited"):
        jobbuild.training_python(training)
    failed = old_env.parent.parent / stamp.FAILED
    assert failed.is_file()
    before = failed.stat().st_mtime_ns
    with pytest.raises(jobbuild.TrainingNotSetUp, match="updating it failed: pip exited"):
        jobbuild.training_python(training)
    assert failed.stat().st_mtime_ns == before  # no second pip
    assert "updating it failed" in (stamp.outlook(old_env) or "")
    make_wheel(upgraded_bundle.parent, "fixed")  # a new build: another digest
    assert jobbuild.training_python(training) == str(old_env)
    assert trainer_mark(old_env) == "fixed" and not failed.exists()


@pytest.fixture
def from_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """This rltray as a plain `pip install rltray`: its trainer would come from the index."""
    monkeypatch.setattr(stamp, "rltray_package", lambda: f"rltray=={VERSION}")


def test_an_update_from_the_index_is_not_tried_and_the_round_goes_on(
    old_env: Path, from_the_index: None
) -> None:
    """Offline, `pip install rltray==X` blocks for minutes and fails: rounds go on with the
    old trainer (it declares no keys this one lacks), and the warning is said once."""
    training = config.load_config(Paths.from_env()).training
    said: list[str] = []
    assert jobbuild.training_python(training, said=said.append) == str(old_env)
    assert trainer_mark(old_env) == "old"  # pip never ran
    (warning,) = said
    assert warning.startswith(f"The trainer environment {old_env.parent.parent} is out of date")
    assert f"rounds run with its old trainer (this rltray installs a trainer only from its " \
        f"own wheel or source tree, not rltray=={VERSION})" in warning
    assert "rounds run with its old trainer" in (stamp.outlook(old_env) or "")


def test_an_old_trainer_that_cannot_read_the_jobs_fails_the_round(
    old_env: Path, from_the_index: None
) -> None:
    """The case of review 3, finding 3: the old trainer's job.py knows no 'replay' key."""
    import rltray.app

    ours = (Path(str(rltray.app.__file__)).parents[1] / "trainer" / "job.py").read_text()
    assert '"truncated", "replay", "reward",' in ours
    site = next((old_env.parent.parent / "lib").glob("python3*/site-packages"))
    (site / "rltray" / "trainer" / "job.py").write_text(
        ours.replace('"truncated", "replay", "reward",', '"truncated", "reward",')
    )
    training = config.load_config(Paths.from_env()).training
    with pytest.raises(jobbuild.TrainingNotSetUp) as said:
        jobbuild.training_python(training)
    message = str(said.value)
    assert "its trainer cannot read this rltray's jobs (it does not know the example key " \
        "'replay')" in message, message
    assert message.endswith("run `rltray trainer-env create`.")
    assert trainer_mark(old_env) == "old"


def test_the_runner_logs_the_old_trainer_warning_once(
    old_env: Path, from_the_index: None
) -> None:
    """The gate asks every minute: the warning goes to the event log once, not each time."""
    from rltray.app.config import Config, TrainingSettings
    from rltray.app.store import Store
    from rltray.app.training.runner import TrainingRunner

    paths = Paths.from_env()
    training = TrainingSettings(base_model="/models/tiny", backend="torch", python=str(old_env))
    with Store(paths.db) as store:
        runner = TrainingRunner(store, paths, lambda: Config(training=training))
        for _ in range(3):  # no ratings: each start ends at the job, after the trainer check
            with pytest.raises(jobbuild.NotEnoughRatings):
                runner.start(reason="scheduled")
        said = [e for e in store.events(limit=20) if "rounds run with its old trainer" in str(e)]
    assert len(said) == 1, said
    assert trainer_mark(old_env) == "old"
