"""`rltray --selftest` from this environment (the bundle runs the same code: test_bundle.py).

Real parts: the CLI as a process, the SQLite store, the hook command run
through /bin/sh, the settings web server, Xvfb + a private D-Bus with the tray
through GTK/AppIndicator; fakes only for the desktop's notification server and
tray watcher (tests/support/dbus_fixtures.py, traybus.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.dbus_fixtures import (  # noqa: F401 (the two fixtures)
    BusThread,
    NotificationServer,
    PrivateSessionBus,
    notification_server_fixture,
    session_bus_fixture,
    xvfb,
)
from tests.support.traybus import FakeWatcher, missing_tray_desktop, panel_fixture  # noqa: F401


def selftest(env: dict[str, str]) -> tuple[int, list[str], str]:
    done = subprocess.run(
        [sys.executable, "-m", "rltray.app.cli", "--selftest"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, done.stdout.splitlines(), done.stderr


def no_desktop_env() -> dict[str, str]:
    drop = ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")
    return {k: v for k, v in os.environ.items() if k not in drop}


def state_of(lines: list[str], part: str) -> str:
    (line,) = [line for line in lines if line[2:].startswith(f"{part}:")]
    return line[0]


@pytest.fixture
def desktop(panel: tuple[FakeWatcher, BusThread]) -> Iterator[tuple[str, FakeWatcher]]:
    missing = missing_tray_desktop()
    if missing:
        pytest.skip(missing)
    with xvfb() as display:
        yield display, panel[0]


def test_without_a_desktop_the_required_parts_pass_and_the_rest_say_why() -> None:
    code, lines, err = selftest(no_desktop_env())
    assert code == 0, [*lines, err]
    assert [line[2:].split(":")[0] for line in lines] == [
        "store", "keyring", "notifications", "hook program", "web server", "tray",
        "trainer environment",
    ]  # fmt: skip
    for part in ("store", "hook program", "web server"):
        assert state_of(lines, part) == "✓", lines
    assert state_of(lines, "tray") == "!" and "no display" in "\n".join(lines)
    assert state_of(lines, "notifications") == "!"
    assert "self-test finished" in err


@pytest.mark.skipif(os.name != "posix", reason="drives Xvfb and D-Bus")
def test_with_a_desktop_notifications_and_tray_are_real(
    desktop: tuple[str, FakeWatcher], notification_server: NotificationServer
) -> None:
    display, watcher = desktop
    code, lines, err = selftest({**os.environ, "DISPLAY": display})
    assert code == 0, [*lines, err]
    for part in ("store", "notifications", "hook program", "web server", "tray"):
        assert state_of(lines, part) == "✓", lines
    assert notification_server.wait_for_calls(1)[0].summary == "rltray test"
    assert watcher.items, "the tray icon never registered with the watcher"
    assert "shown in the desktop's tray" in "\n".join(lines)


def test_a_damaged_store_fails_the_selftest(rltray_home: Path) -> None:
    rltray_home.mkdir(parents=True, exist_ok=True)
    (rltray_home / "rltray.db").write_bytes(b"this is not a database" * 100)
    code, lines, err = selftest(no_desktop_env())
    assert code == 4, [*lines, err]
    assert state_of(lines, "store") == "✗"
    assert state_of(lines, "hook program") == "✓"  # one failure never hides the others


@pytest.mark.skipif(os.name != "posix", reason="a POSIX login shell stands in for Codex's")
def test_each_agents_hooks_run_through_the_shell_that_agent_runs_them_with(
    tmp_path: Path,
) -> None:
    """Codex runs hook commands as `$SHELL -lc` (cmd.exe /C on Windows), Claude Code
    through bash: the self-test must meet each agent's shell (issue 23 item 9)."""
    log = tmp_path / "shell.log"
    shell = tmp_path / "login-shell"
    shell.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> "{log}"\nexec /bin/sh -c "$2"\n')
    shell.chmod(0o755)
    code, lines, err = selftest({**no_desktop_env(), "SHELL": str(shell)})
    assert code == 0, [*lines, err]
    assert state_of(lines, "hook program") == "✓", lines
    (line,) = [line for line in lines if "hook program" in line]
    assert "Claude Code through bash" in line and "Codex through login-shell" in line
    said = log.read_text().splitlines()
    assert said.count("-lc") == 2, said
    commands = [s for s in said if s != "-lc"]
    assert [c.split()[-1] for c in commands] == ["codex-prompt", "codex-stop"]
