"""The settings pages' part of the OpenAPI document (``app/api/openapi.py``).

The document is served at ``/api/openapi.json`` (``web/api.py``) and read from the
app's own url_map, so the routes described are the ones ``create_app`` registers
(the wizard's included, whatever methods they take). This part says how a
browser session authenticates: the session cookie, plus the CSRF header on every
state-changing request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltray.app.api.openapi import Surface
from rltray.web.security import COOKIE, CSRF_HEADER

if TYPE_CHECKING:
    from flask import Flask

TAG = "settings web app"
ABOUT = (
    "The JSON routes of the settings window's pages (the same server as the API). "
    "A window signs in through a one-time launch URL (`rltray settings --print-url`), "
    "which sets the session cookie; its pages carry the CSRF token."
)


def web_surface(app: Flask) -> Surface:
    return Surface(
        app,
        tag=TAG,
        about=ABOUT,
        schemes={
            "session": {"type": "apiKey", "in": "cookie", "name": COOKIE},
            "csrf": {"type": "apiKey", "in": "header", "name": CSRF_HEADER},
        },
        reads=("session",),
        writes=("session", "csrf"),
        endpoints=lambda name: not name.startswith("api."),
        also_reads=("bearer",),
        also_writes=("bearer",),
    )
