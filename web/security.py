"""Who may use the settings web app: launch tokens, the session cookie, Host/Origin and CSRF checks.

Why it looks like this (ARCHITECTURE "Security model"): any local process and
any web page the user visits can send requests to 127.0.0.1, so

- nothing is served without the session cookie, and the only way to get it is
  a one-time launch URL that the tray or `rltray settings` hands to the window
  (the token in it is spent on first use and expires after a few minutes);
- the cookie is HttpOnly (page scripts cannot read it) and SameSite=Strict
  (another site's page cannot make the browser send it);
- a ``Host`` other than 127.0.0.1/localhost on our port is refused (DNS
  rebinding: an attacker's name resolving to 127.0.0.1 still sends its name),
  and so is a foreign ``Origin``;
- every state-changing request carries the CSRF token from the page, in the
  ``X-CSRF-Token`` header or a ``csrf_token`` form field, compared server-side.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

COOKIE = "rltray_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
LAUNCH_TTL_S = 300.0
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
LOCAL_HOSTS = ("127.0.0.1", "localhost")
PAGES = {"": "/", "dashboard": "/", "setup": "/setup", "ratings": "/ratings",
         "adapters": "/adapters", "settings": "/settings"}  # fmt: skip


class Refused(Exception):
    """A request the guard turns away: HTTP status, error code and one sentence."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass
class Guard:
    """The secrets of one running web app; nothing here is written to disk."""

    session: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    port: int | None = None  # the served port; None accepts any (the Flask test client)
    _launch: dict[str, tuple[str, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def launch_token(self, page: str = "") -> str:
        """A new one-time token that opens ``page`` ("" = dashboard, "setup" = wizard)."""
        if page not in PAGES:
            known = ", ".join(repr(p) for p in PAGES)
            raise ValueError(f"Unknown page {page!r}; known: {known}.")
        token = secrets.token_urlsafe(24)
        with self._lock:
            now = time.monotonic()
            self._launch = {t: v for t, v in self._launch.items() if v[1] > now}
            self._launch[token] = (PAGES[page], now + LAUNCH_TTL_S)
        return token

    def spend(self, token: str) -> str | None:
        """The page a launch token opens, once; None for an unknown, used or expired token."""
        with self._lock:
            entry = self._launch.pop(token, None)
        if entry is None or entry[1] < time.monotonic():
            return None
        return entry[0]

    # -- checks ------------------------------------------------------------------

    def check_host(self, host_header: str) -> None:
        host, _, port = (host_header or "").rpartition(":")
        if not host:  # no port given
            host, port = host_header or "", ""
        host = host.strip("[]").lower()
        if host not in LOCAL_HOSTS or (self.port is not None and port != str(self.port)):
            raise Refused(
                403,
                "forbidden_host",
                f"Requests must be addressed to 127.0.0.1:{self.port or 'PORT'}, "
                f"not {host_header!r}.",
            )

    def check_origin(self, origin: str | None, host_header: str) -> None:
        """A browser names the page that sent a request in Origin; only our own is accepted."""
        if origin is None:
            return
        if origin != f"http://{host_header}":
            raise Refused(403, "forbidden_origin", f"Requests from {origin!r} are not accepted.")

    def check_cookie(self, cookie: str | None) -> None:
        if not cookie or not hmac.compare_digest(cookie.encode(), self.session.encode()):
            raise Refused(
                401,
                "unauthorized",
                "Open rltray's settings from the tray menu or with `rltray settings`; "
                "this window's session is not valid.",
            )

    def check_csrf(self, method: str, header: str | None, form_value: str | None) -> None:
        if method in SAFE_METHODS:
            return
        given = header or form_value or ""
        if not hmac.compare_digest(given.encode(), self.csrf.encode()):
            raise Refused(
                403,
                "csrf",
                "This change did not come from rltray's own page (missing or wrong CSRF token); "
                "reload the page and try again.",
            )

    def cookie_options(self) -> dict[str, Any]:
        return {"httponly": True, "samesite": "Strict", "secure": False, "path": "/"}
