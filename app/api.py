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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rltray.app.errors import UserError

if TYPE_CHECKING:
    from flask import Flask
    from rltray.app.apischema import SettingsWindowBody
    from rltray.app.httpinput import Body
    from rltray.app.runtime import Runtime

ALLOWED_HOSTS = ("127.0.0.1", "localhost")
API_VERSION = "1"  # the OpenAPI document's info.version: raise it when a route changes meaning


def error_body(code: str, message: str) -> dict[str, Any]:
    """The one JSON error shape of every rltray HTTP surface."""
    return {"error": {"code": code, "message": message}}


MAX_BODY = 64 * 1024  # the largest real body is a rating with a 2,000-character comment


@dataclass(frozen=True)
class Route:
    """One API route: ``handler`` gets the validated ``body`` (None for a GET)."""

    method: str
    path: str
    summary: str
    handler: Callable[[Any], Any]
    body: type[Body] | None = None


def routes(runtime: Runtime, openapi: Callable[[], dict[str, Any]]) -> list[Route]:
    """The API's route table: what the app serves and what its OpenAPI document lists."""
    from rltray.app.apischema import RateBody, RollbackBody, SettingsWindowBody, SnoozeBody
    from rltray.app.httpinput import NoBody

    service = runtime.service
    return [
        Route("GET", "/api/status", "Ratings, training and schedule.", lambda _: runtime.status()),
        Route("GET", "/api/versions", "Every adapter version.", lambda _: service.versions()),
        Route("GET", "/api/runs", "The training runs.", lambda _: service.runs()),
        Route("GET", "/api/health", "Delivery problems and snooze.", lambda _: runtime.health()),
        Route("GET", "/api/openapi.json", "This document.", lambda _: openapi()),
        Route(
            "POST", "/api/train", "Start a training round now.",
            lambda _: runtime.train_now(wait=False), NoBody,
        ),
        Route(
            "POST", "/api/pause", "Pause automatic training.",
            lambda _: service.set_automatic(False), NoBody,
        ),
        Route(
            "POST", "/api/resume", "Resume automatic training.",
            lambda _: service.set_automatic(True), NoBody,
        ),
        Route(
            "POST", "/api/ingest", "Store what the hooks captured now.",
            lambda _: service.ingest_now(), NoBody,
        ),
        Route(
            "POST", "/api/rollback", RollbackBody.__doc__ or "",
            lambda b: service.rollback(b.version), RollbackBody,
        ),
        Route(
            "POST", "/api/rate", RateBody.__doc__ or "",
            lambda b: service.rate_by_id(b.turn, b.value, b.comment), RateBody,
        ),
        Route(
            "POST", "/api/snooze", SnoozeBody.__doc__ or "",
            lambda b: runtime.snooze(b.until), SnoozeBody,
        ),
        Route(
            "POST", "/api/settings-window", SettingsWindowBody.__doc__ or "",
            lambda b: settings_window(runtime, b), SettingsWindowBody,
        ),
    ]  # fmt: skip


def create_api(runtime: Runtime, token: str) -> Flask:
    """The API app over one runtime; ``token`` is the bearer every request must carry."""
    from flask import Flask, jsonify, request
    from rltray.app.httpinput import takes
    from werkzeug.exceptions import HTTPException

    app = Flask("rltray.api")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    expected = f"Bearer {token}".encode()
    documents: dict[str, dict[str, Any]] = {}  # the OpenAPI document, built on first request

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

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Any:
        status = exc.code or 400
        messages = {
            404: f"No API route {request.path}.",
            405: f"{request.method} is not allowed on {request.path}.",
            413: f"The request body is larger than the API takes ({MAX_BODY // 1024} KiB).",
        }
        codes = {404: "not_found", 405: "method_not_allowed"}
        code = codes.get(status, (exc.name or "error").lower().replace(" ", "_"))
        return fail(status, code, messages.get(status, exc.description or code))

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Any:
        return fail(500, "internal", f"{type(exc).__name__}: {exc}")

    def openapi() -> dict[str, Any]:
        if "api" not in documents:
            documents["api"] = openapi_document(runtime, app)
        return {**documents["api"], "servers": [{"url": request.host_url.rstrip("/")}]}

    for route in routes(runtime, openapi):

        def view(body: Any = None, handler: Callable[[Any], Any] = route.handler) -> Any:
            return jsonify(handler(body))

        view.__doc__ = route.summary
        app.add_url_rule(
            route.path,
            endpoint=route.path,
            view_func=takes(body=route.body)(view),
            methods=[route.method],
        )
    return app


def openapi_document(runtime: Runtime, api: Flask) -> dict[str, Any]:
    """The OpenAPI document of this API and of the settings web app's JSON routes.

    The web app's part is read from a web app built over the same service (its
    url_map and models), so it follows the web app's routes wherever they change.
    """
    from rltray.app.openapi import Surface, document
    from rltray.web.apidoc import web_surface

    api_surface = Surface(
        api,
        tag="api",
        about="The local API of the running service (the CLI uses it); port and pid are in "
        "endpoint.json in the data folder, the bearer token in the OS keyring.",
        schemes={"bearer": {"type": "http", "scheme": "bearer"}},
        reads=("bearer",),
        writes=("bearer",),
    )
    return document([api_surface, web_surface(runtime)], "rltray local API", API_VERSION)


def settings_window(runtime: Runtime, body: SettingsWindowBody) -> dict[str, str]:
    """A one-time settings launch URL (`rltray settings --print-url`), or open the window."""
    url = runtime.open_settings(body.page) if body.open else runtime.settings_url(body.page)
    return {"url": url}


class ApiServer:
    """Serves the API (``app/httpserve.py``); writes and removes ``endpoint.json``."""

    def __init__(self, runtime: Runtime, token: str, token_in_file: bool) -> None:
        from rltray.app.httpserve import LocalServer

        self.service = runtime.service
        app = create_api(runtime, token)
        self._server = LocalServer(app, "rltray-api", max_body=_max_body(app))
        self.port = self._server.port
        self._token = token if token_in_file else None
        self.token_in_file = token_in_file

    def start(self) -> None:
        from rltray.app.fileio import write_private_atomic

        self._server.start()
        endpoint = {"port": self.port, "pid": os.getpid()}
        if self._token is not None:
            endpoint["token"] = self._token
        write_private_atomic(self.service.paths.endpoint, json.dumps(endpoint).encode(), 0o600)

    def stop(self) -> None:
        self._server.stop()
        try:
            data = json.loads(self.service.paths.endpoint.read_text())
            if data.get("pid") == os.getpid():
                self.service.paths.endpoint.unlink()
        except (OSError, ValueError):
            pass


def _max_body(app: Flask) -> int:
    """The body cap the app declares (Flask's MAX_CONTENT_LENGTH), else the server's default."""
    from rltray.app.httpserve import DEFAULT_MAX_BODY

    return int(app.config.get("MAX_CONTENT_LENGTH") or DEFAULT_MAX_BODY)
