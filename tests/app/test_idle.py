"""Idle time from fake GNOME/KDE D-Bus services, a real Xvfb, and injected providers; AC power.

The D-Bus tests start a private ``dbus-daemon`` (dbus_fixtures.PrivateSessionBus: no
service activation, so nothing installed on the host can answer in the fakes' place)
and export fake Mutter IdleMonitor / freedesktop ScreenSaver objects with
dbus-fast on an asyncio loop thread; ``rltray.app.desktop.idle`` then queries them
through jeepney exactly as on a desktop. The X11 tests start their own Xvfb
and reset its idle counter with xdotool. Each test that needs a binary skips
with the package to install when it is missing.
"""

import asyncio
import math
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from dbus_fast import DBusError
from dbus_fast.aio import MessageBus
from dbus_fast.annotations import DBusUInt32, DBusUInt64
from dbus_fast.service import ServiceInterface, method
from rltray.app.desktop import idle
from rltray.app.desktop.idle import IdleProvider, IdleUnavailable, probe_idle

from tests.support.dbus_fixtures import PrivateSessionBus, missing_dbus_daemon

LINUX_CHAIN = ["Mutter IdleMonitor", "freedesktop ScreenSaver", "X11 XScreenSaver"]

@pytest.fixture(autouse=True)
def no_desktop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own bus and display must never answer these tests."""
    for name in (
        "DBUS_SESSION_BUS_ADDRESS",
        "DISPLAY",
        "WAYLAND_DISPLAY",
        "XDG_SESSION_TYPE",
        "XDG_RUNTIME_DIR",
    ):
        monkeypatch.delenv(name, raising=False)


# -- a private session bus with fake services -----------------------------------


@pytest.fixture
def bus_dir() -> Iterator[Path]:
    """A short folder for the bus socket (a unix socket path is limited to ~107 bytes)."""
    short = "/tmp" if os.path.isdir("/tmp") else None  # the per-test TMPDIR can be too long
    folder = Path(tempfile.mkdtemp(prefix="rltray-bus-", dir=short))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def session_bus(
    bus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """A private bus whose socket is ``bus_dir/bus`` (where $XDG_RUNTIME_DIR/bus would be)."""
    missing = missing_dbus_daemon()
    if missing:
        pytest.skip(missing)
    bus = PrivateSessionBus(tmp_path / "dbus", socket=bus_dir / "bus")
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", bus.address)
    yield bus.address
    bus.stop()


class FakeMutter(ServiceInterface):
    """GNOME's org.gnome.Mutter.IdleMonitor: GetIdletime() -> t (ms)."""

    def __init__(self, ms: int, delay_s: float = 0.0, fail: bool = False) -> None:
        super().__init__("org.gnome.Mutter.IdleMonitor")
        self.ms, self.delay_s, self.fail = ms, delay_s, fail

    @method()
    async def GetIdletime(self) -> DBusUInt64:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail:
            raise DBusError("org.gnome.Mutter.IdleMonitor.Error.Failed", "monitor gone")
        return self.ms


class FakeScreenSaver(ServiceInterface):
    """KDE's org.freedesktop.ScreenSaver: GetSessionIdleTime() -> u (ms)."""

    def __init__(self, ms: int) -> None:
        super().__init__("org.freedesktop.ScreenSaver")
        self.ms = ms

    @method()
    def GetSessionIdleTime(self) -> DBusUInt32:
        return self.ms


