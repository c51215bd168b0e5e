"""`python -m rltray.web.window URL`: the settings window, in its own process.

pywebview must own its process's main thread (Cocoa on macOS, GTK or Qt on
Linux), and so must the tray; a child process per window keeps the two GUI
loops apart on every OS. Without a usable webview backend (no GTK WebKit or
Qt WebEngine installed) the URL opens in the default browser instead, and
this says so once, naming what is missing.
"""

from __future__ import annotations

import os
import sys
import webbrowser
from collections.abc import Callable
from typing import Any

TITLE = "rltray"
SIZE = (1000, 720)
MIN_SIZE = (800, 600)


def fallback(url: str, why: str) -> int:
    print(
        f"rltray: no webview backend ({why}); opened the settings in your default browser.",
        file=sys.stderr,
    )
    return 0 if webbrowser.open(url) else 1


def show(url: str, driver: Callable[[Any], None] | None = None) -> None:
    """Show ``url`` until the window is closed; ``driver(window)`` runs in a thread (tests)."""
    import webview

    window = webview.create_window(TITLE, url, width=SIZE[0], height=SIZE[1], min_size=MIN_SIZE)
    if driver is None:
        webview.start()
    else:
        webview.start(driver, window)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].startswith("http://127.0.0.1:"):
        usage = "usage: python -m rltray.web.window http://127.0.0.1:PORT/launch/TOKEN"
        print(usage, file=sys.stderr)
        return 2
    url = args[0]
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return fallback(url, "no graphical display: DISPLAY and WAYLAND_DISPLAY are unset")
    try:
        import webview  # noqa: F401
    except ImportError:
        return fallback(url, "the pywebview package is not installed: pip install pywebview")
    try:
        show(url)
    except Exception as exc:  # pywebview raises its own WebViewException without a GUI toolkit
        return fallback(url, f"{type(exc).__name__}: {exc}".strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
