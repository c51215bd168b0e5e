"""rltray's one HTTP server (settings pages and the local API) and the window process.

One ``WebServer`` per Runtime (kept on it, stopped with it); the running rltray
names its port in ``endpoint.json`` and gives its guard the API's bearer token
(``web/api.py``). It binds
127.0.0.1 only, on a port the OS picks (``app/api/serve.py``: capped
connections, idle timeout, body cap), tells its ``Guard`` that port (so a
request naming another Host is refused), and hands out one-time launch URLs.
The window is its own process (``python -m rltray.web.window``): pywebview and
the tray each need a main thread of their own (DESKTOP-STACK.md §2.5). The
launch URL reaches it on stdin, never on its command line: every local user
can read any process's argv in ``/proc/PID/cmdline``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from rltray.web.security import Guard

if TYPE_CHECKING:
    from rltray.app.runtime import Runtime


class WebServer:
    """Serves ``create_app(runtime)`` on a daemon thread until ``stop()``."""

    def __init__(
        self, runtime: Runtime, options: dict[str, Any] | None = None,
        api_token: str | None = None,
    ) -> None:
        from rltray.app.api.serve import LocalServer
        from rltray.web.app import create_app

        self.guard = Guard(api_token=api_token)
        self.app = create_app(runtime, guard=self.guard, options=options)
        self._server = LocalServer(
            self.app, "rltray-web", max_body=int(self.app.config["MAX_CONTENT_LENGTH"])
        )
        self.port = self._server.port
        self.guard.port = self.port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        return self._server.address

    def start(self) -> WebServer:
        self._server.start()
        return self

    def launch_url(self, page: str = "") -> str:
        """A one-time URL that signs a window in and opens ``page`` ("" dashboard, "setup")."""
        return f"{self.base_url}/launch/{self.guard.launch_token(page)}"

    def stop(self) -> None:
        self._server.stop()


def window_command() -> list[str]:
    """The window process's command line: no URL on it (the URL goes to its stdin)."""
    from rltray.app import childpython

    if getattr(sys, "frozen", False):  # a bundled app runs its own executable
        return [sys.executable, "window"]
    # never a rltray/ from the current folder (review 3, finding 2)
    return childpython.own_module("rltray.web.window")


def open_window(url: str, redirect_dir: str | None = None) -> subprocess.Popen[bytes]:
    """Start the window process for ``url``; returns at once.

    ``redirect_dir`` (the data folder's private ``run/``) is where a browser fallback
    writes its 0600 redirect file; without it the window picks a private temp folder.
    """
    import json

    # A session of its own (POSIX): Ctrl+C in rltray's terminal goes to the whole
    # foreground process group, and a window caught starting, or in PyGObject's own
    # SIGINT fallback, printed a KeyboardInterrupt traceback after rltray's clean stop
    # (issue 22). rltray closes its windows itself (Runtime.close), and a window whose
    # parent is gone closes too (window.close_with_parent).
    from rltray.app import childpython

    proc = subprocess.Popen(
        window_command(), stdin=subprocess.PIPE, start_new_session=os.name == "posix",
        cwd=childpython.folder(),
    )  # fmt: skip
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps({"url": url, "redirect_dir": redirect_dir}).encode() + b"\n")
        proc.stdin.close()
    except OSError:  # the window died at once; its exit code tells the caller
        pass
    return proc


class SettingsWeb:
    """What a runtime is given to serve the settings app and open its windows (``compose``).

    The runtime sits below the faces (the house, ARCHITECTURE.md) and never
    imports ``web/``; the faces that build one (the tray, the headless
    service, `rltray settings`, the self-test) hand it this.
    """

    def serve(self, runtime: Runtime, api_token: str | None) -> WebServer:
        return WebServer(runtime, api_token=api_token).start()

    def open_window(self, url: str, redirect_dir: str) -> subprocess.Popen[bytes]:
        return open_window(url, redirect_dir)

