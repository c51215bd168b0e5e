"""Give the venv the desktop's GTK bindings (PyGObject, ``gi``) so `make run` shows the tray.

Why: on Linux the tray (pystray's AppIndicator backend) and the settings window
(pywebview's GTK backend) need ``gi``. On PyPI PyGObject is a source build that
needs a C compiler and -dev packages a desktop user does not have, while the
desktop already ships it (Debian/Ubuntu ``python3-gi``, Fedora
``python3-gobject``, Arch ``python-gobject``). A venv does not see the system's
site-packages, so without this step a Linux desktop got "No tray icon … No
module named 'gi'", headless mode and no setup wizard (issue 22). In order:

1. the venv imports ``gi`` already (a wheel or an earlier run): nothing to do;
2. a system ``gi`` whose compiled ``_gi`` extension this venv's Python loads
   (its file name is ``_gi`` + one of ``importlib.machinery.EXTENSION_SUFFIXES``):
   the venv sees that one package, through a folder holding only a symlink to it
   and a ``.pth`` file naming that folder; the rest of the system's
   site-packages stays invisible;
3. a compiler, pkg-config, the GObject-introspection and cairo headers and
   Python.h: pip builds PyGObject;
4. otherwise one sentence naming the packages to install; rltray then runs
   headless until they are there (the next `make run` picks them up).

Then it names the package of any typelib the tray or the window still lacks.
cairo is not linked: neither pystray's GTK/AppIndicator backends nor pywebview's
GTK backend import it. Standard library only (it runs in a bare venv); it always
exits 0, because rltray runs without a tray. `make run` and `make test` call it.
"""

from __future__ import annotations

import glob
import importlib.machinery
import json
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Where distributions put the system Python's packages (Debian/Ubuntu; Fedora; Arch).
SYSTEM_SITES = (
    "/usr/lib/python3/dist-packages",
    "/usr/lib64/python3.*/site-packages",
    "/usr/lib/python3.*/site-packages",
)
LINK_FOLDER = "desktop-gi"  # inside the venv: holds only the `gi` symlink
PTH_NAME = "rltray-desktop-gi.pth"

# What the tray and the window load from the typelibs, each with the alternatives that do.
NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "Gtk": (("Gtk", "3.0"),),
    "AppIndicator": (("AyatanaAppIndicator3", "0.1"), ("AppIndicator3", "0.1")),
    "WebKit2": (("WebKit2", "4.1"), ("WebKit2", "4.0")),
}
PACKAGES: dict[str, dict[str, str]] = {
    "gi": {"debian": "python3-gi", "fedora": "python3-gobject", "arch": "python-gobject"},
    "Gtk": {"debian": "gir1.2-gtk-3.0", "fedora": "gtk3", "arch": "gtk3"},
    "AppIndicator": {
        "debian": "gir1.2-ayatanaappindicator3-0.1",
        "fedora": "libayatana-appindicator-gtk3",
        "arch": "libayatana-appindicator",
    },
    "WebKit2": {
        "debian": "gir1.2-webkit2-4.1",
        "fedora": "webkit2gtk4.1",
        "arch": "webkit2gtk-4.1",
    },
}
INSTALL = {"debian": "sudo apt install", "fedora": "sudo dnf install", "arch": "sudo pacman -S"}
BUILD_PACKAGES = {
    "debian": "gcc pkg-config libgirepository1.0-dev libcairo2-dev python3-dev",
    "fedora": "gcc pkg-config gobject-introspection-devel cairo-gobject-devel python3-devel",
    "arch": "base-devel gobject-introspection cairo",
}


@dataclass(frozen=True)
class SystemGi:
    """A system ``gi`` package folder, its ``_gi`` extension's file names, and the
    PyGObject metadata folder beside it (PyInstaller's gi hook asks its version)."""

    folder: Path
    extensions: tuple[str, ...]
    metadata: Path | None = None

    def loads_in(self, suffixes: list[str]) -> bool:
        return any(f"_gi{suffix}" in self.extensions for suffix in suffixes)

    def python(self) -> str | None:
        """The CPython version its extension was built for ("3.12"), when the name says."""
        for name in self.extensions:
            found = re.search(r"cpython-3(\d+)", name)
            if found:
                return f"3.{found.group(1)}"
        return None


@dataclass(frozen=True)
class Plan:
    """What to do: "ok" (nothing), "link" ``source``, "build" with ``pip_args``, or "missing"."""

    action: str
    message: str
    source: SystemGi | None = None
    pip_args: tuple[str, ...] = ()


