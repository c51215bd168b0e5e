"""How a headless rltray's main thread waits, so macOS can deliver notification buttons.

Why: desktop-notifier's macOS backend hands button presses and replies to
Python through a CFRunLoop on the main thread ("On macOS, a CFRunLoop *in the
main thread* is required"). The tray has one (``NSApplication.run()``);
`rltray serve` waited in ``threading.Event.wait``, so its Good/Bad buttons did
nothing at all (issue 23 item 7). Here the main thread runs the main run loop
in slices of the same length instead, through pyobjc's CoreFoundation (which
pystray pulls in on macOS), and checks its stop event between slices: Python
runs signal handlers after each slice, so Ctrl+C and SIGTERM act as fast as before.
Without CoreFoundation it waits as on other systems and `serve` says at start
that buttons will not work there, and what to use instead.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable

PLAIN, RUN_LOOP = "plain", "run-loop"
NO_BUTTONS = (
    "On macOS `rltray serve` cannot run the main run loop that notification buttons need "
    "(pyobjc's CoreFoundation is not installed), so Good/Bad in its notifications do "
    "nothing; use `rltray run` (the menu-bar app), or rate with `rltray good`/`rltray bad`."
)

Wait = Callable[[float], bool]
"""``wait(seconds)``: block up to ``seconds``; True once the stop event is set."""


def choose(platform: str, core_foundation: bool) -> tuple[str, str | None]:
    """How the main thread waits, and the sentence `serve` must say at start (None: none)."""
    if platform != "darwin":
        return PLAIN, None
    if core_foundation:
        return RUN_LOOP, None
    return PLAIN, NO_BUTTONS


def main_thread_wait(
    stop: threading.Event, platform: str = sys.platform
) -> tuple[Wait, str | None]:
    """The wait for a headless main thread on ``platform``, and what to say about it."""
    how, problem = choose(platform, platform == "darwin" and _has_core_foundation())
    if how == RUN_LOOP:
        return _run_loop_wait(stop), problem
    return stop.wait, problem


def _has_core_foundation() -> bool:
    try:
        return importlib.util.find_spec("CoreFoundation") is not None
    except (ImportError, ValueError):
        return False


def _run_loop_wait(stop: threading.Event) -> Wait:
    from CoreFoundation import (  # pyobjc; releases the GIL while the loop runs
        CFRunLoopRunInMode,
        kCFRunLoopDefaultMode,
        kCFRunLoopRunFinished,
    )

    def wait(seconds: float) -> bool:
        if CFRunLoopRunInMode(kCFRunLoopDefaultMode, seconds, False) == kCFRunLoopRunFinished:
            return stop.wait(seconds)  # nothing to run yet: never spin
        return stop.is_set()

    return wait
