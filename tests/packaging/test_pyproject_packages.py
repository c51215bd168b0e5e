"""pyproject.toml names every folder setuptools sees as a package, and every data file ships.

Why: a folder of the source tree that is missing from ``packages`` (web/static,
web/templates: data only, no Python) makes setuptools print a ~90-line
"Package would be ignored" banner on every install: about 275 lines before
rltray's first on `make run` (issue 22, item 2). A data file no package-data
glob matches is left out of the wheel, so the bundle and `pip install` lack it.
Read from pyproject and the tracked files, so a new folder or file type fails here.
"""

from __future__ import annotations

import fnmatch
import subprocess
from pathlib import Path

import tomlkit

ROOT = Path(__file__).resolve().parents[2]


def setuptools_config() -> dict:
    # tomlkit, not tomllib: rltray supports Python 3.10
    return tomlkit.parse((ROOT / "pyproject.toml").read_text()).unwrap()["tool"]["setuptools"]


def tracked(folder: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--", folder], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [ROOT / line for line in out.splitlines()]


def package_of(path: Path, roots: dict[str, str]) -> str:
    """The dotted package a tracked file's folder is, through ``package-dir``."""
    rel = path.parent.relative_to(ROOT)
    for package, folder in roots.items():
        if rel.parts[: len(Path(folder).parts)] == Path(folder).parts:
            rest = rel.parts[len(Path(folder).parts) :]
            return ".".join([package, *rest])
    raise AssertionError(f"{path} is under no package-dir root")


def test_every_folder_with_tracked_files_is_a_listed_package() -> None:
    config = setuptools_config()
    roots, listed = config["package-dir"], set(config["packages"])
    folders = {package_of(p, roots) for folder in roots.values() for p in tracked(folder)}
    assert folders - listed == set(), "add these to [tool.setuptools] packages"


def test_every_tracked_data_file_matches_its_packages_data_globs() -> None:
    config = setuptools_config()
    roots, data = config["package-dir"], config["package-data"]
    unshipped = []
    for folder in roots.values():
        for path in tracked(folder):
            if path.suffix == ".py":
                continue
            globs = data.get(package_of(path, roots), [])
            if not any(fnmatch.fnmatch(path.name, g) for g in globs):
                unshipped.append(str(path.relative_to(ROOT)))
    assert unshipped == [], "no package-data glob ships these"
