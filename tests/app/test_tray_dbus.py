"""`rltray run` as a real process with a real tray, clicked over D-Bus like a desktop panel would.

What is real: Xvfb, a private dbus-daemon, the `rltray run` process with
pystray's AppIndicator backend (GTK + libayatana-appindicator), its exported
DBusMenu, desktop-notifier talking to a notification server on the bus, the
hook command installed by `rltray hooks install` and run exactly as Claude Code
runs it, the training runner with a fake trainer process, and the SQLite store.
Fakes: the StatusNotifierWatcher (a panel) and the notification server, both
speaking the real protocols (tests/app/traybus.py, dbus_fixtures.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rltray.app import config
from rltray.app.paths import Paths
from rltray.app.store import Store

from tests.support.dbus_fixtures import (  # noqa: F401 (the two fixtures)
    BusThread,
    NotificationServer,
    PrivateSessionBus,
    notification_server_fixture,
    session_bus_fixture,
    xvfb,
)
from tests.support.traybus import DBusMenu, FakeWatcher, missing_tray_desktop, panel_fixture  # noqa: F401


@pytest.fixture
def display() -> Iterator[str]:
    missing = missing_tray_desktop()
    if missing:
        pytest.skip(missing)
    with xvfb() as name:
        yield name


@pytest.fixture
def watcher(panel: tuple[FakeWatcher, BusThread]) -> tuple[FakeWatcher, BusThread]:
    return panel


def wait_until(check: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
    """Poll ``check`` until it is truthy; an AssertionError inside means "not yet"."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.05)


def read_store(paths: Paths, fn: Callable[[Store], Any]) -> Any:
    with Store(paths.db) as store:
        return fn(store)


def stopped_cleanly(paths: Paths) -> bool:
    """Runtime.stop() ran to its end: the service's last word in the store is "stopped"."""
    said = read_store(paths, lambda s: [e["message"] for e in s.events(limit=50)
                                         if e["kind"] == "service"])  # fmt: skip
    return bool(said) and said[0] == "service stopped"


@contextlib.contextmanager
def running_tray(
    env: dict[str, str], log: Path, *, new_session: bool = False
) -> Iterator[subprocess.Popen[bytes]]:
    """`rltray run` as a process; whatever the test did, it and its children are gone after.

    ``new_session``: in a process group of its own, as a terminal runs a foreground job
    (a test may signal the whole group); what is left of the group is killed after.
    """
    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-m", "rltray.app.cli", "run"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
        start_new_session=new_session,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()  # a settings window the test made it open
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait(30)
        if new_session:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def set_up_tray_env(session_bus: PrivateSessionBus, display: str) -> dict[str, str]:
    """A finished setup (no wizard at start) and the environment of a desktop session."""
    Paths.from_env().ensure()
    (Paths.from_env().home / "setup-done").touch()
    return {**session_bus.env, "DISPLAY": display, "PYSTRAY_BACKEND": "appindicator"}


