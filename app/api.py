"""The running service's local JSON API: how the CLI (and scripts) talk to the tray.

Why it looks like this (ARCHITECTURE "Security model"): other local processes
and any web page can reach 127.0.0.1, so every request needs the bearer token
(kept in the OS keyring; only when there is none, in the 0600 ``endpoint.json``)
and a ``Host`` of 127.0.0.1/localhost (a DNS-rebinding page sends its own
name). The server binds 127.0.0.1 on a free port and publishes port and pid in
``endpoint.json``. Errors have one shape: ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import hmac
import json
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rltray.app.errors import UserError

if TYPE_CHECKING:
    from flask import Flask
    from rltray.app.service import Service
    from werkzeug.serving import BaseWSGIServer

ALLOWED_HOSTS = ("127.0.0.1", "localhost")


def error_body(code: str, message: str) -> dict[str, Any]:
    """The one JSON error shape of every rltray HTTP surface."""
    return {"error": {"code": code, "message": message}}


def create_api(service: Service, token: str) -> Flask:
    """The API app over one service; ``token`` is the bearer every request must carry."""
    from flask import Flask, jsonify, request

    app = Flask("rltray.api")
    expected = f"Bearer {token}".encode()

    def fail(status: int, code: str, message: str) -> Any:
        response = jsonify(error_body(code, message))
        response.status_code = status
        return response

    @app.before_request
    def guard() -> Any:
        host = (request.host or "").rsplit(":", 1)[0].strip("[]")
        if host not in ALLOWED_HOSTS:
            message = f"Requests must be addressed to 127.0.0.1, not {host!r}."
            return fail(403, "forbidden_host", message)
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return fail(401, "unauthorized", "A valid bearer token is required.")
        return None

    @app.errorhandler(UserError)
    def user_error(exc: UserError) -> Any:
        return fail(400, exc.__class__.__name__, str(exc))

    @app.errorhandler(404)
    def not_found(exc: Exception) -> Any:
        return fail(404, "not_found", f"No API route {request.path}.")

    @app.errorhandler(405)
    def not_allowed(exc: Exception) -> Any:
        message = f"{request.method} is not allowed on {request.path}."
        return fail(405, "method_not_allowed", message)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Any:
        return fail(500, "internal", f"{type(exc).__name__}: {exc}")

    def body() -> dict[str, Any]:
        data = request.get_json(silent=True)
        if data is None and request.data:
            raise UserError("The request body is not valid JSON.")
        return data or {}

    routes: dict[str, tuple[str, Callable[[], Any]]] = {
        "/api/status": ("GET", lambda: service.status()),
        "/api/versions": ("GET", lambda: service.versions()),
        "/api/runs": ("GET", lambda: service.runs()),
        "/api/train": ("POST", lambda: service.train_now(wait=False)),
        "/api/pause": ("POST", lambda: service.set_automatic(False)),
        "/api/resume": ("POST", lambda: service.set_automatic(True)),
        "/api/rollback": ("POST", lambda: service.rollback(body().get("version"))),
        "/api/rate": (
            "POST",
            lambda: service.rate_by_id(
                int(body().get("turn", 0)), int(body().get("value", 0)), body().get("comment")
            ),
        ),
        "/api/ingest": ("POST", lambda: service.ingest_now()),
        "/api/health": ("GET", lambda: service.health()),
        "/api/snooze": ("POST", lambda: service.snooze(body().get("until"))),
        "/api/settings-window": ("POST", lambda: settings_window(service, body())),
    }
    for path, (method, handler) in routes.items():
        app.add_url_rule(
            path,
            endpoint=path,
            view_func=lambda handler=handler: jsonify(handler()),
            methods=[method],
        )
    return app


def settings_window(service: Service, body: dict[str, Any]) -> dict[str, str]:
    """A one-time settings launch URL (`rltray settings --print-url`), or open the window."""
    page = str(body.get("page") or "")
    if page not in ("", "setup"):
        raise UserError(f"page is \"\" (the dashboard) or \"setup\", not {page!r}.")
    url = service.open_settings(page) if body.get("open") else service.settings_url(page)
    return {"url": url}


class ApiServer:
    """Serves the API on a daemon thread; writes and removes ``endpoint.json``."""

    def __init__(self, service: Service, token: str, token_in_file: bool) -> None:
        from werkzeug.serving import make_server

        self.service = service
        self._server: BaseWSGIServer = make_server(
            "127.0.0.1", 0, create_api(service, token), threaded=True
        )
        self.port = int(self._server.server_port)
        self._token = token if token_in_file else None
        self.token_in_file = token_in_file
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="rltray-api", daemon=True
        )

    def start(self) -> None:
        from rltray.app.fileio import write_private_atomic

        self._thread.start()
        endpoint = {"port": self.port, "pid": os.getpid()}
        if self._token is not None:
            endpoint["token"] = self._token
        write_private_atomic(self.service.paths.endpoint, json.dumps(endpoint).encode(), 0o600)

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)
        try:
            data = json.loads(self.service.paths.endpoint.read_text())
            if data.get("pid") == os.getpid():
                self.service.paths.endpoint.unlink()
        except (OSError, ValueError):
            pass
