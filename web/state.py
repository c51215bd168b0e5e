"""What every screen of the web app reaches through: the runtime (and its service), the guard,
the secrets.

Kept in ``app.extensions`` (no module-level state), so two apps over two data
folders can run in one test; ``state()`` is how a view finds its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rltray.app.runtime import Runtime
    from rltray.app.secrets import Secrets
    from rltray.app.service import Service
    from rltray.web.jobs import Jobs
    from rltray.web.machine import Probes
    from rltray.web.security import Guard

KEY = "rltray"


@dataclass
class WebState:
    runtime: Runtime
    guard: Guard
    secrets: Secrets
    jobs: Jobs
    options: dict[str, Any] = field(default_factory=dict)  # tests: ollama host, scan roots
    probes: Probes = field(default_factory=lambda: _probes())  # the trainer backend probe

    @property
    def service(self) -> Service:
        return self.runtime.service


def _probes() -> Probes:
    from rltray.web.machine import Probes

    return Probes()


def state() -> WebState:
    from flask import current_app

    return current_app.extensions[KEY]


def rating_source() -> str:
    """Who a rating from this request comes from: ``api`` for a bearer-token caller (the
    guard already checked the token), ``web`` for a signed-in settings window."""
    from flask import request

    return "api" if request.headers.get("Authorization") is not None else "web"
