"""Which door SIGINT and SIGTERM take to stop the tray, per pystray backend (issue 23 item 5).

The decision is checked for every platform here; that the doors work is
checked for real on Linux (GLIB: tests/app/test_tray_dbus.py signals a real
`rltray run` with pystray's AppIndicator backend) and here for PYTHON with
pystray's dummy backend. The MACH door needs a Mac (packaging/README.md lists
the check by hand).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest
from rltray.app.tray import signals
from rltray.app.tray.signals import GLIB, MACH, PYTHON, backend_of, door


def icon_of(module: str) -> object:
    """An object whose class comes from ``module``, as pystray's backends' Icons do."""
    return type("Icon", (), {"__module__": module})()


@pytest.fixture
def python_handlers() -> Iterator[None]:
    before = {signum: signal.getsignal(signum) for signum in signals.SIGNALS}
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


def test_macos_routes_both_signals_through_the_run_loop_when_machsignals_is_there() -> None:
    assert door("pystray._darwin", "darwin", mach_signals=True) == MACH
    assert door("pystray._darwin", "darwin", mach_signals=False) == PYTHON


def test_gtk_backends_reclaim_ctrl_c_and_the_rest_keep_pythons_handlers() -> None:
    for backend in ("pystray._appindicator", "pystray._gtk"):
        assert door(backend, "linux", mach_signals=False) == GLIB
    assert door("pystray._xorg", "linux", mach_signals=False) == PYTHON
    assert door("pystray._win32", "win32", mach_signals=False) == PYTHON
    assert door("pystray._dummy", "darwin", mach_signals=True) == PYTHON
    assert door("pystray._darwin", "linux", mach_signals=True) == PYTHON  # never on Linux


def test_the_backend_is_found_behind_rltrays_own_icon_class() -> None:
    darwin = type(icon_of("pystray._darwin"))
    ours = type("MenuBarIcon", (darwin,), {"__module__": "rltray.app.tray.menubar"})
    assert backend_of(ours()) == "pystray._darwin"
    assert backend_of(icon_of("pystray._appindicator")) == "pystray._appindicator"


def test_route_sends_both_signals_to_the_handler_on_the_main_thread(python_handlers) -> None:
    stopped = threading.Event()
    claimed = signals.route(icon_of("pystray._dummy"), lambda *_: stopped.set(), "linux")
    assert claimed.is_set()
    for signum in signals.SIGNALS:
        stopped.clear()
        signal.raise_signal(signum)
        assert stopped.is_set()
