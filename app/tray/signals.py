"""How Ctrl+C (SIGINT) and SIGTERM reach a running tray: one door per pystray backend.

Why it matters: a signal whose handler never runs ends rltray without
``Runtime.stop()`` (no trainer paused with a checkpoint, its run left
"running", a settings window left on a dead server), or does not end it at all.
Each pystray backend gets in the way differently, so which door a signal takes
is decided by ``door()``, a pure function tests call for every platform:

* ``GLIB`` (pystray's appindicator and gtk backends): they set SIGINT to
  SIG_DFL when their loop starts ("do not inhibit ctrl+c"), so Ctrl+C killed
  rltray outright (exit 130). An idle callback queued before the loop runs on
  its first turn, after that reset, and puts rltray's handler back. SIGTERM
  keeps Python's handler, which PyGObject wakes the GLib loop for.
* ``MACH`` (macOS, ``pystray._darwin``, issue 23 item 5): the main thread sits
  in ``NSApplication.run()``, and Python's handlers run only when it next runs
  Python, so SIGTERM waited for the next menu click; pystray registers its own
  SIGINT handler through ``PyObjCTools.MachSignals``, which calls
  ``NSApp.terminate_`` and so ``exit()``, skipping the stop. MachSignals turns
  a signal into a Mach message that wakes the main run loop, so both signals
  are registered there instead, by a block on the main queue: it runs inside
  ``NSApplication.run()``, after pystray's ``_run`` registered its own.
* ``PYTHON`` (Windows, xorg, dummy, or macOS without pyobjc's MachSignals):
  Python's ``signal.signal``, as installed before the loop starts.
"""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

PYTHON, GLIB, MACH = "python", "glib", "mach"
GTK_BACKENDS = ("pystray._appindicator", "pystray._gtk")
DARWIN_BACKEND = "pystray._darwin"
SIGNALS = (signal.SIGINT, signal.SIGTERM)

Handler = Callable[..., None]


def door(backend: str, platform: str, mach_signals: bool) -> str:
    """Which way SIGINT and SIGTERM reach rltray's handler under pystray ``backend``."""
    if platform == "darwin" and backend == DARWIN_BACKEND and mach_signals:
        return MACH
    if backend in GTK_BACKENDS:
        return GLIB
    return PYTHON


def backend_of(icon: Any) -> str:
    """The pystray backend module behind ``icon`` (rltray may subclass its Icon)."""
    for cls in type(icon).__mro__:
        if cls.__module__.startswith("pystray._"):
            return cls.__module__
    return type(icon).__module__


def route(icon: Any, handler: Handler, platform: str = sys.platform) -> threading.Event:
    """Send SIGINT and SIGTERM to ``handler`` while ``icon`` runs (call before ``icon.run``).

    The event is set once both reach ``handler``: at once for ``PYTHON``, on
    the loop's first turn for ``GLIB`` and ``MACH``.
    """
    claimed = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        claimed.set()  # signal.signal works on the main thread only; tests run trays elsewhere
        return claimed
    for signum in SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, handler)
    backend = backend_of(icon)
    which = door(backend, platform, backend == DARWIN_BACKEND and _has_mach_signals())
    if which == GLIB:
        _after_gtk_reset(handler, claimed)
    elif which == MACH:
        _through_the_run_loop(handler, claimed)
    else:
        claimed.set()
    return claimed


def _has_mach_signals() -> bool:
    try:
        return importlib.util.find_spec("PyObjCTools.MachSignals") is not None
    except (ImportError, ValueError):
        return False


def _after_gtk_reset(handler: Handler, claimed: threading.Event) -> None:
    from gi.repository import GLib

    def claim() -> bool:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGINT, handler)
        claimed.set()
        return False  # once

    GLib.idle_add(claim)


def _through_the_run_loop(handler: Handler, claimed: threading.Event) -> None:
    from Foundation import NSOperationQueue  # pyobjc, a pystray dependency on macOS
    from PyObjCTools import MachSignals

    def claim() -> None:
        for signum in SIGNALS:
            MachSignals.signal(signum, handler)
        claimed.set()

    NSOperationQueue.mainQueue().addOperationWithBlock_(claim)