def fire_claude_hook(home: Path, cwd: Path, session: str, prompt: str, answer: str) -> None:
    """Run the installed UserPromptSubmit and Stop commands exactly as Claude Code does."""
    settings = json.loads((home / ".claude" / "settings.json").read_text())

    def command(event: str) -> str:
        (cmd,) = [h["command"] for g in settings["hooks"][event] for h in g["hooks"]]
        return cmd

    common = {"session_id": session, "cwd": str(cwd), "transcript_path": None}
    for event, extra in (
        ("UserPromptSubmit", {"prompt": prompt}),
        ("Stop", {"stop_hook_active": False, "last_assistant_message": answer}),
    ):
        payload = {**common, "hook_event_name": event, **extra}
        done = subprocess.run(
            command(event), shell=True, input=json.dumps(payload), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr


@pytest.mark.skipif(os.name != "posix", reason="drives Xvfb, D-Bus and a POSIX shell")
def test_the_real_tray_menu_does_what_each_item_says(
    display: str,
    session_bus: PrivateSessionBus,
    notification_server: NotificationServer,
    watcher: tuple[FakeWatcher, BusThread],
    fake_python: str,
    rltray_home: Path,
    tmp_path: Path,
) -> None:
    fake_watcher, thread = watcher
    home = Path(os.environ["HOME"])
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text("{}")
    env = {
        **session_bus.env,
        "DISPLAY": display,
        "PYSTRAY_BACKEND": "appindicator",
        "FAKE_MODE": "done",
    }
    subprocess.run(
        [sys.executable, "-m", "rltray.app.cli", "hooks", "install", "--agent", "claude-code"],
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    paths = Paths.from_env()
    config.set_value(paths, "training.base_model", "/models/tiny")
    config.set_value(paths, "training.python", fake_python)
    config.set_value(paths, "notify.ask", "every")
    (paths.home / "setup-done").touch()  # the first-run wizard is another test's
    log = tmp_path / "tray.log"
    with running_tray(env, log) as proc:
        menu = DBusMenu.of_item(thread, fake_watcher.wait_for_item())
        top = [e.label for e in menu.layout().children if e.label]
        assert top[0] == "0 new ratings · base model", log.read_text()
        assert top[1].startswith("Next training: ")
        assert top[2:] == [
            "Rate last answer", "Train now", "Pause automatic training", "Snooze notifications",
            "Roll back", "Open settings", "Setup wizard…", "Quit rltray",
        ]  # fmt: skip

        # A turn finishes in Claude Code: the hook records it, the service asks about it.
        project = tmp_path / "shop-api"
        project.mkdir()
        fire_claude_hook(home, project, "s1", "add a /health route", "Added GET /health.")
        asked = wait_until(
            lambda: [
                c
                for c in notification_server.calls
                if c.action_pairs and ("good", "Good") in c.action_pairs
            ],
            what="the question",
        )
        assert asked[0].summary.endswith("shop-api") and "Added GET /health." in asked[0].body
        notification_server.invoke_action(asked[0].id, "bad")
        first = wait_until(lambda: read_store(paths, lambda s: s.newest_turn()).rating,
                           what="the notification's rating")  # fmt: skip
        assert (first.value, first.source) == (-1, "notification")

        # Rate last answer ▸ Good: a second turn, rated from the tray menu.
        fire_claude_hook(home, project, "s1", "now add a test", "Added test_health.")
        wait_until(lambda: read_store(paths, lambda s: s.counts()["turns"]) == 2)
        # the menu names the answer it rates (a click rates the turn it showed, no other)
        wait_until(lambda: menu.layout().find("Rate last answer").children[0].label
                   == "Turn 2 · now add a test", what="the menu to name the new answer")
        menu.click("Rate last answer", "Good")
        rating = wait_until(lambda: read_store(paths, lambda s: s.newest_turn()).rating)
        assert (rating.value, rating.source) == (1, "tray")
        told = wait_until(lambda: [c for c in notification_server.calls
                                   if c.body.startswith("Rated good: turn 2")])  # fmt: skip
        assert told[0].action_pairs in ([], [("default", "")]) or all(
            k == "default" for k, _ in told[0].action_pairs
        )
        wait_until(lambda: menu.layout().children[0].label == "2 new ratings · base model",
                   what="the status line to follow")  # fmt: skip

        # Pause automatic training: a checkbox kept in config.toml.
        menu.click("Pause automatic training")
        wait_until(lambda: not config.load_config(paths).training.automatic)
        wait_until(lambda: menu.layout().find("Pause automatic training").toggle_state == 1)

        # Train now → v1 active, listed checked under Roll back; then back to the base model.
        for i in range(10):
            fire_claude_hook(home, project, f"s{i + 2}", f"question {i}", f"answer {i}")
        wait_until(lambda: read_store(paths, lambda s: s.counts()["turns"]) == 12)
        with Store(paths.db) as store:
            for turn in store.list_turns(limit=10):
                store.rate(turn.id, 1 if turn.id % 2 else -1, "cli")
        menu.click("Train now")
        wait_until(lambda: read_store(paths, lambda s: s.active_adapter()), what="v1 active")
        wait_until(lambda: menu.layout().find("Roll back", "v1").toggle_state == 1)
        menu.click("Roll back", "Base model")
        wait_until(lambda: read_store(paths, lambda s: s.active_adapter()) is None)

        menu.click("Quit rltray")
        assert proc.wait(30) == 0, log.read_text()
    text = log.read_text()
    assert "rltray is running in the tray" in text and "rltray stopped." in text
    assert not paths.endpoint.exists()  # the API said goodbye


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_sigterm_stops_the_tray_cleanly_and_a_second_run_refuses(
    display: str,
    session_bus: PrivateSessionBus,
    notification_server: NotificationServer,
    watcher: tuple[FakeWatcher, BusThread],
    rltray_home: Path,
    tmp_path: Path,
) -> None:
    fake_watcher, _thread = watcher
    env = set_up_tray_env(session_bus, display)
    with running_tray(env, tmp_path / "one.log") as proc:
        fake_watcher.wait_for_item()
        second = subprocess.run(
            [sys.executable, "-m", "rltray.app.cli", "run"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert second.returncode == 5
        assert "already running" in second.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert "rltray stopped." in (tmp_path / "one.log").read_text()
    assert stopped_cleanly(Paths.from_env())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tgkill(2) is Linux's")
def test_sigterm_on_a_worker_thread_stops_the_tray(
    display: str,
    session_bus: PrivateSessionBus,
    notification_server: NotificationServer,
    watcher: tuple[FakeWatcher, BusThread],
    rltray_home: Path,
    tmp_path: Path,
) -> None:
    """The kernel may hand SIGTERM to any thread; the GTK loop must still run the handler."""
    from tests.app.test_serve_signals import tgkill, worker_threads

    fake_watcher, _thread = watcher
    with running_tray(set_up_tray_env(session_bus, display), tmp_path / "one.log") as proc:
        fake_watcher.wait_for_item()
        tgkill(proc.pid, worker_threads(proc.pid)[-1], signal.SIGTERM)
        assert proc.wait(30) == 0
    assert "rltray stopped." in (tmp_path / "one.log").read_text()


def test_without_a_display_run_says_why_and_serves_headless(
    session_bus: PrivateSessionBus, rltray_home: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in session_bus.env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("PYSTRAY_BACKEND", None)
    log = tmp_path / "headless.log"
    with running_tray(env, log) as proc:
        wait_until(lambda: "running headless" in log.read_text(), what="the headless start")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    text = log.read_text()
    assert "No tray icon: there is no display (DISPLAY and WAYLAND_DISPLAY are unset)." in text


@pytest.mark.skipif(os.name != "posix", reason="drives Xvfb and D-Bus")
def test_the_first_run_opens_the_setup_wizard_and_later_runs_do_not(
    display: str,
    session_bus: PrivateSessionBus,
    notification_server: NotificationServer,
    watcher: tuple[FakeWatcher, BusThread],
    rltray_home: Path,
    tmp_path: Path,
) -> None:
    import psutil

    fake_watcher, _thread = watcher
    # No webview backend here on purpose: the window falls back to a "browser" we record.
    browser = tmp_path / "browser"
    seen = tmp_path / "opened.txt"
    browser.write_text(f'#!/bin/sh\necho "$@" >> {seen}\n')
    browser.chmod(0o755)
    env = {**session_bus.env, "DISPLAY": display, "PYSTRAY_BACKEND": "appindicator",
           "BROWSER": str(browser), "PYWEBVIEW_GUI": "none-such"}  # fmt: skip
    with running_tray(env, tmp_path / "first.log") as proc:
        fake_watcher.wait_for_item()
        windows = wait_until(
            lambda: [p for p in psutil.Process(proc.pid).children(recursive=True)
                     if "rltray.web.window" in " ".join(p.cmdline())]
            or (seen.exists() and seen.read_text()),
            what="the setup window",
        )  # fmt: skip
        assert windows
    (Paths.from_env().home / "setup-done").touch()  # what the wizard's Finish writes
    seen.unlink(missing_ok=True)
    with fake_watcher.changed:
        fake_watcher.items.clear()
    with running_tray(env, tmp_path / "second.log") as proc:
        fake_watcher.wait_for_item()
        time.sleep(2)  # the first run's window was asked for at this point already
        children = [" ".join(p.cmdline()) for p in psutil.Process(proc.pid).children(True)]
        assert not any("rltray.web.window" in c for c in children) and not seen.exists()


@pytest.mark.skipif(os.name != "posix", reason="signals and process groups")
@pytest.mark.parametrize("how", ["ctrl-c", "quit-signal"])
def test_ctrl_c_stops_the_tray_as_sigterm_does_and_closes_its_settings_window(
    display: str,
    session_bus: PrivateSessionBus,
    notification_server: NotificationServer,
    watcher: tuple[FakeWatcher, BusThread],
    rltray_home: Path,
    tmp_path: Path,
    how: str,
) -> None:
    """Ctrl+C in the terminal reaches the whole foreground process group: rltray, its
    settings window and any trainer. rltray must still stop as it does on SIGTERM —
    exit 0, "rltray stopped.", the window closed (not left pointing at a dead server)."""
    import psutil

    fake_watcher, _thread = watcher
    browser = tmp_path / "browser"  # a window that stays open until closed
    browser.write_text("#!/bin/sh\nexec sleep 300\n")
    browser.chmod(0o755)
    env = {**session_bus.env, "DISPLAY": display, "PYSTRAY_BACKEND": "appindicator",
           "BROWSER": str(browser), "PYWEBVIEW_GUI": "none-such"}  # fmt: skip
    log = tmp_path / "tray.log"
    with running_tray({**os.environ, **env}, log, new_session=True) as proc:
        fake_watcher.wait_for_item()
        (window,) = wait_until(
            lambda: [p for p in psutil.Process(proc.pid).children(recursive=True)
                     if "rltray.web.window" in " ".join(p.cmdline())],
            what="the setup window",
        )  # fmt: skip
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)  # only rltray: the window must be closed by it
        assert proc.wait(30) == 0, log.read_text()
        assert "rltray stopped." in log.read_text()
        assert stopped_cleanly(Paths.from_env())
        wait_until(lambda: not window.is_running() or window.status() == "zombie",
                   timeout=10, what="the settings window to close")  # fmt: skip
        assert not Paths.from_env().endpoint.exists()
