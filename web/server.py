"""The settings web app served on 127.0.0.1 on a free port, and the window process that shows it.

One ``WebServer`` per Service (kept on it, stopped with it). It binds
127.0.0.1 only, on a port the OS picks, tells its ``Guard`` that port (so a
request naming another Host is refused), and hands out one-time launch URLs.
The window is its own process (``python -m rltray.web.window URL``): pywebview
and the tray each need a main thread of their own (DESKTOP-STACK.md §2.5).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

from rltray.web.security import Guard

if TYPE_CHECKING:
    from rltray.app.service import Service
    from werkzeug.serving import BaseWSGIServer


def _quiet_handler() -> type:
    from werkzeug.serving import WSGIRequestHandler

    class Quiet(WSGIRequestHandler):
        """No line per request on the service's stderr (errors still reach the app's log)."""

        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    return Quiet


class WebServer:
    """Serves ``create_app(service)`` on a daemon thread until ``stop()``."""

    def __init__(self, service: Service, options: dict[str, Any] | None = None) -> None:
        from rltray.web.app import create_app
        from werkzeug.serving import make_server

        quiet = _quiet_handler()

        self.guard = Guard()
        self.app = create_app(service, guard=self.guard, options=options)
        self._server: BaseWSGIServer = make_server(
            "127.0.0.1", 0, self.app, threaded=True, request_handler=quiet
        )
        self.port = int(self._server.server_port)
        self.guard.port = self.port
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="rltray-web", daemon=True
        )
        self._started = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> WebServer:
        if not self._started:
            self._thread.start()
            self._started = True
        return self

    def launch_url(self, page: str = "") -> str:
        """A one-time URL that signs a window in and opens ``page`` ("" dashboard, "setup")."""
        return f"{self.base_url}/launch/{self.guard.launch_token(page)}"

    def stop(self) -> None:
        if self._started:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._started = False
        self._server.server_close()


def window_command(url: str) -> list[str]:
    if getattr(sys, "frozen", False):  # a bundled app runs its own executable
        return [sys.executable, "window", url]
    return [sys.executable, "-m", "rltray.web.window", url]


def open_window(url: str) -> subprocess.Popen[bytes]:
    """Start the window process for ``url``; returns at once."""
    return subprocess.Popen(window_command(url), stdin=subprocess.DEVNULL)
