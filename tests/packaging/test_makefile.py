"""What the Makefile decides per OS, and its first step with a too-old Python.

No Windows here: `make -n` (print, run nothing) with ``OS=Windows_NT`` shows the
commands a Windows `make run` would run (issue 23 item 10). The Python check is run
for real by make, with an interpreter that reports 3.9 as a stock Mac's python3 does
(issue 23 item 8); it stops before any venv exists. ``VENV`` points into a temporary
folder so nothing here touches the working tree's .venv.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


def check_python() -> ModuleType:
    path = ROOT / "packaging" / "check_python.py"
    spec = importlib.util.spec_from_file_location("check_python_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_run_on_windows_uses_the_venvs_scripts_folder_and_the_py_launcher(tmp_path: Path):
    venv = tmp_path / ".venv"
    done = make("-n", "run", "OS=Windows_NT", f"VENV={venv}")
    assert done.returncode == 0, done.stderr
    assert "py -3 packaging/check_python.py" in done.stdout
    assert f"py -3 -m venv {venv}" in done.stdout
    assert f"exec {venv}/Scripts/rltray run" in done.stdout
    assert f"{venv}/bin" not in done.stdout and "python3" not in done.stdout


def test_make_run_elsewhere_keeps_bin_and_python3(tmp_path: Path):
    venv = tmp_path / ".venv"
    done = make("-n", "run", f"VENV={venv}")
    assert done.returncode == 0, done.stderr
    assert f"python3 -m venv {venv}" in done.stdout
    assert f"exec {venv}/bin/rltray run" in done.stdout and "Scripts" not in done.stdout


def test_make_install_on_windows_links_nothing_and_says_what_to_add_to_path(tmp_path: Path):
    venv = tmp_path / ".venv"
    windows = make("-n", "install", "OS=Windows_NT", f"VENV={venv}")
    assert "ln -sf" not in windows.stdout and f"{venv}/Scripts to your user PATH" in windows.stdout
    assert "ln -sf" in make("-n", "install", f"VENV={venv}").stdout


def test_a_too_old_python_stops_before_the_venv_with_one_sentence(tmp_path: Path):
    old = tmp_path / "python3.9"
    old.write_text(
        "#!/bin/sh\n"  # this Python, reporting itself as a stock Mac's 3.9
        f'exec "{sys.executable}" -c "import runpy, sys; sys.version_info = (3, 9, 6); '
        'sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name=\'__main__\')" "$@"\n'
    )
    old.chmod(0o755)
    venv = tmp_path / ".venv"
    done = make(f"{venv}/.app-installed", f"VENV={venv}", f"PYTHON={old}")
    assert done.returncode != 0
    assert "rltray needs Python 3.10 or newer" in done.stderr and "is 3.9;" in done.stderr
    assert "make run PYTHON=" in done.stderr
    assert not venv.exists()


def test_the_sentence_names_where_to_get_a_python_on_each_os():
    check = check_python()
    assert check.problem((3, 11, 2), "darwin", "/usr/bin/python3") is None
    mac = check.problem((3, 9, 6), "darwin", "/usr/bin/python3")
    assert "/usr/bin/python3 is 3.9" in mac and "python.org" in mac and "brew" in mac
    assert "winget" in check.problem((3, 8, 10), "win32", r"C:\Python38\python.exe")
    assert "apt install" in check.problem((3, 9, 2), "linux", "/usr/bin/python3")
