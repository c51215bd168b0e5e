"""How long the user has been away from keyboard and mouse, and whether the machine is on mains.

Why our own module (DESKTOP-STACK.md §4.2): no maintained library covers all
three OSes; ``idle-time`` on PyPI pins a jeepney that conflicts with keyring.
Like ActivityWatch's afk watcher, each source is one small function and
:func:`probe_idle` walks a chain of them, first answer wins:

* Linux: GNOME's Mutter IdleMonitor (X11 and Wayland), then
  ``org.freedesktop.ScreenSaver`` (KDE), then the X11 XScreenSaver extension
  (python-xlib; refused under Wayland, where XWayland sees only X11 windows'
  input and would call a busy user idle).
* macOS: ``CGEventSourceSecondsSinceLastEventType`` through ctypes.
* Windows: ``GetLastInputInfo`` through ctypes.

Input idle grows while the user watches a film or presents without touching
anything, so :func:`idle_seconds` also asks whether something *inhibits idle*
(media players and browsers do while playing) and then reports 0, the user is
there. The checks, first "yes" wins, each unknown answer just skipped:

* Linux: GNOME's ``org.gnome.SessionManager.IsInhibited(8)`` (8 = idle; the
  session bus), then logind's ``BlockInhibited`` property containing ``idle``
  (the system bus; ``systemd-inhibit --what=idle``). The idle-inhibition
  spec's ``org.freedesktop.ScreenSaver`` (KDE) has Inhibit/UnInhibit but no
  query, and ``org.freedesktop.PowerManagement.Inhibit.HasInhibit`` is about
  suspend, not "screen in use", so KDE is not covered yet.
* macOS: ``pmset -g assertions``: a ``PreventUserIdleDisplaySleep`` assertion
  (what players, browsers' video and Keynote take) held by a process other
  than powerd. ``PreventUserIdleSystemSleep`` is left out on purpose, like
  GNOME's suspend flag (4): downloads, backups, coreaudiod for any sound and
  powerd's own "prevent sleep while display is on" take it without a user.
* Windows: none. Reading other processes' ``SetThreadExecutionState``
  requests needs ``powercfg /requests`` as administrator; there is no
  unprivileged API for it (the aggregate ``CallNtPowerInformation
  (SystemExecutionState)`` is untested here).

An inhibitor only answers "is the user there now": once the film ends, input
idle is the time since the last key press, two hours after a film. So the last
moment an inhibitor said the user was there is remembered (:class:`Presence`),
and idle counts from the later of the two: a round does not start the minute the
credits end.

D-Bus calls are blocking jeepney calls (keyring already needs jeepney on
Linux; dbus-fast is asyncio-only) with a one-second limit, and every provider
runs under an overall deadline on a helper thread, so a stuck bus or X server
can never hang the scheduler's gate. Nothing here raises: unknown idle is
``None`` and each provider's failure is kept in ``IdleProbe.problems`` for
``rltray doctor``. Unknown idle means the scheduler does not train.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

DBUS_TIMEOUT_S = 1.0
PROVIDER_DEADLINE_S = 2.0
PMSET_TIMEOUT_S = 1.5
SYSTEM_BUS_DEFAULT = "unix:path=/run/dbus/system_bus_socket"
GSM_INHIBITOR_FLAG_IDLE = 8  # org.gnome.SessionManager: 1 logout, 2 switch user, 4 suspend, 8 idle


class IdleUnavailable(Exception):
    """A provider cannot answer here; the message is one sentence for ``rltray doctor``."""


@dataclass(frozen=True)
class IdleProvider:
    """One idle source: a label for messages and a function returning idle seconds or raising."""

    name: str
    read: Callable[[], float]


@dataclass(frozen=True)
class InhibitCheck:
    """One "does something keep the screen awake?" source: a label and a bool function."""

    name: str
    read: Callable[[], bool]


@dataclass(frozen=True)
class InhibitProbe:
    """True: something inhibits idle (``source`` says what); None: no check could tell."""

    inhibited: bool | None
    source: str | None = None
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class IdleProbe:
    """The chain's answer: seconds (None = unknown), which provider gave it, and what failed."""

    seconds: float | None
    source: str | None = None
    problems: list[str] = field(default_factory=list)


# -- Linux: D-Bus -------------------------------------------------------------


def session_bus_address() -> str:
    """The session bus address, with the ``$XDG_RUNTIME_DIR/bus`` fallback libdbus and sd-bus use.

    An autostarted tray can miss DBUS_SESSION_BUS_ADDRESS while the systemd
    user bus is still there.
    """
    address = os.environ.get("DBUS_SESSION_BUS_ADDRESS", "").strip()
    if address:
        return address
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.exists(os.path.join(runtime, "bus")):
        return "unix:path=" + os.path.join(runtime, "bus")
    raise IdleUnavailable("no session bus (DBUS_SESSION_BUS_ADDRESS is not set)")


