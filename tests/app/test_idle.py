"""Idle time from fake GNOME/KDE D-Bus services, a real Xvfb, and injected providers; AC power.

Idle inhibitors (a film, a presentation) come from a fake org.gnome.SessionManager
and a fake logind served on the same private bus (it stands in for the system bus
through DBUS_SYSTEM_BUS_ADDRESS), and from captured ``pmset -g assertions`` text.

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
from dbus_fast.annotations import DBusBool, DBusStr, DBusUInt32, DBusUInt64
from dbus_fast.constants import PropertyAccess
from dbus_fast.service import ServiceInterface, dbus_property, method
from rltray.app.desktop import idle
from rltray.app.desktop.idle import (
    IdleProvider,
    IdleUnavailable,
    InhibitCheck,
    probe_idle,
    probe_inhibit,
)

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
    # the host's logind (and whatever inhibits idle there) must not answer either
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/rltray-no-system-bus")


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


class FakeSessionManager(ServiceInterface):
    """GNOME's org.gnome.SessionManager: IsInhibited(u flags) -> b; records the flags asked."""

    def __init__(self, held_flags: int, delay_s: float = 0.0) -> None:
        super().__init__("org.gnome.SessionManager")
        self.held_flags, self.delay_s = held_flags, delay_s
        self.asked: list[int] = []

    @method()
    async def IsInhibited(self, flags: DBusUInt32) -> DBusBool:
        self.asked.append(flags)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return bool(self.held_flags & flags)


class FakeLogind(ServiceInterface):
    """logind's org.freedesktop.login1.Manager with only the BlockInhibited property."""

    def __init__(self, block_inhibited: str) -> None:
        super().__init__("org.freedesktop.login1.Manager")
        self.block_inhibited = block_inhibited

    @dbus_property(access=PropertyAccess.READ)
    def BlockInhibited(self) -> DBusStr:
        return self.block_inhibited


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

    def session_manager(self, held_flags: int, delay_s: float = 0.0) -> FakeSessionManager:
        iface = FakeSessionManager(held_flags, delay_s)
        self.serve("org.gnome.SessionManager", "/org/gnome/SessionManager", iface)
        return iface

    def logind(self, block_inhibited: str) -> None:
        self.serve("org.freedesktop.login1", "/org/freedesktop/login1", FakeLogind(block_inhibited))

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


# -- idle inhibitors: a film or a presentation means the user is there ------------

IDLE, SUSPEND = 8, 4  # org.gnome.SessionManager inhibitor flags


def test_gnome_idle_inhibitor_means_the_user_is_there(desktop: FakeDesktop) -> None:
    """Regression: input idle grew during a film and a round took the cores after 10 min."""
    desktop.mutter(600_000)
    manager = desktop.session_manager(IDLE | SUSPEND)
    assert idle.idle_seconds() == 0.0
    assert manager.asked == [IDLE]
    probe = probe_inhibit()
    assert (probe.inhibited, probe.source, probe.problems) == (True, "GNOME SessionManager", [])


def test_gnome_without_idle_inhibitor_keeps_the_idle_time(desktop: FakeDesktop) -> None:
    """A suspend-only inhibitor (a download) is no sign of a user; GNOME is asked for idle."""
    desktop.mutter(600_000)
    manager = desktop.session_manager(SUSPEND)
    assert idle.idle_seconds() == 600.0
    assert manager.asked == [IDLE]
    probe = probe_inhibit()
    assert probe.inhibited is False
    assert len(probe.problems) == 1
    assert probe.problems[0].startswith(
        "logind: cannot reach the system bus at unix:path=/nonexistent/rltray-no-system-bus: "
    )