class FakeDesktop:
    """Owns an asyncio loop thread that serves fake interfaces on the session bus."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.buses: list[MessageBus] = []

    def serve(self, bus_name: str, path: str, interface: ServiceInterface) -> None:
        async def export() -> None:
            bus = await MessageBus(bus_address=self.address).connect()
            bus.export(path, interface)
            await bus.request_name(bus_name)
            self.buses.append(bus)

        asyncio.run_coroutine_threadsafe(export(), self.loop).result(5)

    def mutter(self, *args: object, **kwargs: object) -> None:
        iface = FakeMutter(*args, **kwargs)  # type: ignore[arg-type]
        self.serve("org.gnome.Mutter.IdleMonitor", "/org/gnome/Mutter/IdleMonitor/Core", iface)

    def screensaver(self, ms: int) -> None:
        self.serve(
            "org.freedesktop.ScreenSaver", "/org/freedesktop/ScreenSaver", FakeScreenSaver(ms)
        )

    def close(self) -> None:
        async def stop() -> None:
            for bus in self.buses:
                bus.disconnect()
            me = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not me]
            for task in pending:  # a hung fake method still sleeping
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def desktop(session_bus: str) -> Iterator[FakeDesktop]:
    fake = FakeDesktop(session_bus)
    yield fake
    fake.close()


def test_mutter_idle_monitor_answers_first(desktop: FakeDesktop) -> None:
    desktop.mutter(600_000)
    desktop.screensaver(5_000)
    probe = probe_idle()
    assert (probe.seconds, probe.source, probe.problems) == (600.0, "Mutter IdleMonitor", [])
    assert idle.idle_seconds() == 600.0


def test_screensaver_answers_when_mutter_is_absent(desktop: FakeDesktop) -> None:
    """KDE has no Mutter: the chain must fall through to org.freedesktop.ScreenSaver."""
    desktop.screensaver(42_500)
    probe = probe_idle()
    assert (probe.seconds, probe.source) == (42.5, "freedesktop ScreenSaver")
    assert probe.problems == [
        "Mutter IdleMonitor: org.gnome.Mutter.IdleMonitor is not on the session bus"
    ]


def test_mutter_error_falls_through_with_its_error_name(desktop: FakeDesktop) -> None:
    desktop.mutter(1, fail=True)
    desktop.screensaver(7_000)
    probe = probe_idle()
    assert probe.seconds == 7.0
    assert "org.gnome.Mutter.IdleMonitor.Error.Failed" in probe.problems[0]


def test_hung_mutter_costs_at_most_the_dbus_timeout(desktop: FakeDesktop) -> None:
    """Regression guard: a service that never answers must not stall the scheduler's gate."""
    desktop.mutter(1, delay_s=5)
    desktop.screensaver(3_000)
    started = time.monotonic()
    probe = probe_idle()
    assert time.monotonic() - started < idle.DBUS_TIMEOUT_S + 1.0
    assert probe.seconds == 3.0
    assert probe.problems == [
        "Mutter IdleMonitor: org.gnome.Mutter.IdleMonitor did not answer within 1 s"
    ]


def test_bus_without_idle_services_and_no_display_is_unknown(desktop: FakeDesktop) -> None:
    probe = probe_idle()
    assert probe.seconds is None and probe.source is None
    assert [p.split(":")[0] for p in probe.problems] == LINUX_CHAIN
    assert probe.problems[1].endswith("org.freedesktop.ScreenSaver is not on the session bus")
    assert idle.idle_seconds() is None


