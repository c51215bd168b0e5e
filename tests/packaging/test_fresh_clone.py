"""A fresh `git clone` and the real Makefile: the tray appears, Ctrl+C ends quietly,
the wheel builds (issue 22, items 1 to 3).

What is real: git clone of the committed tree, the Makefile's venv rule (a new
venv, pip, setuptools, rltray and its dependencies from pip's cache or the
index), its `desktop` step linking this machine's python3-gi, `make run`
(only the training extras are left out with ``-o``: they are torch and several
minutes of download, and the tray does not need them), Xvfb, a private session
bus, the AppIndicator item registering, the first run's setup window (pywebview
on the linked gi), SIGINT to the whole process group while it is up, as a
terminal's Ctrl+C sends it. Fakes: the panel's StatusNotifierWatcher and the
notification server (tests/support/freshclone.py). bench/clone_to_tray.py times
the same path with the training extras.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from tests.support.dbus_fixtures import missing_dbus_daemon
from tests.support.freshclone import (
    Job,
    clone,
    desktop_session,
    missing_desktop_gi,
    user_env,
    window_processes,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make (apt install make)"),
]
NO_TRAINING = ["-o", ".venv/.training-installed"]  # make: take the extras as done


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A clone with the venv `make venv` builds, and what that printed."""
    root = tmp_path_factory.mktemp("fresh")
    repo = clone(root / "rltray")
    env = user_env(root / "home", root / "data")
    done = subprocess.run(["make", "venv"], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=1500)  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    return repo, said


def test_make_venv_on_a_fresh_clone_prints_no_setuptools_banners(fresh: tuple[Path, str]) -> None:
    _repo, said = fresh
    assert "would be ignored" not in said, said[-4000:]


def test_the_fresh_venvs_setuptools_builds_the_wheel_as_make_package_does(
    fresh: tuple[Path, str], tmp_path: Path
) -> None:
    """`make package` builds the wheel without build isolation: with the venv's own
    setuptools, which must read pyproject's SPDX license (ensurepip's 65.x did not)."""
    repo, _ = fresh
    python = str(repo / ".venv" / "bin" / "python")
    done = subprocess.run(
        [python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(repo)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "would be ignored" not in done.stderr
    (wheel,) = tmp_path.glob("rltray-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("rltray/web/templates/wizard.html", "rltray/web/static/app.js",
                    "rltray/web/static/vendor/uPlot.iife.min.js"):  # fmt: skip
        assert shipped in names


def test_make_run_shows_the_tray_and_ctrl_c_ends_it_without_a_word_from_make(
    fresh: tuple[Path, str], tmp_path: Path
) -> None:
    for missing in (missing_dbus_daemon(),
                    None if shutil.which("Xvfb") else "needs Xvfb (apt install xvfb)",
                    missing_desktop_gi()):  # fmt: skip
        if missing:
            pytest.skip(missing)
    repo, _ = fresh
    with desktop_session(tmp_path) as (desktop, watcher):
        env = user_env(tmp_path / "home", tmp_path / "data", desktop)
        job = Job(repo, [*NO_TRAINING, "run"], env)
        try:
            registered = job.wait_for(lambda: bool(watcher.items), timeout=300)
            assert registered is not None, job.text[-4000:]
            assert job.first("desktop GTK bindings: using the desktop's PyGObject"), job.text
            assert job.first("rltray is running in the tray"), job.text
            ours, _machine = job.before_rltray()
            assert ours <= 3, f"noise before rltray's first line:\n{job.text}"
            # a first run: the setup wizard opens; Ctrl+C comes while it is up
            assert job.wait_for(lambda: bool(window_processes(job.proc.pid)), 60), job.text
            time.sleep(3)
            job.interrupt()
        finally:
            job.close()
    text = job.text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert not [line for line in text.splitlines() if line.startswith("make: ***")], text
    assert text.splitlines()[-1] == "rltray stopped.", text
