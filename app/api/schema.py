"""The request bodies of the local API (``web/api.py``), as strict models.

One class per body: ``web/api.py`` validates each request with it through
``httpinput.takes`` and ``app/api/openapi.py`` describes it from the same class,
so the document served at ``/api/openapi.json`` cannot drift from what is
checked. The field types (ids in int64, capped comments, versions) are
``api/input.py``'s, shared with the settings web app.
"""

from __future__ import annotations

from typing import Literal

from rltray.app.api.input import Body, Version


class RollbackBody(Body):
    """Make a version active; no version means the active one's parent, 0 the base model."""

    version: Version | None = None


class SnoozeBody(Body):
    """Stop asking for ratings for an hour or until tomorrow; null asks again now."""

    until: Literal["hour", "tomorrow"] | None = None


class SettingsWindowBody(Body):
    """A one-time settings launch URL ("" the dashboard, "setup" the wizard); ``open`` shows it."""

    page: Literal["", "setup"] = ""
    open: bool = False
