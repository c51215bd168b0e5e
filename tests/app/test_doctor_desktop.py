"""`rltray doctor` on the desktop parts: service, notifications, idle, power, tray, login start.

Real parts: a private D-Bus session with (or without) a notification server, a
running Service with its local API in this process, the keyring (the in-memory
one, or keyring's own "fail" backend for a machine without one), and the
autostart file in the test's HOME.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from rltray.app.cli import main
from rltray.app.cli.context import Context
from rltray.app.cli.doctor import FAIL, OK, WARN, Check, collect
from rltray.app.desktop.notifier import NO_BUS, NO_SERVER
from rltray.app.paths import Paths
from rltray.app.service import Service

from tests.support.dbus_fixtures import (  # noqa: F401 (the two fixtures)
    NotificationServer,
    PrivateSessionBus,
    notification_server_fixture,
    session_bus_fixture,
)


def checks() -> dict[str, Check]:
    """The checks `rltray doctor` renders (the tray and web page render the same list)."""
    ctx = Context(dict(os.environ), io.StringIO(), io.StringIO())
    try:
        return {c.name: c for c in collect(ctx)}
    finally:
        ctx.close()


def line(check: Check) -> str:
    return f"{check.state}: {check.detail} | {check.fix}"


@pytest.fixture
def running(session_bus: PrivateSessionBus, rltray_home: Path) -> Iterator[Service]:
    from rltray.app.runtime import compose
    from rltray.web.server import SettingsWeb

    service = Service(Paths.from_env())
    runtime = compose(service, SettingsWeb(), notifications=True, scheduler=False, api=True)
    try:
        yield service
    finally:
        runtime.close()
        service.close()


def test_without_a_running_service_doctor_says_so_and_probes_notifications_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/nonexistent")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("PYSTRAY_BACKEND", raising=False)
    got = checks()
    assert line(got["service"]) == (
        "warn: not running: nothing asks for ratings or trains on its own"
        " | rltray run (and `rltray autostart on` to start it at login)"
    )
    assert (got["notifications"].state, got["notifications"].detail) == (WARN, NO_BUS)
    assert got["tray"].detail.startswith("no tray icon: there is no display")
    assert (got["start at login"].state, got["start at login"].detail) == (WARN, "off")
    assert got["idle time"].state in (OK, WARN) and got["power"].state in (OK, WARN)
    assert all(c.state != FAIL for c in got.values())


def test_with_no_notification_server_on_the_bus_doctor_names_it(
    session_bus: PrivateSessionBus,
) -> None:
    assert checks()["notifications"].detail == NO_SERVER


def test_a_running_service_reports_its_notifier_and_pid(
    notification_server: NotificationServer, running: Service
) -> None:
    got = checks()
    assert line(got["service"]) == f"ok: running (pid {os.getpid()}) | "
    assert line(got["notifications"]) == "ok: the notification server shows Good / Bad buttons | "
    assert "api token" not in got  # the token is in the keyring


def test_without_a_keyring_doctor_says_the_token_is_in_the_endpoint_file(
    notification_server: NotificationServer,
    session_bus: PrivateSessionBus,
    rltray_home: Path,
) -> None:
    from keyring.backends import fail

    previous = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        from rltray.app.runtime import compose
        from rltray.web.server import SettingsWeb

        service = Service(Paths.from_env())
        runtime = compose(service, SettingsWeb(), notifications=True, scheduler=False, api=True)
        try:
            got = checks()
        finally:
            runtime.close()
            service.close()
    finally:
        keyring.set_keyring(previous)
    token = got["api token"]
    assert token.state == WARN
    assert token.detail.startswith(f"kept in {Paths.from_env().endpoint} (mode 0600)")
    assert "no keyring is available" in token.detail


def test_autostart_on_shows_in_doctor_and_off_removes_it(rltray_home: Path) -> None:
    out = io.StringIO()
    assert main(["autostart", "on"], env=dict(os.environ), stdout=out) == 0
    assert "rltray starts at login" in out.getvalue()
    start = checks()["start at login"]
    assert (start.state, Path(start.detail).name) == (OK, "rltray.desktop")
    out = io.StringIO()
    assert main(["autostart", "off"], env=dict(os.environ), stdout=out) == 0
    assert "does not start at login" in out.getvalue()


def test_a_desktop_without_a_tray_host_is_named(
    session_bus: PrivateSessionBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    probe = subprocess.run([sys.executable, "-c", "import gi"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("needs PyGObject (pip install 'pygobject<3.51'; `make test` does it)")
    monkeypatch.setenv("DISPLAY", ":0")  # only looked at, never opened
    tray = checks()["tray"]
    assert tray.state == WARN and "StatusNotifierWatcher" in tray.detail
    from tests.support.dbus_fixtures import BusThread
    from tests.support.traybus import WATCHER, WATCHER_PATH, FakeWatcher

    thread = BusThread(session_bus.address)
    try:
        thread.export(WATCHER_PATH, FakeWatcher(), WATCHER)
        assert checks()["tray"] == Check("tray", OK, "a tray icon can be shown here")
    finally:
        thread.close()


def test_a_notifier_whose_constructor_raises_is_a_warning_not_ok(
    session_bus: PrivateSessionBus, rltray_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 item 12: only the import was guarded, so doctor said "shows Good / Bad"."""
    import time

    from rltray.app.runtime import compose
    from rltray.web.server import SettingsWeb

    from tests.app.test_notify_access import Broken

    monkeypatch.setattr("desktop_notifier.main.get_backend_class", lambda: Broken)
    service = Service(Paths.from_env())
    runtime = compose(service, SettingsWeb(), notifications=True, scheduler=False, api=True)
    try:
        assert runtime.notifier is not None
        deadline = time.monotonic() + 10
        while not runtime.notifier.delivery_problems():
            assert time.monotonic() < deadline, "the notifier never reported its failed start"
            time.sleep(0.05)
        running = checks()["notifications"]
    finally:
        runtime.close()
        service.close()
    probed = checks()["notifications"]  # no service: doctor's own probe
    for got in (running, probed):
        assert got.state == WARN
        assert got.detail.startswith("desktop-notifier could not start here (RuntimeError: ")
