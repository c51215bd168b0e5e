"""Build the PyInstaller bundle once and reuse it while its sources are unchanged.

Why a content-keyed cache: the build takes a minute or two on two cores, and
every bundle test (and bench/bundle_startup.py) needs the same bundle. The
cache key hashes every file that goes into it (app/, web/, trainer/,
packaging/, pyproject.toml); any change rebuilds.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "test-bundle"
SOURCES = ("app", "web", "trainer", "packaging")
CHECK_GTK = (
    "import gi; gi.require_version('Gtk', '3.0'); "
    "gi.require_version('AyatanaAppIndicator3', '0.1'); "
    "from gi.repository import Gtk, AyatanaAppIndicator3"
)


def missing_tools() -> str | None:
    """Why the bundle cannot be built here (one sentence), or None."""
    for module, what in (("PyInstaller", "PyInstaller"), ("cairosvg", "cairosvg")):
        if importlib.util.find_spec(module) is None:
            return f"needs {what}: pip install -e '.[package]' (`make test` installs it)"
    probe = subprocess.run([sys.executable, "-c", CHECK_GTK], capture_output=True, text=True)
    if probe.returncode != 0:
        return (
            "needs PyGObject with GTK 3 and AyatanaAppIndicator3 so the bundle holds the tray "
            "(`make test` installs them)"
        )
    return None


def source_key() -> str:
    digest = hashlib.sha256()
    files = [ROOT / "pyproject.toml"]
    for folder in SOURCES:
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and _wanted(p)]
    for path in sorted(files):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _wanted(path: Path) -> bool:
    return "__pycache__" not in path.parts and path.suffix not in (".pyc", ".png")


def bundle_dir(out: Path = CACHE) -> Path:
    return out / "dist" / "rltray"


def build(out: Path = CACHE) -> tuple[Path, str]:
    """The built bundle folder (rebuilt when the sources changed) and the build's report."""
    key = source_key()
    stamp = out / "source-key"
    report = out / "build-report.txt"
    if stamp.exists() and stamp.read_text() == key and bundle_dir(out).is_dir():
        return bundle_dir(out), report.read_text()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_KEYRING_BACKEND"}
    done = subprocess.run(
        ["nice", "-n", "10", sys.executable, str(ROOT / "packaging" / "build.py"),
         "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=1200,
    )  # fmt: skip
    if done.returncode != 0:
        said = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        raise RuntimeError(f"the bundle build failed:\n{said}")
    lines = [line for line in done.stdout.splitlines() if line.startswith(("bundle:", "archive:"))]
    report.write_text("\n".join(lines) + "\n")
    stamp.write_text(key)
    return bundle_dir(out), report.read_text()
