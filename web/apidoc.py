"""The settings web app's part of the OpenAPI document (``app/openapi.py``).

The document is served by the local API (``/api/openapi.json``), which has no
web app of its own: this builds one over the same service with the real
factory, so the routes described are the ones ``create_app`` registers (the
wizard's included, whatever methods they take), and says how a browser
session authenticates: the session cookie, plus the CSRF header on every
state-changing request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltray.app.openapi import Surface
from rltray.web.security import COOKIE, CSRF_HEADER

if TYPE_CHECKING:
    from rltray.app.runtime import Runtime

TAG = "settings web app"
ABOUT = (
    "The JSON routes of the settings window's own server (another port of 127.0.0.1). "
    "A window signs in through a one-time launch URL (`rltray settings --print-url`), "
    "which sets the session cookie; its pages carry the CSRF token."
)


def web_surface(runtime: Runtime) -> Surface:
    from rltray.web.app import create_app

    return Surface(
        create_app(runtime),
        tag=TAG,
        about=ABOUT,
        schemes={
            "session": {"type": "apiKey", "in": "cookie", "name": COOKIE},
            "csrf": {"type": "apiKey", "in": "header", "name": CSRF_HEADER},
        },
        reads=("session",),
        writes=("session", "csrf"),
    )
