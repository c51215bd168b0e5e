"""One way to serve a WSGI app on 127.0.0.1: the local API and the settings web app both use it.

Why waitress and not werkzeug's development server: werkzeug's ``threaded=True``
gives every connection a thread and keeps it for as long as the peer likes, so
another local user holding ~1,000 idle connections used up the service's file
descriptors and its background jobs failed with "Too many open files" (issue
18). waitress serves from a fixed pool of threads, stops accepting past
``CONNECTION_LIMIT`` open connections (the rest wait in the kernel's backlog,
costing the service no descriptor), closes a connection idle for
``IDLE_TIMEOUT_S`` (half-open or half-sent requests included), and refuses a
body over ``max_body`` before reading it.

Every request also passes ``_own_user_only``: a client must connect from the
server's own address, and where the kernel says which user owns the client's
socket (``localpeer``, Linux), a request from another user, or from a socket
whose owner cannot be found, is refused whatever token or cookie it carries.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from rltray.app.api.localpeer import foreign_peer

THREADS = 8  # requests served at once; a slow one (a backend probe) leaves seven
CONNECTION_LIMIT = 64  # open connections at once, idle ones included
IDLE_TIMEOUT_S = 30  # a connection with no complete request for this long is closed
CLEANUP_EVERY_S = 5
DEFAULT_MAX_BODY = 4 * 1024 * 1024
HOST = "127.0.0.1"  # the only address served; a client must connect from it too (localpeer)

log = logging.getLogger(__name__)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _own_user_only(app: WSGIApp, address: Callable[[], tuple[str, int]]) -> WSGIApp:
    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        why = foreign_peer(environ.get("REMOTE_ADDR"), environ.get("REMOTE_PORT"), address())
        if why is None:
            return app(environ, start_response)
        log.info("refused a request: %s", why)
        message = "This rltray belongs to another user of this machine; it serves only its owner."
        body = json.dumps({"error": {"code": "forbidden_user", "message": message}}).encode()
        start_response(
            "403 Forbidden",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]

    return guarded


class LocalServer:
    """``app`` served on 127.0.0.1 on a port the OS picks, from a daemon thread, until ``stop``."""

    def __init__(
        self,
        app: WSGIApp,
        name: str,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        idle_timeout_s: int = IDLE_TIMEOUT_S,
        connection_limit: int = CONNECTION_LIMIT,
    ) -> None:
        from waitress.server import create_server

        logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth" chatter
        self._server: Any = create_server(
            _own_user_only(app, lambda: self.address),
            host=HOST,
            port=0,
            threads=THREADS,
            connection_limit=connection_limit,
            channel_timeout=idle_timeout_s,
            cleanup_interval=min(CLEANUP_EVERY_S, idle_timeout_s),
            max_request_body_size=max_body,
            ident="rltray",
            expose_tracebacks=False,
            clear_untrusted_proxy_headers=True,
        )
        self.port = int(self._server.effective_port)
        self._thread = threading.Thread(target=self._server.run, name=name, daemon=True)
        self._started = False
        self._closed = False

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    def start(self) -> LocalServer:
        if not self._started and not self._closed:
            self._thread.start()
            self._started = True
        return self

    def stop(self) -> None:
        """Close every connection and the listening socket, then let running requests finish."""
        if self._closed:
            return
        self._closed = True
        if self._started and self._thread.is_alive():
            # the loop thread owns its sockets: close them from inside it, then it returns
            try:
                self._server.trigger.pull_trigger(self._close_all)
            except OSError:  # the loop already closed its trigger (its map emptied): close here
                self._close_all()
            self._thread.join(timeout=5)
        else:
            self._close_all()
        self._server.task_dispatcher.shutdown(timeout=5)

    def _close_all(self) -> None:
        from waitress import wasyncore

        wasyncore.close_all(self._server._map)