def system_bus_address() -> str:
    """``$DBUS_SYSTEM_BUS_ADDRESS`` or the standard socket (logind lives there)."""
    return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS", "").strip() or SYSTEM_BUS_DEFAULT


def _dbus_call(
    bus_name: str,
    path: str,
    interface: str,
    method: str,
    signature: str | None = None,
    body: tuple[object, ...] = (),
    *,
    system: bool = False,
) -> tuple[object, ...]:
    """One blocking method call on the session (or system) bus, limited to DBUS_TIMEOUT_S."""
    try:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        from jeepney.wrappers import DBusErrorResponse, unwrap_msg
    except ImportError as exc:
        raise IdleUnavailable("jeepney is not installed (pip install jeepney)") from exc
    which = "system bus" if system else "session bus"
    address = system_bus_address() if system else session_bus_address()
    target = DBusAddress(path, bus_name=bus_name, interface=interface)
    msg = new_method_call(target, method, signature, body)
    try:
        with open_dbus_connection(bus=address, auth_timeout=DBUS_TIMEOUT_S) as conn:
            reply = conn.send_and_get_reply(msg, timeout=DBUS_TIMEOUT_S)
        return tuple(unwrap_msg(reply))
    except DBusErrorResponse as exc:
        if exc.name == "org.freedesktop.DBus.Error.ServiceUnknown":
            raise IdleUnavailable(f"{bus_name} is not on the {which}") from exc
        raise IdleUnavailable(f"{bus_name}.{method} failed: {exc.name}") from exc
    except TimeoutError as exc:
        raise IdleUnavailable(f"{bus_name} did not answer within {DBUS_TIMEOUT_S:g} s") from exc
    except (OSError, RuntimeError, ValueError) as exc:
        raise IdleUnavailable(f"cannot reach the {which} at {address}: {exc}") from exc


def mutter_idle() -> float:
    """GNOME (X11 and Wayland): ``GetIdletime() → t`` in milliseconds."""
    (ms,) = _dbus_call(
        "org.gnome.Mutter.IdleMonitor",
        "/org/gnome/Mutter/IdleMonitor/Core",
        "org.gnome.Mutter.IdleMonitor",
        "GetIdletime",
    )
    return float(ms) / 1000.0  # type: ignore[arg-type]


def freedesktop_screensaver_idle() -> float:
    """KDE and others: ``GetSessionIdleTime() → u`` in milliseconds (GNOME does not offer it)."""
    (ms,) = _dbus_call(
        "org.freedesktop.ScreenSaver",
        "/org/freedesktop/ScreenSaver",
        "org.freedesktop.ScreenSaver",
        "GetSessionIdleTime",
    )
    return float(ms) / 1000.0  # type: ignore[arg-type]


def gnome_idle_inhibited() -> bool:
    """GNOME: ``IsInhibited(u flags) → b`` with the idle flag (players and browsers set it)."""
    (inhibited,) = _dbus_call(
        "org.gnome.SessionManager",
        "/org/gnome/SessionManager",
        "org.gnome.SessionManager",
        "IsInhibited",
        "u",
        (GSM_INHIBITOR_FLAG_IDLE,),
    )
    return bool(inhibited)


def logind_idle_inhibited() -> bool:
    """logind: the Manager's ``BlockInhibited`` (``"sleep:idle:…"``) names ``idle``."""
    (variant,) = _dbus_call(
        "org.freedesktop.login1",
        "/org/freedesktop/login1",
        "org.freedesktop.DBus.Properties",
        "Get",
        "ss",
        ("org.freedesktop.login1.Manager", "BlockInhibited"),
        system=True,
    )
    what = variant[1] if isinstance(variant, tuple) else variant  # jeepney: (signature, value)
    if not isinstance(what, str):
        raise IdleUnavailable(f"BlockInhibited is not a string: {what!r}")
    return "idle" in what.split(":")


# -- Linux: X11 ---------------------------------------------------------------


def x11_idle() -> float:
    """XScreenSaver extension through python-xlib, imported lazily (pystray brings it)."""
    if os.environ.get("WAYLAND_DISPLAY") or os.environ.get("XDG_SESSION_TYPE") == "wayland":
        raise IdleUnavailable(
            "X11 idle time is wrong under Wayland (XWayland sees only X11 windows' input)"
        )
    if not os.environ.get("DISPLAY"):
        raise IdleUnavailable("no X display (DISPLAY is not set)")
    try:
        from Xlib import display as xdisplay
        from Xlib import error as xerror
    except ImportError as exc:
        raise IdleUnavailable("python-xlib is not installed (pip install python-xlib)") from exc
    try:
        d = xdisplay.Display()
    except (xerror.DisplayError, OSError) as exc:
        raise IdleUnavailable(f"cannot open X display {os.environ['DISPLAY']}: {exc}") from exc
    try:
        if not d.has_extension("MIT-SCREEN-SAVER"):
            raise IdleUnavailable("the X server has no MIT-SCREEN-SAVER extension")
        # not Xlib.ext.screensaver.query_info(d, root): that raises TypeError
        return d.screen().root.screensaver_query_info().idle / 1000.0
    finally:
        d.close()