def family(os_release: str) -> str:
    """The distribution family: "debian", "fedora", "arch" or "other" (/etc/os-release)."""
    words: list[str] = []
    for line in os_release.splitlines():
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            words += value.strip().strip("\"'").lower().split()
    for word in words:
        if word in ("debian", "ubuntu"):
            return "debian"
        if word in ("fedora", "rhel", "centos"):
            return "fedora"
        if word in ("arch", "manjaro"):
            return "arch"
    return "other"


def install_line(names: list[str], distro: str) -> str:
    """The command that installs the packages for ``names`` (keys of PACKAGES) here."""
    if distro not in INSTALL:
        debian = " ".join(PACKAGES[n]["debian"] for n in names)
        return f"your distribution's packages for these (Debian/Ubuntu: sudo apt install {debian})"
    return f"{INSTALL[distro]} {' '.join(PACKAGES[n][distro] for n in names)}"


def decide(
    has_gi: bool,
    found: list[SystemGi],
    suffixes: list[str],
    cannot_build: list[str],
    distro: str,
    girepository2: bool = False,
) -> Plan:
    """The step for this venv; ``cannot_build`` lists what a PyGObject build lacks ([] = none)."""
    if has_gi:
        return Plan("ok", "this Python imports gi already")
    for candidate in found:
        if candidate.loads_in(suffixes):
            return Plan("link", f"using the desktop's PyGObject ({candidate.folder})", candidate)
    if not cannot_build:
        # PyGObject 3.51+ needs girepository-2.0 (GLib 2.80); older desktops have 1.0 only
        spec = "pygobject" if girepository2 else "pygobject<3.51"
        return Plan("build", f"building PyGObject ({spec}) for this Python", pip_args=(spec,))
    runtime = install_line(["gi", "AppIndicator", "WebKit2"], distro)
    build = BUILD_PACKAGES.get(distro, "a C compiler, pkg-config and the GObject-introspection "
                                       "and cairo development headers")  # fmt: skip
    if found:
        other = found[0]
        version = other.python()
        python = f"Python {version}" if version else "another Python"
        return Plan(
            "missing",
            f"the desktop's PyGObject ({other.folder}) is built for {python} and this venv runs "
            f"Python {sys.version_info.major}.{sys.version_info.minor}: make the venv with that "
            f"Python (`make clean run PYTHON=python{version or '3'}`), or install what PyGObject "
            f"builds with ({build}) and run `make run` again",
        )
    return Plan(
        "missing",
        f"no PyGObject for the tray; install the desktop's ({runtime}) and run `make run` again "
        f"(building it here needs {', '.join(cannot_build)})",
    )


def missing_typelibs(loaded: dict[str, bool], distro: str) -> str | None:
    """One sentence naming the packages of the typelibs that did not load, or None."""
    names = [name for name in NEEDS if not loaded.get(name)]
    if not names:
        return None
    return (
        f"gi works but {', '.join(names)} did not load: {install_line(names, distro)} "
        "(the tray needs Gtk and AppIndicator, the settings window WebKit2)"
    )


# -- facts (everything below reads the machine) -------------------------------------------


def system_gis(sites: tuple[str, ...] = SYSTEM_SITES) -> list[SystemGi]:
    """Every system ``gi`` package folder, its ``_gi`` extension names and its metadata."""
    found = []
    for pattern in sites:
        for site in sorted(glob.glob(pattern)):
            folder = Path(site) / "gi"
            if (folder / "__init__.py").is_file():
                names = tuple(sorted(p.name for p in folder.glob("_gi.*") if p.suffix != ".py"))
                found.append(SystemGi(folder, names, _metadata(Path(site))))
    return found


def _metadata(site: Path) -> Path | None:
    for entry in sorted(site.iterdir()):
        name = entry.name.lower()
        if name.startswith("pygobject-") and name.endswith((".egg-info", ".dist-info")):
            return entry
    return None


def build_blockers() -> list[str]:
    """What a PyGObject source build lacks here ([] when it can build)."""
    lacks = []
    if not (shutil.which("cc") or shutil.which("gcc")):
        lacks.append("a C compiler")
    if shutil.which("pkg-config") is None:
        lacks.append("pkg-config")
    else:
        for module in ("gobject-introspection-1.0", "cairo"):
            if subprocess.run(["pkg-config", "--exists", module]).returncode != 0:
                lacks.append(f"the {module} headers")
    if not (Path(sysconfig.get_path("include")) / "Python.h").is_file():
        lacks.append("Python.h")
    return lacks


