"""Child Pythons never import from the folder rltray was started in (app/childpython.py).

Regression pinned (review 3, finding 2; /tmp/review3-packaging/cwd_hijack.sh and
trainerenv_cwd.sh): `python -c` and `python -m` put the current folder first on
sys.path, so another user's ``venv.py``, ``platform.py``, ``pip/`` or ``rltray/`` in a
shared folder ran as the user when `rltray trainer-env create`, the wizard's backend
probe, `rltray export-model` or the settings window started a Python from there.

Real parts: a shared folder (mode 0777) holding the planted modules is the current
folder, and every child is a real Python started by the real function; a planted
module that runs leaves its name in a file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rltray.app import bundle, childpython, config
from rltray.app.errors import UserError
from rltray.app.paths import Paths
from rltray.app.service import Service
from rltray.app.training.trainerenv import build, python
from rltray.web import machine, server

PLANTED = ("venv", "platform", "pip", "rltray")


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder: anyone's to write, holding modules that must never run."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    mark = tmp_path / "ran"
    code = (f"open({str(mark)!r}, 'a').write(__name__ + '\\n')\n"
            "print('{\"ok\": true, \"planted\": true}')\n")  # fmt: skip
    (folder / "venv.py").write_text(code)
    (folder / "platform.py").write_text(code)
    for package in ("pip", "rltray"):
        (folder / package).mkdir()
        (folder / package / "__init__.py").write_text(code)
        (folder / package / "__main__.py").write_text(code)
    monkeypatch.chdir(folder)
    return mark


def planted_ran(mark: Path) -> str:
    return mark.read_text() if mark.exists() else ""


def test_the_base_python_check_ignores_a_planted_venv(shared: Path) -> None:
    """`trainer-env create` asks each candidate Python `import venv, ensurepip` first."""
    assert python._unusable(sys.executable) is None
    assert planted_ran(shared) == ""


def test_pip_runs_from_its_environment_never_from_the_current_folder(shared: Path) -> None:
    assert build._pip_version(Path(sys.executable)) >= (9,)
    assert planted_ran(shared) == ""


def test_the_wizards_backend_probe_ignores_a_planted_module(shared: Path) -> None:
    info = machine.probe(sys.executable)
    assert info.get("error") is None and info["executable"] == sys.executable, info
    assert planted_ran(shared) == ""


def test_export_model_runs_the_real_exporter(shared: Path, rltray_home: Path) -> None:
    from rltray.app.cli.model import _export_process

    config.set_value(Paths.from_env(), "training.python", sys.executable)
    with Service(Paths.from_env()) as service, pytest.raises(UserError) as said:
        # the real exporter answers that nothing serves Ollama there
        _export_process(service, ["locate", "--host", "http://127.0.0.1:9", "--model", "x"])
    assert "planted" not in str(said.value)
    assert planted_ran(shared) == ""


def test_rltrays_own_modules_start_without_the_current_folder(shared: Path) -> None:
    """The settings window and the wizard's `trainer-env create` job run rltray's modules
    with this interpreter: -P on 3.11+, the one-line start on 3.10 (both tried here)."""
    assert server.window_command() == childpython.own_module("rltray.web.window")
    for argv in (bundle.cli_argv("--help"),
                 [sys.executable, "-c", childpython._WITHOUT_CWD, "rltray.app.cli", "--help"]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "trainer-env" in done.stdout, (argv, done.stderr)
    assert planted_ran(shared) == ""


def test_a_child_starts_in_a_private_folder_with_safe_path_set(rltray_home: Path) -> None:
    Paths.from_env().ensure()
    chosen = childpython.options()
    assert chosen["cwd"] == str(rltray_home) and chosen["env"]["PYTHONSAFEPATH"] == "1"