# -- macOS and Windows ----------------------------------------------------------


def macos_idle() -> float:
    """Seconds since any HID input (kCGEventSourceStateHIDSystemState, kCGAnyInputEventType)."""
    import ctypes

    lib = ctypes.cdll.LoadLibrary(
        "/System/Library/Frameworks/ApplicationServices.framework/ApplicationServices"
    )
    fn = lib.CGEventSourceSecondsSinceLastEventType
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_int32, ctypes.c_uint32]
    return float(fn(1, 0xFFFFFFFF))


MACOS_PRESENCE_ASSERTIONS = frozenset({"PreventUserIdleDisplaySleep", "NoDisplaySleepAssertion"})
MACOS_BASELINE_OWNERS = frozenset({"powerd"})  # the system's own, held whenever the display is on
_PMSET_LINE = re.compile(
    r"^\s*pid (\d+)\((.*?)\):\s+\[0x[0-9A-Fa-f]+\]\s+\S+\s+(\w+)\s+named:\s+\"(.*)\"\s*$"
)


def macos_display_holders(pmset_text: str) -> list[str]:
    """Who keeps the display awake, from ``pmset -g assertions``: ``"owner (pid N): name"``.

    Reads the "Listed by owning process" lines, e.g.
    ``pid 456(Google Chrome): [0x…] 00:01:02 PreventUserIdleDisplaySleep named: "Video Wake Lock"``,
    and keeps those of MACOS_PRESENCE_ASSERTIONS types not held by a baseline owner.
    """
    holders = []
    for line in pmset_text.splitlines():
        match = _PMSET_LINE.match(line)
        if match is None:
            continue
        pid, owner, kind, name = match.groups()
        if kind in MACOS_PRESENCE_ASSERTIONS and owner not in MACOS_BASELINE_OWNERS:
            holders.append(f"{owner} (pid {pid}): {name}")
    return holders


def macos_display_inhibited() -> bool:
    """macOS: an app holds a display-sleep assertion (``pmset -g assertions``, a short timeout)."""
    try:
        out = subprocess.run(
            ["/usr/bin/pmset", "-g", "assertions"],
            capture_output=True,
            text=True,
            timeout=PMSET_TIMEOUT_S,
            check=True,
        ).stdout
    except subprocess.TimeoutExpired as exc:
        raise IdleUnavailable(f"pmset did not answer within {PMSET_TIMEOUT_S:g} s") from exc
    except (OSError, subprocess.CalledProcessError) as exc:
        raise IdleUnavailable(f"pmset -g assertions failed: {exc}") from exc
    if "Listed by owning process" not in out:
        raise IdleUnavailable("pmset -g assertions printed no per-process list")
    return bool(macos_display_holders(out))


def windows_idle() -> float:
    """Milliseconds since the session's last input, from GetLastInputInfo and GetTickCount."""
    import ctypes

    class LastInputInfo(ctypes.Structure):
        _fields_ = [("cbSize", ctypes.c_uint), ("dwTime", ctypes.c_uint32)]

    info = LastInputInfo(ctypes.sizeof(LastInputInfo), 0)
    windll = ctypes.windll  # type: ignore[attr-defined]
    if not windll.user32.GetLastInputInfo(ctypes.byref(info)):
        raise IdleUnavailable("GetLastInputInfo failed")
    windll.kernel32.GetTickCount.restype = ctypes.c_uint32
    return ((windll.kernel32.GetTickCount() - info.dwTime) & 0xFFFFFFFF) / 1000.0


# -- the chain ------------------------------------------------------------------


def default_providers(platform: str | None = None) -> list[IdleProvider]:
    """The providers to try on ``platform`` (``sys.platform`` by default), best first."""
    platform = platform or sys.platform
    if platform == "darwin":
        return [IdleProvider("macOS CGEventSource", macos_idle)]
    if platform == "win32":
        return [IdleProvider("Windows GetLastInputInfo", windows_idle)]
    return [
        IdleProvider("Mutter IdleMonitor", mutter_idle),
        IdleProvider("freedesktop ScreenSaver", freedesktop_screensaver_idle),
        IdleProvider("X11 XScreenSaver", x11_idle),
    ]


