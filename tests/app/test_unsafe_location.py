"""Hooks and the login entry never name a program another user could put there.

Regression pinned (review 3, finding 1, /tmp/review3-packaging/tmp_install.sh): the
bundle tried out in /tmp (TMPDIR unset, as on most Linux desktops) got agent hooks and
a login entry naming /tmp paths; once the folder was deleted, any local user could
recreate it and the next agent turn ran their program as the victim. Only $TMPDIR was
looked at, only by `autostart on`, and doctor merely warned.

Real parts: folders with real modes (0777, 0700, /tmp's 1777, /dev/shm), the real CLI
in process, the real agent config files, the settings app's route, the doctor checks.
The suite's switch (tests/conftest.py) is cleared here so the refusal is what runs.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from rltray.app import bundle
from rltray.app.cli import doctor
from rltray.app.desktop import autostart
from rltray.app.errors import ExitCode, UserError
from rltray.app.paths import Paths
from rltray.app.service import Service

from tests.app.test_cli import cli

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX folder modes")


@pytest.fixture(autouse=True)
def no_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(bundle.ALLOW_UNSAFE_ENV, raising=False)


@pytest.fixture
def elsewhere_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The temporary folder somewhere else, so the folder-mode rules are what answers."""
    other = tmp_path / "the-temp-folder"
    other.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(other))


def shared_program(tmp_path: Path, name: str = "python") -> Path:
    """A program in a folder anyone may write (mode 0777, like an unpacked archive's
    folder under umask 000), linked to this Python so it really runs."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    program = shared / name
    program.symlink_to(sys.executable)
    return program


def first_world_writable_ancestor(path: Path) -> Path | None:
    for folder in path.parents:
        if folder.stat().st_mode & stat.S_IWOTH:
            return folder
    return None


def test_a_folder_anyone_may_write_is_named(tmp_path: Path, elsewhere_temp: None) -> None:
    program = shared_program(tmp_path)
    assert bundle.unsafe_location(program) == f"{program.parent} is writable by every user"


def test_a_private_folder_under_tmp_is_unsafe_too(tmp_path: Path, elsewhere_temp: None) -> None:
    """Sticky /tmp keeps the folder while it exists; once the user deletes it (or a reboot
    does) anyone may make it again."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    program = private / "rltray-hook"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o700)
    shared = first_world_writable_ancestor(program)
    if shared is None:
        pytest.skip(f"pytest's temporary folder {tmp_path} has no world-writable ancestor")
    assert bundle.unsafe_location(program) == f"{shared} is writable by every user"


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm here")
def test_a_sticky_shared_folder_is_unsafe_even_for_a_path_not_made_yet() -> None:
    said = bundle.unsafe_location("/dev/shm/rltray/rltray-hook")
    assert said is not None and "writable by every user" in said, said


def test_the_temporary_folder_is_unsafe_whatever_its_mode() -> None:
    temp = Path(tempfile.gettempdir()).resolve()
    inside = temp / "rltray-try" / "rltray" / "rltray"
    assert bundle.unsafe_location(inside) == f"it is inside the temporary folder {temp}, " \
        "which is emptied"


def test_a_system_program_is_safe() -> None:
    assert bundle.unsafe_location("/bin/sh") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_a_folder_owned_by_another_user_is_unsafe(tmp_path: Path, elsewhere_temp: None) -> None:
    """What `sudo tar -xzf` of an archive built by uid 1001 left in /opt (finding 8)."""
    opt = tmp_path / "opt" / "rltray"
    opt.mkdir(parents=True, mode=0o755)
    os.chown(opt, 1001, 1001)
    assert bundle.unsafe_location(opt / "rltray") == f"{opt} belongs to another user (uid 1001)"
    os.chown(opt, 0, 0)
    opt.chmod(0o775)
    os.chown(opt, 0, 65534)  # group-writable by a group that is not the user's own
    assert bundle.unsafe_location(opt / "rltray").startswith(f"{opt} is writable by the group ")


def test_the_refusal_is_one_sentence_naming_the_path_and_what_to_do(
    tmp_path: Path, elsewhere_temp: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = shared_program(tmp_path)
    said = bundle.location_refusal(program, "point agent hooks at")
    assert said is not None and said.startswith(f"Refusing to point agent hooks at {program} ")
    assert "~/Applications or ~/.local/opt" in said and said.replace("e.g. ", "").count(". ") == 0
    monkeypatch.setenv(bundle.ALLOW_UNSAFE_ENV, "1")
    assert bundle.location_refusal(program, "point agent hooks at") is None


# -- the faces: `rltray hooks install`, the wizard, `rltray autostart on`, doctor ----------


@pytest.fixture
def claude_home() -> Path:
    home = Path(os.environ["HOME"])
    (home / ".claude").mkdir()
    return home / ".claude"


def test_hooks_install_refuses_a_hook_program_in_a_shared_folder(
    tmp_path: Path, claude_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = shared_program(tmp_path)
    monkeypatch.setattr(sys, "executable", str(program))  # the interpreter the hooks would run
    code, out, err = cli("hooks", "install", "--agent", "claude-code")
    assert code == ExitCode.NOT_AVAILABLE, out + err
    assert f"Refusing to point agent hooks at {program} because " in err
    assert "~/Applications" in err
    assert not (claude_home / "settings.json").exists()  # nothing written
    monkeypatch.setenv(bundle.ALLOW_UNSAFE_ENV, "1")  # the documented switch
    assert cli("hooks", "install", "--agent", "claude-code")[0] == ExitCode.OK
    assert str(program) in (claude_home / "settings.json").read_text()


def test_autostart_on_refuses_a_program_in_a_shared_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = shared_program(tmp_path, "rltray")
    monkeypatch.setattr(autostart, "command", lambda: [str(program), "run"])
    with pytest.raises(UserError, match=f"^Refusing to start rltray at login from {program} "):
        autostart.enable({"HOME": str(tmp_path)}, platform="linux")
    assert not (tmp_path / ".config" / "autostart").exists()


def test_doctor_fails_hooks_and_a_login_entry_in_a_shared_folder(
    tmp_path: Path, claude_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries an older rltray wrote before it refused: doctor fails them, with the fix."""
    program = shared_program(tmp_path)
    monkeypatch.setenv(bundle.ALLOW_UNSAFE_ENV, "1")
    monkeypatch.setenv("COLUMNS", "400")
    real_python = sys.executable
    monkeypatch.setattr(sys, "executable", str(program))
    assert cli("hooks", "install", "--agent", "claude-code")[0] == ExitCode.OK
    assert str(program) in (claude_home / "settings.json").read_text()
    monkeypatch.setattr(sys, "executable", real_python)
    monkeypatch.setattr(autostart, "command", lambda: [str(program), "run"])
    assert autostart.enable(platform="linux").problem is None  # allowed while the switch is on
    monkeypatch.delenv(bundle.ALLOW_UNSAFE_ENV)
    with Service(Paths.from_env()) as service:
        check = doctor._hook_program(service)
    assert check.state == doctor.FAIL, check
    assert check.detail.startswith(f"Claude Code hooks run {program}, but "), check.detail
    assert "~/Applications" in check.fix and "`rltray hooks install`" in check.fix
    code, out, _ = cli("doctor")
    assert code == ExitCode.NOT_AVAILABLE
    login = next(line for line in out.splitlines() if "start at login" in line)
    assert "✗" in login, out
    assert "rltray autostart off;" in out