def test_logind_idle_block_means_the_user_is_there(
    desktop: FakeDesktop, session_bus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``systemd-inhibit --what=idle``: the private bus stands in for the system bus."""
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", session_bus)
    desktop.mutter(600_000)
    desktop.logind("shutdown:sleep:idle:handle-lid-switch")
    assert idle.idle_seconds() == 0.0
    probe = probe_inhibit()
    assert (probe.inhibited, probe.source) == (True, "logind")
    assert probe.problems == [
        "GNOME SessionManager: org.gnome.SessionManager is not on the session bus"
    ]


def test_logind_without_idle_block_keeps_the_idle_time(
    desktop: FakeDesktop, session_bus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", session_bus)
    desktop.mutter(600_000)
    desktop.logind("shutdown:sleep:handle-power-key")
    assert idle.idle_seconds() == 600.0
    assert probe_inhibit().inhibited is False  # logind answered: known, not inhibited


def test_no_inhibitor_services_leave_idle_unchanged_and_fast(desktop: FakeDesktop) -> None:
    """Not GNOME, no logind: unknown, never an error, and no wait beyond the bus round trips."""
    desktop.mutter(600_000)
    started = time.monotonic()
    assert idle.idle_seconds() == 600.0
    assert time.monotonic() - started < idle.DBUS_TIMEOUT_S
    probe = probe_inhibit()
    assert (probe.inhibited, probe.source) == (None, None)
    assert [p.split(":")[0] for p in probe.problems] == ["GNOME SessionManager", "logind"]
    assert probe.problems[0].endswith("org.gnome.SessionManager is not on the session bus")


def test_hung_session_manager_costs_at_most_the_dbus_timeout(desktop: FakeDesktop) -> None:
    desktop.mutter(600_000)
    desktop.session_manager(IDLE, delay_s=5)
    started = time.monotonic()
    assert idle.idle_seconds() == 600.0  # unknown is not "inhibited"
    assert time.monotonic() - started < idle.DBUS_TIMEOUT_S + 1.0


@pytest.fixture(autouse=True)
def _nobody_seen_yet() -> Iterator[None]:
    """Each test starts as a fresh tray: no inhibitor has said the user was there."""
    idle.PRESENCE.at = None
    yield
    idle.PRESENCE.at = None


def test_after_a_film_idle_counts_from_its_end_not_from_the_last_key_press() -> None:
    """Regression: input idle read two hours the minute a film ended, so a round took the
    cores as the credits rolled; the user was there all along."""
    now = [1000.0]
    presence = idle.Presence(clock=lambda: now[0])
    playing = [True]
    checks = [InhibitCheck("player", lambda: playing[0])]
    keys = [IdleProvider("input", lambda: 7200.0 + now[0] - 1000.0)]
    assert idle.idle_seconds(keys, checks, presence) == 0.0  # the film plays
    now[0] += 60.0
    playing[0] = False  # the credits end; nobody has touched a key for two hours
    assert idle.idle_seconds(keys, checks, presence) == 60.0
    now[0] += 600.0
    assert idle.idle_seconds(keys, checks, presence) == 660.0  # away since then: it counts
    assert idle.idle_seconds([IdleProvider("input", lambda: 30.0)], checks, presence) == 30.0


def test_without_an_inhibitor_seen_idle_is_the_input_idle() -> None:
    presence = idle.Presence(clock=lambda: 5.0)
    checks = [InhibitCheck("player", lambda: False)]
    assert idle.idle_seconds([IdleProvider("input", lambda: 900.0)], checks, presence) == 900.0


def test_inhibit_checks_run_only_when_there_is_idle_time_to_cancel() -> None:
    asked: list[str] = []

    def inhibited() -> bool:
        asked.append("asked")
        return True

    checks = [InhibitCheck("player", inhibited)]
    assert idle.idle_seconds([IdleProvider("none", lambda: math.nan)], checks) is None
    assert idle.idle_seconds([IdleProvider("busy", lambda: 0.0)], checks) == 0.0
    assert asked == []
    assert idle.idle_seconds([IdleProvider("away", lambda: 900.0)], checks) == 0.0
    assert asked == ["asked"]


def test_inhibit_chain_first_yes_wins_and_failures_are_recorded() -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    def absent() -> bool:
        raise IdleUnavailable("not here")

    probe = probe_inhibit(
        [
            InhibitCheck("broken", broken),
            InhibitCheck("absent", absent),
            InhibitCheck("no", lambda: False),
            InhibitCheck("yes", lambda: True),
            InhibitCheck("never asked", broken),
        ]
    )
    assert (probe.inhibited, probe.source) == (True, "yes")
    assert probe.problems == ["broken: RuntimeError: boom", "absent: not here"]
    assert probe_inhibit([InhibitCheck("absent", absent)]).inhibited is None
    assert probe_inhibit([]).inhibited is None


def test_default_inhibit_checks_per_platform() -> None:
    names = [c.name for c in idle.default_inhibit_checks("linux")]
    assert names == ["GNOME SessionManager", "logind"]
    assert [c.name for c in idle.default_inhibit_checks("darwin")] == ["macOS pmset assertions"]
    assert idle.default_inhibit_checks("win32") == []  # no unprivileged API; see the module


# `pmset -g assertions` as macOS prints it (format of a real capture: header, system-wide
# counts, then one line per assertion with indented detail lines). powerd's "display is
# on" assertion and WindowServer's UserIsActive are always there.
PMSET_BASELINE = """\
2025-11-02 13:20:57 -0600
Assertion status system-wide:
   BackgroundTask                 0
   ApplePushServiceTask           0
   UserIsActive                   1
   PreventUserIdleDisplaySleep    0
   PreventSystemSleep             0
   ExternalMedia                  0
   PreventUserIdleSystemSleep     1
   NetworkClientActive            0
Listed by owning process:
   pid 145(WindowServer): [0x00044f2f00099212] 00:00:00 UserIsActive named: \
"com.apple.iohideventsystem.queue.tickle serviceID:10009be9e service:AppleUserHIDEventService"
	Timeout will fire in 600 secs Action=TimeoutActionRelease
   pid 80(powerd): [0x00044f2f00019216] 00:22:34 PreventUserIdleSystemSleep named: \
"Powerd - Prevent sleep while display is on"
   pid 98217(caffeinate): [0x00045477000194b3] 00:00:03 PreventUserIdleSystemSleep named: \
"caffeinate command-line tool"
	Details: caffeinate asserting for 1600 secs
	Localized=THE CAFFEINATE TOOL IS PREVENTING SLEEP.
	Timeout will fire in 1597 secs Action=TimeoutActionRelease
"""  # a backslash at a line's end joins it with the next: one line per assertion

PMSET_FILM = PMSET_BASELINE.replace(
    "PreventUserIdleDisplaySleep    0", "PreventUserIdleDisplaySleep    2"
) + (
    "   pid 412(Google Chrome Helper (Renderer)): [0x0004547700019a11] 00:41:07 "
    'PreventUserIdleDisplaySleep named: "Video Wake Lock"\n'
    "   pid 80(powerd): [0x00044f2f00019217] 00:41:07 PreventUserIdleDisplaySleep named: "
    '"powerd self"\n'
    "Kernel Assertions: 0x4=USB\n"
    "   id=500  level=255 0x4=USB mod=11/2/25, 1:02 PM description=com.apple.usb.externaldevice\n"
)


def test_pmset_baseline_has_no_display_holder() -> None:
    """powerd's own and caffeinate's system-sleep assertions are no sign of a user."""
    assert "Listed by owning process" in PMSET_BASELINE
    assert idle.macos_display_holders(PMSET_BASELINE) == []


def test_pmset_video_wake_lock_is_a_display_holder() -> None:
    assert idle.macos_display_holders(PMSET_FILM) == [
        "Google Chrome Helper (Renderer) (pid 412): Video Wake Lock"
    ]


@pytest.mark.skipif(not hasattr(os, "uname") or os.uname().sysname != "Darwin", reason="macOS only")
def test_macos_pmset_check_answers() -> None:
    assert idle.macos_display_inhibited() in (True, False)


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
