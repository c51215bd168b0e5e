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
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

DBUS_TIMEOUT_S = 1.0
PROVIDER_DEADLINE_S = 2.0


class IdleUnavailable(Exception):
    """A provider cannot answer here; the message is one sentence for ``rltray doctor``."""


@dataclass(frozen=True)
class IdleProvider:
    """One idle source: a label for messages and a function returning idle seconds or raising."""

    name: str
    read: Callable[[], float]


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


def _dbus_call(bus_name: str, path: str, interface: str, method: str) -> tuple[object, ...]:
    """One blocking method call on the session bus with no arguments, limited to DBUS_TIMEOUT_S."""
    try:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        from jeepney.wrappers import DBusErrorResponse, unwrap_msg
    except ImportError as exc:
        raise IdleUnavailable("jeepney is not installed (pip install jeepney)") from exc
    address = session_bus_address()
    msg = new_method_call(DBusAddress(path, bus_name=bus_name, interface=interface), method)
    try:
        with open_dbus_connection(bus=address, auth_timeout=DBUS_TIMEOUT_S) as conn:
            reply = conn.send_and_get_reply(msg, timeout=DBUS_TIMEOUT_S)
        return tuple(unwrap_msg(reply))
    except DBusErrorResponse as exc:
        if exc.name == "org.freedesktop.DBus.Error.ServiceUnknown":
            raise IdleUnavailable(f"{bus_name} is not on the session bus") from exc
        raise IdleUnavailable(f"{bus_name}.{method} failed: {exc.name}") from exc
    except TimeoutError as exc:
        raise IdleUnavailable(f"{bus_name} did not answer within {DBUS_TIMEOUT_S:g} s") from exc
    except (OSError, RuntimeError, ValueError) as exc:
        raise IdleUnavailable(f"cannot reach the session bus at {address}: {exc}") from exc


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


def _read_with_deadline(provider: IdleProvider, deadline_s: float) -> float:
    """Run one provider on a daemon thread; a hung bus or X server costs at most ``deadline_s``."""
    box: list[float | Exception] = []

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


def probe_idle(
    providers: Sequence[IdleProvider] | None = None, *, deadline_s: float = PROVIDER_DEADLINE_S
) -> IdleProbe:
    """Ask each provider in turn; the first plausible answer wins. Never raises."""
    problems: list[str] = []
    for provider in default_providers() if providers is None else providers:
        try:
            seconds = float(_read_with_deadline(provider, deadline_s))
        except IdleUnavailable as exc:
            problems.append(f"{provider.name}: {exc}")
            continue
        except Exception as exc:
            problems.append(f"{provider.name}: {type(exc).__name__}: {exc}")
            continue
        if not math.isfinite(seconds) or seconds < 0:
            problems.append(f"{provider.name}: implausible idle time {seconds!r}")
            continue
        return IdleProbe(seconds, provider.name, problems)
    if not problems:
        problems.append("no idle provider for this platform")
    return IdleProbe(None, None, problems)


def idle_seconds(providers: Sequence[IdleProvider] | None = None) -> float | None:
    """Seconds since the user last touched keyboard or mouse; None when no provider can tell."""
    return probe_idle(providers).seconds


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
