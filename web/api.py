"""The local API: what the CLI and scripts call on the running rltray, as routes of the web app.

One HTTP server (issue 21): the API is a blueprint of the settings web app, on
the same port, behind the same guard (``web/app.py``), which takes either the
bearer token (kept in the OS keyring; only when there is none, in the 0600
``endpoint.json``) or a signed-in window's session cookie with its CSRF token.
The runtime publishes the port and its pid in ``endpoint.json``. Errors have the
one shape of every route: ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flask import Blueprint, jsonify, request
from rltray.web.state import state

if TYPE_CHECKING:
    from rltray.app.api.input import Body
    from rltray.app.api.schema import SettingsWindowBody
    from rltray.app.runtime import Runtime

API_VERSION = "1"  # the OpenAPI document's info.version: raise it when a route changes meaning
TAG = "api"
ABOUT = (
    "What the CLI calls on the running rltray (the bearer token: OS keyring, or "
    "endpoint.json in the data folder where there is no keyring). A signed-in settings "
    "window may call these routes too."
)

bp = Blueprint(TAG, __name__)


@dataclass(frozen=True)
class Route:
    """One API route: ``handler(runtime, body)`` gets the validated body (None for a GET)."""

    method: str
    path: str
    summary: str
    handler: Callable[[Runtime, Any], Any]
    body: type[Body] | None = None


def settings_window(runtime: Runtime, body: SettingsWindowBody) -> dict[str, str]:
    """A one-time settings launch URL (`rltray settings --print-url`), or open the window."""
    url = runtime.open_settings(body.page) if body.open else runtime.settings_url(body.page)
    return {"url": url}


def routes() -> list[Route]:
    """The API's route table: what the blueprint serves and what the document lists."""
    from rltray.app.api.input import NoBody
    from rltray.app.api.schema import RollbackBody, SettingsWindowBody, SnoozeBody
    from rltray.web.adapters import version_rows

    return [
        Route("GET", "/api/status", "Ratings, training and schedule.", lambda rt, _: rt.status()),
        Route("GET", "/api/versions", "Every trained version: lineage, metrics, the verdict.",
              lambda rt, _: version_rows()),
        Route("GET", "/api/runs", "The training runs.", lambda rt, _: rt.service.runs()),
        Route("GET", "/api/health", "Delivery problems and snooze.", lambda rt, _: rt.health()),
        Route("GET", "/api/openapi.json", "This document.", lambda rt, _: openapi()),
        Route("POST", "/api/train", "Start a training round now.",
              lambda rt, _: rt.train_now(wait=False), NoBody),
        Route("POST", "/api/pause", "Pause automatic training.",
              lambda rt, _: rt.service.set_automatic(False), NoBody),
        Route("POST", "/api/resume", "Resume automatic training.",
              lambda rt, _: rt.service.set_automatic(True), NoBody),
        Route("POST", "/api/ingest", "Store what the hooks captured now.",
              lambda rt, _: rt.service.ingest_now(), NoBody),
        Route("POST", "/api/rollback", RollbackBody.__doc__ or "",
              lambda rt, b: rt.service.rollback(b.version), RollbackBody),
        Route("POST", "/api/snooze", SnoozeBody.__doc__ or "",
              lambda rt, b: rt.snooze(b.until), SnoozeBody),
        Route("POST", "/api/settings-window", SettingsWindowBody.__doc__ or "",
              settings_window, SettingsWindowBody),
    ]  # fmt: skip


def _register() -> None:
    """Each route behind ``takes``: its body validated and capped at ``SMALL_BODY`` before
    it is read (the pages' own cap, for the settings forms, is the app's
    ``MAX_CONTENT_LENGTH``)."""
    from rltray.app.api.input import SMALL_BODY, takes

    for route in routes():

        def view(body: Any = None, handler: Callable[..., Any] = route.handler) -> Any:
            return jsonify(handler(state().runtime, body))

        view.__doc__ = route.summary
        bp.add_url_rule(
            route.path,
            endpoint=route.path.removeprefix("/api/").replace(".", "_").replace("-", "_"),
            view_func=takes(body=route.body, max_bytes=SMALL_BODY)(view),
            methods=[route.method],
        )


_register()


def openapi() -> dict[str, Any]:
    """The OpenAPI document of every JSON route of this app, built on first request."""
    from flask import current_app

    documents = current_app.extensions.setdefault("rltray-openapi", {})
    if "doc" not in documents:
        documents["doc"] = openapi_document(current_app)
    return {**documents["doc"], "servers": [{"url": request.host_url.rstrip("/")}]}


def openapi_document(app: Any) -> dict[str, Any]:
    """This app's document: the API's routes and the settings pages' JSON routes, each with
    the credentials it takes (the bearer token, or the session cookie + CSRF token)."""
    from rltray.app.api.openapi import Surface, document
    from rltray.web.apidoc import web_surface

    api_surface = Surface(
        app,
        tag=TAG,
        about=ABOUT,
        schemes={"bearer": {"type": "http", "scheme": "bearer"}},
        reads=("bearer",),
        writes=("bearer",),
        endpoints=lambda name: name.startswith(f"{TAG}."),
        also_reads=("session",),
        also_writes=("session", "csrf"),
    )
    return document([api_surface, web_surface(app)], "rltray local API", API_VERSION)