def has_girepository2() -> bool:
    return bool(shutil.which("pkg-config")) and (
        subprocess.run(["pkg-config", "--exists", "girepository-2.0"]).returncode == 0
    )


PROBE = """
import json, sys
needs = json.loads(sys.argv[1])
try:
    import gi
except ImportError:
    print(json.dumps(None)); raise SystemExit
loaded = {}
for name, options in needs.items():
    loaded[name] = False
    for namespace, version in options:
        try:
            gi.require_version(namespace, version)
            __import__("gi.repository." + namespace)
            loaded[name] = True
            break
        except (ImportError, ValueError):
            pass
print(json.dumps(loaded))
"""


def probe(python: str = sys.executable) -> dict[str, bool] | None:
    """What ``python`` (a fresh process: .pth files count) loads; None when gi itself fails."""
    done = subprocess.run(
        [python, "-c", PROBE, json.dumps(NEEDS)], capture_output=True, text=True, timeout=60
    )
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None


def link(source: SystemGi, prefix: Path = Path(sys.prefix)) -> bool:
    """Make ``source``'s gi (and its metadata) importable in the venv at ``prefix``.

    The venv's folder holds symlinks to these two only, named by a .pth file; True
    when something changed (a first link, or the desktop's PyGObject moved).
    """
    folder = prefix / LINK_FOLDER
    folder.mkdir(exist_ok=True)
    wanted = {"gi": source.folder}
    if source.metadata is not None:
        wanted[source.metadata.name] = source.metadata
    changed = False
    for entry in folder.iterdir():
        if (
            entry.name not in wanted
            or not entry.is_symlink()
            or entry.readlink() != wanted[entry.name]
        ):
            entry.unlink()
            changed = True
    for name, target in wanted.items():
        if not (folder / name).is_symlink():
            (folder / name).symlink_to(target, target_is_directory=True)
            changed = True
    pth = _pth(prefix)
    if not pth.is_file() or pth.read_text(encoding="utf-8") != f"{folder}\n":
        pth.write_text(f"{folder}\n", encoding="utf-8")
        changed = True
    return changed


def unlink(prefix: Path = Path(sys.prefix)) -> None:
    """Undo ``link``: the .pth file and the symlinks go."""
    _pth(prefix).unlink(missing_ok=True)
    folder = prefix / LINK_FOLDER
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.is_symlink():
                entry.unlink()


def linked(prefix: Path = Path(sys.prefix)) -> bool:
    """Whether the venv's gi is this script's link (then it is refreshed on every run)."""
    return (prefix / LINK_FOLDER / "gi").is_symlink() and _pth(prefix).is_file()


def _pth(prefix: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(prefix)})) / PTH_NAME


def say(message: str) -> None:
    print(f"desktop GTK bindings: {message}", file=sys.stderr, flush=True)


def main() -> int:
    if not sys.platform.startswith("linux"):
        return 0  # macOS and Windows trays need no gi
    if sys.prefix == sys.base_prefix:
        say("not in a venv; nothing changed")
        return 0
    try:
        os_release = Path("/etc/os-release").read_text(encoding="utf-8")
    except OSError:
        os_release = ""
    distro = family(os_release)
    loaded = probe()
    ours = linked()  # our own link is decided again: the desktop's gi may have changed
    plan = decide(
        loaded is not None and not ours,
        system_gis(),
        importlib.machinery.EXTENSION_SUFFIXES,
        [] if loaded is not None else build_blockers(),
        distro,
        has_girepository2() if loaded is None else False,
    )
    if ours and plan.action != "link":
        unlink()
    if plan.action == "link" and plan.source is not None:
        if not link(plan.source) and loaded is not None:
            plan = Plan("ok", "the desktop's PyGObject is linked already")
        else:
            loaded = probe()
        if loaded is None:  # the extension did not load after all: undo, try a build
            unlink()
            plan = decide(False, [], [], build_blockers(), distro, has_girepository2())
    if plan.action == "build":
        say(plan.message)
        pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *plan.pip_args])
        loaded = probe()
        if loaded is None:
            everything = install_line(["gi", "AppIndicator", "WebKit2"], distro)
            plan = Plan("missing", f"PyGObject did not build; install the desktop's ({everything}) "
                                   "and run `make run` again")  # fmt: skip
    if loaded is None:
        say(plan.message)
        return 0
    if plan.action != "ok":
        say(plan.message)
    missing = missing_typelibs(loaded, distro)
    if missing:
        say(missing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
