"""packaging/desktop_gi.py: which GTK bindings a venv gets, and the real link in a real venv.

The decision is a pure function (``decide``), stepped here through each case a
desktop meets: gi already there, the system's gi built for this Python, for
another Python, a machine that can build PyGObject, one that cannot (issue 22,
item 1). The last tests run the script in a fresh venv against this machine's
own ``python3-gi`` and check that the venv sees gi and nothing else of the
system's site-packages.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "packaging" / "desktop_gi.py"
DEBIAN_TYPELIBS = "gir1.2-ayatanaappindicator3-0.1 gir1.2-webkit2-4.1"
PY311 = [".cpython-311-x86_64-linux-gnu.so", ".abi3.so", ".so"]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("desktop_gi", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["desktop_gi"] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


dg = load()


def system_gi(folder: str, extension: str) -> object:
    return dg.SystemGi(Path(folder), (extension,))


DEBIAN_311 = system_gi("/usr/lib/python3/dist-packages/gi", "_gi.cpython-311-x86_64-linux-gnu.so")
UBUNTU_312 = system_gi("/usr/lib/python3/dist-packages/gi", "_gi.cpython-312-x86_64-linux-gnu.so")


def test_a_venv_that_imports_gi_is_left_alone() -> None:
    plan = dg.decide(True, [DEBIAN_311], PY311, [], "debian")
    assert plan.action == "ok"


def test_the_desktops_gi_built_for_this_python_is_linked_before_any_build() -> None:
    plan = dg.decide(False, [UBUNTU_312, DEBIAN_311], PY311, [], "debian")
    assert (plan.action, plan.source) == ("link", DEBIAN_311)


def test_another_pythons_gi_is_not_linked_though_its_name_ends_in_so() -> None:
    """``.so`` is one of the suffixes; the whole file name has to match, not its end."""
    plan = dg.decide(False, [UBUNTU_312], PY311, [], "debian")
    assert (plan.action, plan.pip_args) == ("build", ("pygobject<3.51",))
    newer = dg.decide(False, [UBUNTU_312], PY311, [], "debian", girepository2=True)
    assert newer.pip_args == ("pygobject",)


def test_another_pythons_gi_and_no_compiler_names_the_python_to_use() -> None:
    plan = dg.decide(False, [UBUNTU_312], PY311, ["a C compiler"], "debian")
    assert plan.action == "missing"
    assert "built for Python 3.12" in plan.message
    assert "`make clean run PYTHON=python3.12`" in plan.message
    assert "libgirepository1.0-dev libcairo2-dev" in plan.message


@pytest.mark.parametrize(
    ("distro", "command"),
    [
        ("debian", f"sudo apt install python3-gi {DEBIAN_TYPELIBS}"),
        ("fedora", "sudo dnf install python3-gobject libayatana-appindicator-gtk3 webkit2gtk4.1"),
        ("arch", "sudo pacman -S python-gobject libayatana-appindicator webkit2gtk-4.1"),
        ("other", f"(Debian/Ubuntu: sudo apt install python3-gi {DEBIAN_TYPELIBS})"),
    ],
)
def test_nothing_to_link_or_build_names_the_exact_packages(distro: str, command: str) -> None:
    plan = dg.decide(False, [], PY311, ["a C compiler", "pkg-config"], distro)
    assert plan.action == "missing"
    assert command in plan.message
    assert "a C compiler, pkg-config" in plan.message


@pytest.mark.parametrize(
    ("os_release", "family"),
    [
        ('ID=debian\nVERSION_ID="12"\n', "debian"),
        ("ID=ubuntu\nID_LIKE=debian\n", "debian"),
        ('ID=linuxmint\nID_LIKE="ubuntu debian"\n', "debian"),
        ("ID=fedora\nVERSION_ID=40\n", "fedora"),
        ('ID="rocky"\nID_LIKE="rhel centos fedora"\n', "fedora"),
        ("ID=endeavouros\nID_LIKE=arch\n", "arch"),
        ("ID=alpine\n", "other"),
        ("", "other"),
    ],
)
def test_the_distribution_family_comes_from_os_release(os_release: str, family: str) -> None:
    assert dg.family(os_release) == family


def test_a_missing_typelib_is_named_by_its_package() -> None:
    everything = {"Gtk": True, "AppIndicator": True, "WebKit2": True}
    assert dg.missing_typelibs(everything, "debian") is None
    said = dg.missing_typelibs({"Gtk": True, "AppIndicator": False, "WebKit2": False}, "debian")
    assert said is not None
    assert "sudo apt install gir1.2-ayatanaappindicator3-0.1 gir1.2-webkit2-4.1" in said


def test_system_gis_reads_each_sites_extension_names(tmp_path: Path) -> None:
    for site, ext in (("a", "_gi.cpython-311-x86_64-linux-gnu.so"), ("b", "_gi.abi3.so")):
        (tmp_path / site / "gi").mkdir(parents=True)
        (tmp_path / site / "gi" / "__init__.py").write_text("")
        (tmp_path / site / "gi" / ext).write_bytes(b"")
    (tmp_path / "a" / "PyGObject-3.42.2.egg-info").mkdir()  # Debian's metadata
    (tmp_path / "c" / "gi").mkdir(parents=True)  # no __init__.py: not a package
    found = dg.system_gis((str(tmp_path / "*"),))
    assert [(g.folder.parent.name, g.extensions) for g in found] == [
        ("a", ("_gi.cpython-311-x86_64-linux-gnu.so",)),
        ("b", ("_gi.abi3.so",)),
    ]
    assert found[0].metadata == tmp_path / "a" / "PyGObject-3.42.2.egg-info"
    assert found[1].metadata is None
    assert found[0].python() == "3.11" and found[1].python() is None


# -- the script in a real venv, against this machine's python3-gi ---------------------------


def matching_system_gi() -> object | None:
    import importlib.machinery

    for found in dg.system_gis():
        if found.loads_in(importlib.machinery.EXTENSION_SUFFIXES):
            return found
    return None


@pytest.fixture
def bare_venv(tmp_path: Path) -> Path:
    if not sys.platform.startswith("linux"):
        pytest.skip("the desktop's gi is a Linux matter")
    if matching_system_gi() is None:
        pytest.skip(
            "needs the desktop's PyGObject built for this Python "
            f"({sys.version_info.major}.{sys.version_info.minor}): apt install python3-gi"
        )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv


def test_a_fresh_venv_sees_the_desktops_gi_and_nothing_else_of_the_system(
    bare_venv: Path,
) -> None:
    python = str(bare_venv / "bin" / "python")
    before = subprocess.run([python, "-c", "import gi"], capture_output=True, text=True)
    assert before.returncode != 0, "a fresh venv must not see gi before the script ran"
    first = subprocess.run([python, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "using the desktop's PyGObject" in first.stderr
    check = (
        "import gi, json, sys; gi.require_version('Gtk', '3.0'); from gi.repository import Gtk; "
        "print(json.dumps([gi.__file__, sys.path]))"
    )
    seen = subprocess.run([python, "-c", check], capture_output=True, text=True)
    assert seen.returncode == 0, seen.stderr
    gi_file, path = json.loads(seen.stdout)
    assert gi_file.startswith(str(bare_venv / "desktop-gi" / "gi"))
    system_site = str(matching_system_gi().folder.parent)  # type: ignore[attr-defined]
    assert system_site not in path
    # the system's other packages stay invisible (Debian's python3-cairo sits next to gi)
    other = subprocess.run([python, "-c", "import cairo"], capture_output=True, text=True)
    assert "No module named 'cairo'" in other.stderr
    again = subprocess.run([python, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert (again.returncode, again.stderr) == (0, ""), "a second run has nothing to do or say"
    if matching_system_gi().metadata is None:  # type: ignore[attr-defined]
        return  # this distribution ships gi without its metadata folder
    # PyInstaller's gi hook (make package) asks the distribution's version
    version = "import importlib.metadata as m; print(m.version('pygobject'))"
    asked = subprocess.run([python, "-c", version], capture_output=True, text=True)
    assert asked.returncode == 0 and asked.stdout.strip(), asked.stderr
    # a venv linked before the metadata was: the next run adds it
    for entry in (bare_venv / "desktop-gi").iterdir():
        if entry.name != "gi":
            entry.unlink()
    assert subprocess.run([python, "-c", version], capture_output=True).returncode != 0
    repaired = subprocess.run([python, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert repaired.returncode == 0, repaired.stderr
    assert subprocess.run([python, "-c", version], capture_output=True).returncode == 0
