"""The one JSON error shape of every route: ``{"error": {"code", "message"}}``.

Its own module so the pages' views (settings) and the app's error handlers
share it without the views importing the app that registers them.
"""

from __future__ import annotations

from typing import Any


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
