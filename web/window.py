"""`python -m rltray.web.window`: the settings window, in its own process.

pywebview must own its process's main thread (Cocoa on macOS, GTK or Qt on
Linux), and so must the tray; a child process per window keeps the two GUI
loops apart on every OS.

The one-time launch URL arrives on stdin as one JSON line
(``{"url": …, "redirect_dir": …}``), never on the command line: any local user
can read every process's argv (``/proc/PID/cmdline``), and the URL is worth a
signed-in session. Without a usable webview backend (no GTK WebKit or Qt
WebEngine installed) the settings open in the default browser instead, through
a 0600 redirect page in a 0700 folder, so the browser's argv too holds only a
file path (the trick Jupyter's ``use_redirect_file`` uses); this says so once,
naming what is missing.
"""

from __future__ import annotations

import html
import json
import os
import sys
import tempfile
import threading
import time
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import Any

TITLE = "rltray"
SIZE = (1000, 720)
MIN_SIZE = (800, 600)
URL_PREFIX = "http://127.0.0.1:"
REDIRECT_KEEP_S = 600.0  # the token inside expires in 300 s; an older page is only litter
USAGE = (
    'usage: echo \'{"url": "http://127.0.0.1:PORT/launch/TOKEN"}\' | python -m rltray.web.window '
    "(the URL comes on stdin, never on the command line; `rltray settings` does this for you)"
)


def redirect_page(url: str, folder: Path | None) -> Path:
    """A page readable by this user alone that sends the browser on to ``url``."""
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="rltray-launch-"))
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.name == "posix":
        os.chmod(folder, 0o700)
    _prune(folder)
    fd, name = tempfile.mkstemp(prefix="open-", suffix=".html", dir=folder)  # 0600
    quoted = html.escape(url, quote=True)
    page = (
        '<!doctype html><html><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="0;url={quoted}"><title>rltray</title></head>'
        f'<body><p><a href="{quoted}">Open rltray\'s settings</a></p></body></html>'
    )
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(page)
    return Path(name)


def _prune(folder: Path) -> None:
    now = time.time()
    for old in folder.glob("open-*.html"):
        try:
            if now - old.lstat().st_mtime > REDIRECT_KEEP_S:
                old.unlink()
        except OSError:
            pass


def fallback(url: str, why: str, redirect_dir: Path | None = None) -> int:
    page = redirect_page(url, redirect_dir)
    print(
        f"rltray: no webview backend ({why}); opened the settings in your default browser.",
        file=sys.stderr,
    )
    return 0 if webbrowser.open(page.as_uri()) else 1


def linux_backend_missing() -> str | None:
    """Why pywebview has no GUI backend on this Linux (one sentence, what to install), or None.

    Asked before pywebview is: its own probe logs a full traceback for each backend
    it tries (GTK, then Qt), so a desktop whose venv lacked gi printed two
    tracebacks every time the settings opened (issue 22).
    """
    import importlib.util

    try:
        import gi

        gi.require_version("Gtk", "3.0")
        try:
            gi.require_version("WebKit2", "4.1")
        except ValueError:
            gi.require_version("WebKit2", "4.0")
        return None
    except (ImportError, ValueError) as exc:
        if importlib.util.find_spec("qtpy") is not None:
            return None  # pywebview's Qt backend may serve; let it try
        return (
            f"GTK WebKit is not available to this Python: {exc}; on Debian/Ubuntu: sudo apt "
            "install python3-gi gir1.2-webkit2-4.1, then `make run` again"
        )


def show(url: str, driver: Callable[[Any], None] | None = None) -> None:
    """Show ``url`` until the window is closed; ``driver(window)`` runs in a thread (tests)."""
    import webview

    window = webview.create_window(TITLE, url, width=SIZE[0], height=SIZE[1], min_size=MIN_SIZE)
    if driver is None:
        webview.start()
    else:
        webview.start(driver, window)


def read_request(stream: Any) -> tuple[str, Path | None] | None:
    """The URL and redirect folder sent on ``stream``; None when they are missing or malformed."""
    try:
        line = stream.readline(65536)
        data = json.loads(line)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    url, folder = data.get("url"), data.get("redirect_dir")
    if not isinstance(url, str) or not url.startswith(URL_PREFIX):
        return None
    return url, (Path(folder) if isinstance(folder, str) and folder else None)


PARENT_POLL_S = 1.0


def close_with_parent(parent: int, poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """End this process once ``parent`` is no longer its parent (it died or was killed).

    The window runs in a session of its own (``server.open_window``), so the terminal's
    Ctrl+C or hang-up no longer reaches it; a window left open on a dead server is
    worse than none. A polling daemon thread, because the GUI loop owns the main thread.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(0)

    thread = threading.Thread(target=watch, name="rltray-window-parent", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None, stdin: Any = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:  # a URL on the command line is readable by every local user: refuse it
        print(USAGE, file=sys.stderr)
        return 2
    request = read_request(stdin if stdin is not None else sys.stdin)
    if request is None:
        print(USAGE, file=sys.stderr)
        return 2
    url, redirect_dir = request
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        why = "no graphical display: DISPLAY and WAYLAND_DISPLAY are unset"
        return fallback(url, why, redirect_dir)
    try:
        import webview  # noqa: F401
    except ImportError:
        why = "the pywebview package is not installed: pip install pywebview"
        return fallback(url, why, redirect_dir)
    why = linux_backend_missing() if sys.platform.startswith("linux") else None
    if why is not None:
        return fallback(url, why, redirect_dir)
    try:
        show(url)
    except Exception as exc:  # pywebview raises its own WebViewException without a GUI toolkit
        return fallback(url, f"{type(exc).__name__}: {exc}".strip(), redirect_dir)
    return 0


def process_main(argv: list[str] | None = None) -> int:
    """The window process's entry: `python -m rltray.web.window`, the bundle's `window`."""
    if os.name == "posix":
        close_with_parent(os.getppid())
    try:
        return main(argv)
    except KeyboardInterrupt:  # Ctrl+C where it was started by hand: close, no traceback
        return 130


if __name__ == "__main__":
    sys.exit(process_main())