def test_runtime_dir_bus_is_found_without_the_address_variable(
    desktop: FakeDesktop, bus_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An autostarted tray may lack DBUS_SESSION_BUS_ADDRESS; $XDG_RUNTIME_DIR/bus still works."""
    desktop.mutter(2_000)
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(bus_dir))
    assert idle.session_bus_address() == f"unix:path={bus_dir / 'bus'}"
    assert idle.idle_seconds() == 2.0


def test_no_bus_and_no_display_lists_every_problem() -> None:
    probe = probe_idle(idle.default_providers("linux"))
    assert probe.seconds is None
    assert probe.problems == [
        "Mutter IdleMonitor: no session bus (DBUS_SESSION_BUS_ADDRESS is not set)",
        "freedesktop ScreenSaver: no session bus (DBUS_SESSION_BUS_ADDRESS is not set)",
        "X11 XScreenSaver: no X display (DISPLAY is not set)",
    ]


def test_dead_bus_address_is_a_problem_not_an_exception(bus_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={bus_dir / 'nobody-here'}")
    probe = probe_idle()
    assert probe.seconds is None
    assert probe.problems[0].startswith("Mutter IdleMonitor: cannot reach the session bus at unix:")


# -- X11 on a private Xvfb ---------------------------------------------------------


@pytest.fixture
def xvfb_display(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Start ``Xvfb -displayfd`` (it picks a free display and prints it when ready).

    ``-noreset``: with no window manager, each probe is the server's only client,
    and a server that resets when its last client leaves also resets the idle
    counter — a desktop always has clients, so the test must too.
    """
    binary = shutil.which("Xvfb")
    if binary is None:
        pytest.skip("Xvfb not installed (apt install xvfb)")
    pytest.importorskip("Xlib", reason="python-xlib not installed (pip install python-xlib)")
    proc = subprocess.Popen(
        [binary, "-displayfd", "1", "-screen", "0", "640x480x24", "-nolisten", "tcp", "-noreset"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready, "Xvfb did not report a display within 10 s"
        assert proc.stdout is not None
        number = proc.stdout.readline().decode().strip()
        assert number.isdigit(), f"Xvfb printed {number!r}"
        display = f":{number}"
        monkeypatch.setenv("DISPLAY", display)
        yield display
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_x11_idle_grows_and_input_resets_it(xvfb_display: str) -> None:
    xdotool = shutil.which("xdotool")
    if xdotool is None:
        pytest.skip("xdotool not installed (apt install xdotool)")
    time.sleep(1.2)
    first = idle.x11_idle()
    time.sleep(0.4)
    second = idle.x11_idle()
    assert 1.0 <= first < second
    subprocess.run([xdotool, "mousemove_relative", "5", "5"], check=True, timeout=10)
    assert idle.x11_idle() < 1.0


def test_x11_answers_through_the_chain_when_dbus_has_nothing(xvfb_display: str) -> None:
    probe = probe_idle()
    assert probe.source == "X11 XScreenSaver"
    assert probe.seconds is not None and 0 <= probe.seconds < 60
    assert len(probe.problems) == 2


def test_x11_is_refused_under_wayland(xvfb_display: str, monkeypatch) -> None:
    """Regression guard: XWayland's idle grows while the user types in Wayland windows."""
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    with pytest.raises(IdleUnavailable, match="Wayland"):
        idle.x11_idle()


def test_unreachable_x_display_is_a_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("Xlib", reason="python-xlib not installed (pip install python-xlib)")
    monkeypatch.setenv("DISPLAY", ":987")
    probe = probe_idle([IdleProvider("X11 XScreenSaver", idle.x11_idle)])
    assert probe.seconds is None
    assert probe.problems[0].startswith("X11 XScreenSaver: cannot open X display :987")


# -- the chain with injected providers --------------------------------------------


def test_chain_order_and_each_failure_recorded() -> None:
    def broken() -> float:
        raise RuntimeError("boom")

    probe = probe_idle(
        [
            IdleProvider("first", broken),
            IdleProvider("negative", lambda: -1.0),
            IdleProvider("nan", lambda: math.nan),
            IdleProvider("good", lambda: 12.0),
            IdleProvider("never asked", lambda: 99.0),
        ]
    )
    assert (probe.seconds, probe.source) == (12.0, "good")
    assert probe.problems == [
        "first: RuntimeError: boom",
        "negative: implausible idle time -1.0",
        "nan: implausible idle time nan",
    ]


def test_provider_that_hangs_is_abandoned_at_the_deadline() -> None:
    release = threading.Event()

    def hang() -> float:
        release.wait(10)
        return 1.0

    started = time.monotonic()
    probe = probe_idle(
        [IdleProvider("stuck", hang), IdleProvider("ok", lambda: 4.0)], deadline_s=0.2
    )
    release.set()
    assert time.monotonic() - started < 2
    assert (probe.seconds, probe.problems) == (4.0, ["stuck: no answer within 0.2 s"])


def test_empty_chain_says_so() -> None:
    assert probe_idle([]).problems == ["no idle provider for this platform"]


def test_default_providers_per_platform() -> None:
    assert [p.name for p in idle.default_providers("linux")] == LINUX_CHAIN
    assert [p.name for p in idle.default_providers("darwin")] == ["macOS CGEventSource"]
    assert [p.name for p in idle.default_providers("win32")] == ["Windows GetLastInputInfo"]


@pytest.mark.skipif(not hasattr(os, "uname") or os.uname().sysname != "Darwin", reason="macOS only")
def test_macos_provider_reads_a_number() -> None:
    assert idle.macos_idle() >= 0


@pytest.mark.skipif(os.name != "nt", reason="Windows only")
def test_windows_provider_reads_a_number() -> None:
    assert idle.windows_idle() >= 0


# -- power ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("battery", "expected"),
    [
        (None, True),  # no battery: a desktop
        (SimpleNamespace(power_plugged=True, percent=50), True),
        (SimpleNamespace(power_plugged=False, percent=50), False),
        (SimpleNamespace(power_plugged=None, percent=50), None),  # psutil could not tell
    ],
)
def test_on_ac_power_from_battery(battery: object, expected: bool | None) -> None:
    assert idle.on_ac_power(lambda: battery) is expected


def test_on_ac_power_sensor_failure_is_unknown() -> None:
    def broken() -> object:
        raise OSError("no /sys")

    assert idle.on_ac_power(broken) is None


def test_on_ac_power_real_psutil_never_raises() -> None:
    assert idle.on_ac_power() in (True, False, None)
