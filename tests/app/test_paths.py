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


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize(
    ("umask", "parent"), [(0o000, 0o755), (0o022, 0o755), (0o077, 0o700)], ids=oct
)
def test_parents_made_for_the_data_folder_are_never_writable_by_others(
    tmp_path: Path, umask: int, parent: int
) -> None:
    """Regression (review2-sec swap_datafolder): under umask 000 ensure() made ~/.local
    and ~/.local/share 0777, so another user could swap the data folder for their own
    with a config.toml whose training.python then ran as the victim."""
    home = tmp_path / "user" / ".local" / "share" / "rltray"
    (tmp_path / "user").mkdir()
    old = os.umask(umask)
    try:
        Paths(home).ensure()
    finally:
        os.umask(old)
    assert _mode(home.parent.parent) == parent
    assert _mode(home.parent) == parent
    assert _mode(home) == 0o700


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777, 0o702], ids=oct)
def test_a_data_folder_others_can_write_is_refused_with_the_fix(
    rltray_home: Path, mode: int
) -> None:
    """ssh's StrictModes: others who can write the data folder can put their own
    config.toml (programs rltray runs) there."""
    import io

    from rltray.app import cli

    Paths.from_env().ensure()
    os.chmod(rltray_home, mode)
    try:
        with pytest.raises(DataFolderNotWritable) as err:
            Paths.from_env().ensure()
        out = io.StringIO()
        code = cli.main(["status"], stdout=out, stderr=out)
    finally:
        os.chmod(rltray_home, 0o700)
    assert str(err.value) == (
        f"The data folder {rltray_home} can be changed by other users (mode {mode:04o}), who "
        f"could put their own settings, and programs to run, there: run `chmod 700 "
        f"{rltray_home}`."
    )
    assert err.value.exit_code == ExitCode.DATA
    assert code == ExitCode.DATA and "can be changed by other users" in out.getvalue()


@pytest.mark.skipif(
    os.name != "posix" or os.geteuid() != 0,
    reason="only root can hand a folder to another user (the mode test above runs anywhere)",
)
def test_a_data_folder_another_user_owns_is_refused(rltray_home: Path) -> None:
    """The swap itself (review2-sec swap_datafolder): the data folder's place taken by a
    folder of another user's."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    Paths.from_env().ensure()
    os.chown(rltray_home, nobody.pw_uid, -1)
    try:
        with pytest.raises(DataFolderNotWritable) as err:
            Paths.from_env().ensure()
    finally:
        os.chown(rltray_home, 0, -1)
    assert str(err.value).startswith(
        f"The data folder {rltray_home} belongs to nobody, not to you (root), so another user"
    )
    assert f"run `sudo chown -R root {rltray_home}`" in str(err.value)
