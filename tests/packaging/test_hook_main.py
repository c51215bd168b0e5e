"""The bundle's start-up repair of the library search path its children inherit.

The real Linux behaviour is tested on a built bundle (test_bundle.py, LD_LIBRARY_PATH);
the Windows branch (issue 23 item 12: PyInstaller's ``SetDllDirectoryW(<bundle>)`` is
inherited by every child) is checked here as the decision, with kernel32 stood in for.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

HOOK_MAIN = Path(__file__).parents[2] / "packaging" / "pyinstaller" / "hook_main.py"


def hook_main() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hook_main_under_test", HOOK_MAIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Kernel32:
    def __init__(self) -> None:
        self.dll_directories: list[object] = []

    def SetDllDirectoryW(self, path: object) -> int:  # the Windows name
        self.dll_directories.append(path)
        return 1


def test_on_windows_children_get_the_standard_dll_search_and_this_process_keeps_the_bundle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kernel32, added = Kernel32(), []
    monkeypatch.setattr(sys, "_MEIPASS", r"C:\rltray\_internal", raising=False)
    hook_main().restore_library_path("win32", kernel32, added.append)
    assert kernel32.dll_directories == [None]
    assert added == [r"C:\rltray\_internal"]


def test_elsewhere_only_ld_library_path_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel32, added = Kernel32(), []
    monkeypatch.setenv("LD_LIBRARY_PATH", "/bundle")
    monkeypatch.setenv("LD_LIBRARY_PATH_ORIG", "/opt/mine")
    hook_main().restore_library_path("linux", kernel32, added.append)
    assert kernel32.dll_directories == [] and added == []
    assert os.environ["LD_LIBRARY_PATH"] == "/opt/mine" and "LD_LIBRARY_PATH_ORIG" not in os.environ


def test_the_bundle_says_it_was_replaced_instead_of_failing_an_import_obscurely(
    tmp_path: Path,
) -> None:
    """Regression (review 3, finding 6; /tmp/review3-packaging/upgrade_running.sh): a bundle
    replaced in place while the tray ran failed its next lazy import with a raw error.
    A real child process, a real executable file replaced as tar replaces it (a new file
    renamed over the old), and real imports after that."""
    import subprocess

    exe = tmp_path / "rltray"
    exe.write_bytes(b"old build")
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "loaded_before.py").write_text("")
    (mods / "loaded_after.py").write_text("")
    script = (
        "import os, sys\n"
        f"sys.path[:0] = [{str(HOOK_MAIN.parent)!r}, {str(mods)!r}]\n"
        "import rltray_main\n"
        f"sys.meta_path.insert(0, rltray_main.ReplacedGuard({str(exe)!r}))\n"
        "import loaded_before\n"
        f"open({str(exe)!r} + '.new', 'wb').write(b'new build')\n"
        f"os.replace({str(exe)!r} + '.new', {str(exe)!r})\n"
        "try:\n"
        "    import loaded_after\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"rltray was replaced on disk while it ran ({exe}), so it cannot load loaded_after; "
        "quit rltray (Quit rltray in its menu) and start it again, and next time quit it "
        "before replacing its folder"
    )
