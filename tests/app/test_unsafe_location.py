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
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


NIXBLD = 30000  # the build users' group of a multi-user Nix install


@pytest.fixture
def nix_store(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], str]:
    """A venv whose interpreter resolves into a multi-user Nix store: /nix/store is
    root:nixbld 1775 (the Nix manual's multi-user setup), its entries root-owned 0555.
    Only the stat of /nix and the venv link's target are made up (no /nix here); the
    rest of the chain (this user's home) is real. Returns the venv's python; the
    argument is the uid of the store entry."""
    import grp

    real_stat, real_resolve, real_group = Path.stat, Path.resolve, grp.getgrgid
    owner = {"uid": 0}

    def fake_stat(self: Path, *args: Any, **kwargs: Any) -> os.stat_result:
        text = str(self)
        if text == "/nix/store":
            return os.stat_result((stat.S_IFDIR | 0o1775, 0, 0, 1, 0, NIXBLD, 0, 0, 0, 0))
        if text.startswith("/nix/store/"):
            kind = stat.S_IFREG if text.endswith("python3.12") else stat.S_IFDIR
            return os.stat_result((kind | 0o555, 0, 0, 1, owner["uid"], 0, 0, 0, 0, 0))
        if text == "/nix":
            return os.stat_result((stat.S_IFDIR | 0o755, 0, 0, 1, 0, 0, 0, 0, 0, 0))
        return real_stat(self, *args, **kwargs)

    def fake_lstat(self: Path) -> os.stat_result:
        return fake_stat(self, follow_symlinks=False)

    def fake_resolve(self: Path, strict: bool = False) -> Path:
        if str(self).endswith("/.venv/bin/python"):
            return Path("/nix/store/abc123-python3-3.12.4/bin/python3.12")
        return real_resolve(self, strict)

    def fake_group(gid: int) -> Any:
        if gid == NIXBLD:
            return grp.struct_group(("nixbld", "x", NIXBLD, [f"nixbld{i}" for i in range(32)]))
        return real_group(gid)

    monkeypatch.setattr(Path, "stat", fake_stat)
    monkeypatch.setattr(Path, "lstat", fake_lstat)
    monkeypatch.setattr(Path, "resolve", fake_resolve)
    monkeypatch.setattr(grp, "getgrgid", fake_group)

    import pwd

    home = Path(pwd.getpwuid(os.geteuid()).pw_dir)  # the real one: the suite's is in /tmp
    if bundle.unsafe_location(home) is not None:
        pytest.skip(f"this user's home folder {home} is itself refused")

    def venv_python(uid: int) -> str:
        owner["uid"] = uid
        return str(home / "proj" / ".venv" / "bin" / "python")

    return venv_python


def test_an_interpreter_in_the_nix_store_is_safe(nix_store: Callable[[int], str]) -> None:
    """Regression (review 4, item 2; /tmp/review4-a/unsafe/nix_store.py): the store is
    group-writable by nixbld, so every venv on NixOS or with Nix on Linux was refused; it
    is sticky, and only root may remove or rename its root-owned entries."""
    python = nix_store(0)
    assert bundle.unsafe_location(python) is None
    assert bundle.location_refusal(python, "point agent hooks at") is None


def test_an_entry_of_another_user_in_a_sticky_store_is_unsafe(
    nix_store: Callable[[int], str],
) -> None:
    python = nix_store(1001)  # what a member of the group made there: theirs to replace
    assert bundle.unsafe_location(python) == (
        "/nix/store/abc123-python3-3.12.4/bin/python3.12 belongs to another user (uid 1001)"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another group")
def test_a_sticky_group_store_above_a_root_entry_is_safe_in_real_folders(
    tmp_path: Path, elsewhere_temp: None
) -> None:
    """The same rule on real folders: a 1775 folder of a group that is not the user's,
    sticky, with a root-owned entry (we are root here). The folders above must be safe
    for the answer to be None; under a world-writable /tmp only the named folder changes."""
    store = tmp_path / "store"
    store.mkdir()
    os.chown(store, 0, 65534)
    store.chmod(0o1775)
    program = store / "abc-python" / "bin" / "python3"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    said = bundle.unsafe_location(program)
    assert said is None or str(store) not in said, said
    store.chmod(0o775)  # not sticky: anyone in the group may rename the entry
    assert bundle.unsafe_location(program) == f"{store} is writable by the group " + (
        bundle._group_name(65534)
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the entry must be root's")
def test_a_sticky_folder_everyone_may_write_is_unsafe_even_above_a_root_entry(
    tmp_path: Path, elsewhere_temp: None
) -> None:
    """/var/tmp and /dev/shm are cleaned by age whoever owns an entry: refused still."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    program = shared / "rltray" / "rltray"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    assert bundle.unsafe_location(program) == f"{shared} is writable by every user"


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


def test_autostart_on_refuses_rltray_code_in_a_shared_folder(
    tmp_path: Path, elsewhere_temp: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 4, item 3): a clone in a shared folder installed editable into a
    venv elsewhere; `hooks install` refused it for capture.py, `autostart on` looked at the
    venv's program only and wrote an entry that imports the shared clone at every login."""
    import rltray.app

    clone = tmp_path / "shared-clone"
    (clone / "app").mkdir(parents=True)
    clone.chmod(0o777)
    code = clone / "app" / "__init__.py"
    code.write_text(Path(str(rltray.app.__file__)).read_text())
    monkeypatch.setattr(autostart, "command", lambda: ["/bin/sh", "run"])  # a safe program
    assert bundle.unsafe_location("/bin/sh") is None
    monkeypatch.setattr(rltray.app, "__file__", str(code))  # what the venv's rltray imports
    with pytest.raises(UserError) as said:
        autostart.enable({"HOME": str(tmp_path)}, platform="linux")
    assert str(said.value).startswith(
        f"Refusing to start rltray at login with its code at {code} because {clone} is "
        "writable by every user"
    ), said.value
    assert not (tmp_path / ".config" / "autostart").exists()
    # an entry written while the switch was on: read back, it is flagged for doctor
    monkeypatch.setenv(bundle.ALLOW_UNSAFE_ENV, "1")
    assert autostart.enable({"HOME": str(tmp_path)}, platform="linux").problem is None
    monkeypatch.delenv(bundle.ALLOW_UNSAFE_ENV)
    status = autostart.status({"HOME": str(tmp_path)}, platform="linux")
    assert status.unsafe == f"{clone} is writable by every user"
    assert status.problem is not None
    assert status.problem.startswith(f"the login entry runs rltray's code at {code}, but ")


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
