"""`rltray autostart`: the per-user login entry each OS reads, written, read back and removed.

Linux and macOS files are real files in the test's HOME, parsed back with the
same parsers their OS uses (an INI-style desktop entry, a plist). The Windows
Run key needs Windows; there only the command line is checked here.
"""

from __future__ import annotations

import configparser
import os
import plistlib
import subprocess
import sys
from pathlib import Path

import pytest
from rltray.app.desktop import autostart
from rltray.app.errors import UserError


def env_for(home: Path) -> dict[str, str]:
    return {"HOME": str(home)}


def test_linux_entry_runs_this_rltray_and_is_removed_again(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    state = autostart.enable(env, platform="linux")
    path = tmp_path / ".config" / "autostart" / "rltray.desktop"
    assert state.enabled and state.where == str(path) and state.problem is None
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str  # type: ignore[assignment,method-assign]
    entry.read(path)
    desktop = entry["Desktop Entry"]
    assert desktop["Type"] == "Application" and desktop["X-GNOME-Autostart-enabled"] == "true"
    assert autostart._split_exec(desktop["Exec"]) == autostart.command()
    assert autostart.command()[-1] == "run"
    assert autostart.disable(env, platform="linux").enabled is False
    assert not path.exists()
    assert autostart.disable(env, platform="linux").enabled is False  # twice is fine


def test_xdg_config_home_is_respected(tmp_path: Path) -> None:
    env = {**env_for(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    assert autostart.enable(env, platform="linux").where == str(
        tmp_path / "cfg" / "autostart" / "rltray.desktop"
    )


def test_a_path_with_spaces_and_quotes_survives_the_exec_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    odd = tmp_path / 'my "tools" $HOME \\x `y`' / "rltray"
    odd.parent.mkdir()
    odd.write_text("#!/bin/sh\n")
    monkeypatch.setattr(autostart, "command", lambda: [str(odd), "run"])
    state = autostart.enable(env_for(tmp_path), platform="linux")
    assert state.command == [str(odd), "run"] and state.problem is None


def test_an_entry_whose_program_is_gone_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(autostart, "command", lambda: [str(tmp_path / "gone" / "rltray"), "run"])
    state = autostart.enable(env_for(tmp_path), platform="linux")
    assert state.enabled and state.problem is not None
    assert "does not exist any more" in state.problem


def test_macos_launch_agent_is_a_plist_that_runs_at_load(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    state = autostart.enable(env, platform="darwin")
    path = tmp_path / "Library" / "LaunchAgents" / "dev.rltray.tray.plist"
    assert state.where == str(path)
    plist = plistlib.loads(path.read_bytes())
    assert plist["Label"] == "dev.rltray.tray" and plist["RunAtLoad"] is True
    assert plist["ProgramArguments"] == autostart.command()
    assert autostart.status(env, platform="darwin").enabled
    assert autostart.disable(env, platform="darwin").enabled is False and not path.exists()


def test_the_windows_run_value_splits_back_into_the_command() -> None:
    cmd = [r"C:\Program Files\rltray\rltray.exe", "run"]
    line = autostart.subprocess_line(cmd)
    assert line == r'"C:\Program Files\rltray\rltray.exe" run'
    assert autostart._split_windows(line) == cmd


def test_a_windows_venv_logs_in_through_pythonw_never_pips_console_launcher(tmp_path: Path) -> None:
    """pip's rltray.exe is a console program: a console window at every login (issue 23
    item 12); the venv's pythonw.exe runs the same CLI without one."""
    scripts = tmp_path / "Scripts"
    scripts.mkdir()
    for name in ("python.exe", "pythonw.exe", "rltray.exe"):
        (scripts / name).write_text("")
    python = str(scripts / "python.exe")
    assert autostart.command("nt", python, frozen=False) == [
        str(scripts / "pythonw.exe"), "-m", "rltray.app.cli", "run",
    ]  # fmt: skip
    assert autostart.command("nt", str(tmp_path / "rltray-cli.exe"), frozen=True) == [
        str(tmp_path / "rltray.exe"), "run",
    ]  # fmt: skip
    (scripts / "rltray").write_text("")
    assert autostart.command("posix", str(scripts / "python"), frozen=False) == [
        str(scripts / "rltray"), "run",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "where",
    [
        "/Volumes/rltray 1.0/rltray.app/Contents/MacOS/rltray",
        "/private/var/folders/x1/T/AppTranslocation/0F2E/d/rltray.app/Contents/MacOS/rltray",
    ],
)
def test_autostart_from_a_disk_image_or_a_translocated_app_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Such a path is gone after the next restart (issue 23 item 4): say so, write nothing."""
    monkeypatch.setattr(autostart, "command", lambda: [where, "run"])
    with pytest.raises(UserError, match="disk image or a translocated copy, which is gone after"):
        autostart.enable(env_for(tmp_path), platform="darwin")
    assert not (tmp_path / "Library").exists()


@pytest.mark.skipif(sys.platform != "win32", reason="the Run key exists on Windows only")
def test_windows_run_key_round_trip() -> None:  # pragma: no cover - Windows only
    assert autostart.enable().enabled
    assert autostart.disable().enabled is False


def test_the_cli_reports_json(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c")}
    done = subprocess.run(
        [sys.executable, "-m", "rltray.app.cli", "autostart", "status", "--json"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"enabled": false' in done.stdout


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_folders_made_for_the_login_entry_are_never_writable_by_others(tmp_path: Path) -> None:
    """Regression (review2-sec autostart_swap): under umask 000 `rltray autostart on` made
    ~/.config and ~/.config/autostart 0777, and another user replaced rltray.desktop with
    an entry running their program at the victim's login."""
    old = os.umask(0)
    try:
        state = autostart.enable(env_for(tmp_path), platform="linux")
    finally:
        os.umask(old)
    entry = Path(state.where)
    for folder in (tmp_path / ".config", entry.parent):
        assert folder.stat().st_mode & 0o777 == 0o755, folder
    assert entry.stat().st_mode & 0o777 == 0o644
