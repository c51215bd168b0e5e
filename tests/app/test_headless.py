"""`rltray run` without a tray, as a user first meets it (issue 22, items 1 and 2).

What is real: the `rltray run` process, its local API, the spool and the SQLite
store, Ctrl+C sent to the whole process group as a terminal sends it, Xvfb for
"a display but no tray". The summary of what ingest stored is stepped on a fake
clock.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from rltray.app.cli.headless import IngestSummary
from rltray.app.spool import IngestReport

from tests.app.test_cli import spool_turn
from tests.app.test_serve import call
from tests.app.test_tray_dbus import running_tray, wait_until
from tests.support.dbus_fixtures import xvfb

posix_only = pytest.mark.skipif(os.name != "posix", reason="signals and process groups")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_first_arrival_is_said_at_once_then_a_summary_at_most_every_ten_minutes() -> None:
    said: list[str] = []
    clock = Clock()
    summary = IngestSummary(said.append, clock, every_s=600)
    summary.add(IngestReport(duplicates=3))  # nothing new: nothing to say
    assert said == []
    summary.add(IngestReport(turns=1))
    assert said == [
        "stored 1 turn(s), 0 command(s) (the hooks work; from now on one summary every 10 min "
        "at most)"
    ]
    for _ in range(40):  # a busy session: one hook event every 10 s
        clock.now += 10
        summary.add(IngestReport(turns=1))
    clock.now += 200
    summary.add(IngestReport(commands=1, rejected=2))
    assert said[1:] == ["stored 40 turn(s), 1 command(s), rejected 2 since the last summary"]
    summary.add(IngestReport(turns=2))
    assert len(said) == 2
    summary.flush()  # at stop: the rest is said
    summary.flush()  # and only once
    assert said[2:] == ["stored 2 turn(s), 0 command(s) since the last summary"]


def headless_env() -> dict[str, str]:
    drop = ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "PYSTRAY_BACKEND")
    return {k: v for k, v in os.environ.items() if k not in drop}


def wait_for_run_endpoint(home: Path, proc: subprocess.Popen[bytes], log: Path) -> dict:
    """endpoint.json of this process (not one left by a killed one); fails with its log."""
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "rltray run never wrote endpoint.json"
        try:
            endpoint = json.loads((home / "endpoint.json").read_text())
        except (OSError, ValueError):
            endpoint = {}
        if endpoint.get("pid") == proc.pid:
            return endpoint
        time.sleep(0.05)


@posix_only
def test_ctrl_c_stops_a_headless_run_with_exit_0_and_a_quiet_terminal(
    rltray_home: Path, tmp_path: Path
) -> None:
    """Ctrl+C (SIGINT to the process group) after a burst of hook events and API calls:
    exit 0, no traceback, no line per API call or per turn, the next step named."""
    log = tmp_path / "run.log"
    with running_tray(headless_env(), log, new_session=True) as proc:
        endpoint = wait_for_run_endpoint(rltray_home, proc, log)
        port, token = endpoint["port"], endpoint.get("token")
        assert token, "a keyring-less rltray publishes its token in endpoint.json"
        for n in range(6):
            spool_turn(rltray_home, f"turn{n}", f"prompt {n}", f"answer {n}")
            time.sleep(0.3)  # separate hook events, as an agent sends them
        for _ in range(40):
            assert call(port, "/api/status", token)[0] == 200
        wait_until(lambda: call(port, "/api/status", token)[1]["turns"] == 6, what="6 turns")
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 0, log.read_text()
    text = log.read_text()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    lines = text.splitlines()
    assert lines[-1] == "rltray stopped.", text
    assert "`rltray setup`" in text and "`rltray hooks install`" in text, text
    stored = [line for line in lines if line.startswith("stored ")]
    assert 1 <= len(stored) <= 2, text  # the first arrival, and the rest at stop
    assert sum(int(re.match(r"stored (\d+) turn", line)[1]) for line in stored) == 6  # type: ignore[index]
    assert len(lines) <= 8, f"a line per event or API call crept back:\n{text}"


def window_processes(pid: int) -> list[str]:
    """Command lines of the settings-window processes under ``pid`` (gone ones skipped)."""
    import psutil

    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:  # it exited while we looked
            continue
        if "rltray.web.window" in line:
            found.append(line)
    return found


@posix_only
def test_a_display_without_a_tray_still_opens_the_setup_wizard_on_the_first_run(
    rltray_home: Path, tmp_path: Path
) -> None:
    """No tray (here: pystray's dummy backend) but a display: the wizard opens, as the
    tray's first run does; a browser stands in when the window has no webview."""
    if shutil.which("Xvfb") is None:
        pytest.skip("needs Xvfb (Debian: apt install xvfb)")
    browser, seen = tmp_path / "browser", tmp_path / "opened.txt"
    browser.write_text(f'#!/bin/sh\necho "$@" >> {seen}\nexec sleep 300\n')
    browser.chmod(0o755)
    log = tmp_path / "run.log"
    with xvfb() as display:
        env = {**headless_env(), "DISPLAY": display, "PYSTRAY_BACKEND": "dummy",
               "BROWSER": str(browser)}  # fmt: skip
        with running_tray(env, log, new_session=True) as proc:
            wait_until(
                lambda: window_processes(proc.pid) or (seen.exists() and seen.read_text()),
                what="the setup window",
            )
            wait_until(lambda: "Opened the setup wizard" in log.read_text(), what="its line")
            os.killpg(proc.pid, signal.SIGINT)
            assert proc.wait(30) == 0, log.read_text()
    text = log.read_text()
    # the window shares the terminal's process group: Ctrl+C reaches it mid-start too
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert "No tray icon: PYSTRAY_BACKEND is 'dummy'" in text
    assert "`rltray setup`" not in text, "the wizard is open: no need to name the command"
