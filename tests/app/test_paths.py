"""Paths: one switch (RLTRAY_HOME) moves every file; ensure() makes private folders."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from rltray.app.paths import Paths, default_home

FILES = ("db", "config", "hook_log", "lock", "endpoint")
FOLDERS = (
    "spool",
    "spool_incoming",
    "spool_rejected",
    "hook_state",
    "adapters",
    "runs",
    "logs",
    "backups",
)


def test_rltray_home_moves_everything(tmp_path: Path) -> None:
    home = tmp_path / "elsewhere"
    paths = Paths.from_env({"RLTRAY_HOME": str(home)})
    assert paths.home == home
    for name in FILES + FOLDERS:
        value = getattr(paths, name)
        assert isinstance(value, Path)
        assert value.is_relative_to(home), name
    # No two things share a path.
    assert len({getattr(paths, n) for n in FILES + FOLDERS}) == len(FILES + FOLDERS)


def test_the_autouse_fixture_already_moved_home(rltray_home: Path) -> None:
    assert Paths.from_env().home == rltray_home


def test_home_is_absolute_and_expands_tilde(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_home({"RLTRAY_HOME": "~/data"}) == tmp_path / "data"
    monkeypatch.chdir(tmp_path)
    assert default_home({"RLTRAY_HOME": "rel"}) == tmp_path / "rel"


def test_without_the_switch_platformdirs_decides(tmp_path: Path) -> None:
    home = default_home({})
    assert home.is_absolute() and "rltray" in str(home).lower()


def test_ensure_creates_private_folders_and_is_idempotent(rltray_home: Path) -> None:
    old = os.umask(0o022)
    try:
        paths = Paths.from_env().ensure()
        paths.ensure()
    finally:
        os.umask(old)
    for name in ("home", *FOLDERS):
        folder = getattr(paths, name)
        assert folder.is_dir(), name
        if os.name == "posix":
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700, name
    # ensure() creates folders only; files appear when something writes them.
    assert not any(getattr(paths, n).exists() for n in FILES)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_ensure_tightens_an_existing_open_folder(rltray_home: Path) -> None:
    rltray_home.mkdir(mode=0o755)
    os.chmod(rltray_home, 0o755)
    Paths.from_env().ensure()
    assert stat.S_IMODE(rltray_home.stat().st_mode) == 0o700