def default_inhibit_checks(platform: str | None = None) -> list[InhibitCheck]:
    """The "something keeps the screen awake" checks on ``platform``; none on Windows."""
    platform = platform or sys.platform
    if platform == "darwin":
        return [InhibitCheck("macOS pmset assertions", macos_display_inhibited)]
    if platform == "win32":
        return []
    return [
        InhibitCheck("GNOME SessionManager", gnome_idle_inhibited),
        InhibitCheck("logind", logind_idle_inhibited),
    ]


def _read_with_deadline(provider: IdleProvider | InhibitCheck, deadline_s: float) -> Any:
    """Run one provider on a daemon thread; a hung bus or X server costs at most ``deadline_s``."""
    box: list[object] = []

    def run() -> None:
        try:
            box.append(provider.read())
        except Exception as exc:  # handed to the caller's thread below
            box.append(exc)

    worker = threading.Thread(target=run, name=f"rltray-idle {provider.name}", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if not box:
        if worker.is_alive():
            raise IdleUnavailable(f"no answer within {deadline_s:g} s")
        raise IdleUnavailable("stopped without an answer")
    result = box[0]
    if isinstance(result, Exception):
        raise result
    return result


def _answers(sources: Sequence[Any], deadline_s: float, problems: list[str]) -> Any:
    """Each source's answer in turn (``(source, value)``); one that fails or hangs is
    noted in ``problems`` and skipped. The one way every probe below asks."""
    for source in sources:
        try:
            yield source, _read_with_deadline(source, deadline_s)
        except IdleUnavailable as exc:
            problems.append(f"{source.name}: {exc}")
        except Exception as exc:
            problems.append(f"{source.name}: {type(exc).__name__}: {exc}")


def probe_idle(
    providers: Sequence[IdleProvider] | None = None, *, deadline_s: float = PROVIDER_DEADLINE_S
) -> IdleProbe:
    """Ask each provider in turn; the first plausible answer wins. Never raises."""
    problems: list[str] = []
    chosen = default_providers() if providers is None else providers
    for provider, value in _answers(chosen, deadline_s, problems):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = math.nan
        if not math.isfinite(seconds) or seconds < 0:
            problems.append(f"{provider.name}: implausible idle time {value!r}")
            continue
        return IdleProbe(seconds, provider.name, problems)
    if not problems:
        problems.append("no idle provider for this platform")
    return IdleProbe(None, None, problems)


def probe_inhibit(
    checks: Sequence[InhibitCheck] | None = None, *, deadline_s: float = PROVIDER_DEADLINE_S
) -> InhibitProbe:
    """Ask each check in turn; the first "inhibited" wins. Never raises."""
    problems: list[str] = []
    answered = False
    chosen = default_inhibit_checks() if checks is None else checks
    for check, inhibited in _answers(chosen, deadline_s, problems):
        if inhibited:
            return InhibitProbe(True, check.name, problems)
        answered = True
    return InhibitProbe(False if answered else None, None, problems)


class Presence:
    """The last moment (monotonic) an inhibitor said the user was there.

    One per process: the gate asks every minute or so, so the end of a film is
    known to within one tick. Monotonic, so a clock set back cannot make the
    user look present (or away) for an hour.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.at: float | None = None

    def seen(self) -> None:
        self.at = self.clock()

    def since(self) -> float | None:
        """Seconds since the user was last seen through an inhibitor; None: never."""
        return None if self.at is None else max(0.0, self.clock() - self.at)


PRESENCE = Presence()


def idle_seconds(
    providers: Sequence[IdleProvider] | None = None,
    inhibit_checks: Sequence[InhibitCheck] | None = None,
    presence: Presence | None = None,
) -> float | None:
    """Seconds since the user last touched keyboard or mouse, or was last seen watching
    (``presence``); None when no provider can tell.

    0 while something inhibits idle (a film, a presentation): the user is there.
    The inhibit checks run only when there is idle time to cancel, and an
    unknown answer leaves the idle time as it is.
    """
    presence = PRESENCE if presence is None else presence
    seconds = probe_idle(providers).seconds
    if not seconds:  # None (unknown) or already 0
        return seconds
    if probe_inhibit(inhibit_checks).inhibited:
        presence.seen()
        return 0.0
    since = presence.since()
    return seconds if since is None else min(seconds, since)


# -- power ----------------------------------------------------------------------


def on_ac_power(sensor: Callable[[], object] | None = None) -> bool | None:
    """True on mains or without a battery (a desktop), False on battery, None if unknown.

    ``sensor`` defaults to ``psutil.sensors_battery``; a None battery means no
    battery at all, so a desktop qualifies (DESKTOP-STACK.md §4.3).
    """
    try:
        if sensor is None:
            import psutil

            sensor = psutil.sensors_battery
        battery = sensor()
    except Exception:
        return None
    if battery is None:
        return True
    plugged = getattr(battery, "power_plugged", None)
    return None if plugged is None else bool(plugged)
