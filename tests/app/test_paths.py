"""Paths: one switch (RLTRAY_HOME) moves every file; ensure() makes private folders."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from rltray.app.errors import DataFolderNotWritable, ExitCode
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
@pytest.mark.parametrize("mode", [0o755, 0o500, 0o750])
def test_ensure_never_changes_the_mode_of_an_existing_folder(rltray_home: Path, mode: int) -> None:
    """Regression: ensure() chmod-ed a folder the user set to 0500 back to 0700."""
    Paths.from_env().ensure()
    os.chmod(rltray_home, mode)
    try:
        if mode & 0o200 or os.geteuid() == 0:
            Paths.from_env().ensure()
        else:
            with pytest.raises(DataFolderNotWritable):
                Paths.from_env().ensure()
        assert stat.S_IMODE(rltray_home.stat().st_mode) == mode
    finally:
        os.chmod(rltray_home, 0o700)


def _access_denied_for(*denied: Path):
    """An os.access stand-in: every folder writable except ``denied`` (root may write anywhere)."""

    def access(path: Path, mode: int) -> bool:
        return Path(path) not in denied

    return access


def test_an_unwritable_data_folder_is_one_sentence_naming_it(rltray_home: Path) -> None:
    paths = Paths.from_env().ensure()
    os.chmod(rltray_home, 0o500)
    try:
        with pytest.raises(DataFolderNotWritable) as err:
            paths.ensure(access=_access_denied_for(rltray_home))
    finally:
        os.chmod(rltray_home, 0o700)
    message = str(err.value)
    assert message == (
        f"The data folder {rltray_home} is not writable (mode 0500); rltray needs to write "
        f"there: run `chmod u+w {rltray_home}` or set RLTRAY_HOME to another folder."
    )
    assert err.value.exit_code == ExitCode.DATA


def test_every_command_says_the_sentence_not_oserror(rltray_home: Path, monkeypatch) -> None:
    """Regression: a read-only data folder made every command `unexpected error: OSError`."""
    import io

    from rltray.app import cli

    Paths.from_env().ensure()
    monkeypatch.setenv("COLUMNS", "400")  # doctor's table: one sentence per cell, unwrapped
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m, **kw: Path(p) != rltray_home and real(p, m))
    for argv in (["status"], ["good"], ["turns"], ["doctor"]):
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(argv, stdout=out, stderr=err)
        text = " ".join((out.getvalue() + err.getvalue()).split())
        assert "unexpected error" not in text, (argv, text)
        assert f"The data folder {rltray_home} is not writable" in text, (argv, text)
        assert code in (ExitCode.DATA, ExitCode.NOT_AVAILABLE), (argv, code)


def test_an_unwritable_subfolder_is_named(rltray_home: Path) -> None:
    paths = Paths.from_env().ensure()
    with pytest.raises(DataFolderNotWritable, match=re.escape(str(paths.spool_incoming))):
        paths.ensure(access=_access_denied_for(paths.spool_incoming))


def test_a_data_folder_that_cannot_be_created_names_the_parent(tmp_path: Path) -> None:
    parent = tmp_path / "locked"
    parent.mkdir()
    paths = Paths(parent / "a" / "rltray")
    with pytest.raises(DataFolderNotWritable, match=f"The folder {re.escape(str(parent))} is not"):
        paths.ensure(access=_access_denied_for(parent))
    assert not (parent / "a").exists()


def test_a_file_where_the_data_folder_should_be_is_one_sentence(tmp_path: Path) -> None:
    blocker = tmp_path / "home"
    blocker.write_text("not a folder")
    with pytest.raises(DataFolderNotWritable, match="cannot be created"):
        Paths(blocker).ensure()


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.skipif(
    os.name == "posix" and os.geteuid() == 0,
    reason="runs as root, and root writes into a 0500 folder; the access-injected tests above "
    "cover the logic",
)
def test_a_real_read_only_data_folder_is_refused(rltray_home: Path) -> None:
    from rltray.app import cli

    Paths.from_env().ensure()
    os.chmod(rltray_home, 0o500)
    try:
        with pytest.raises(DataFolderNotWritable):
            Paths.from_env().ensure()
        assert cli.main(["status"]) == ExitCode.DATA
    finally:
        os.chmod(rltray_home, 0o700)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_doctor_warns_about_an_open_data_folder_and_leaves_its_mode(
    rltray_home: Path, monkeypatch
) -> None:
    import io

    from rltray.app import cli

    Paths.from_env().ensure()
    os.chmod(rltray_home, 0o755)
    monkeypatch.setenv("COLUMNS", "400")
    out = io.StringIO()
    cli.main(["doctor"], stdout=out, stderr=io.StringIO())
    assert f"data folder: chmod 700 {rltray_home}" in out.getvalue()
    assert stat.S_IMODE(rltray_home.stat().st_mode) == 0o755
