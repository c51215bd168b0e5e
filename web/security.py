"""Who may use the settings web app: launch tokens, sessions, fetch metadata, Host/Origin, CSRF.

Why it looks like this (ARCHITECTURE "Security model", SECURITY.md): any local
process, any other local user and any web page the user visits can send
requests to 127.0.0.1, so

- nothing is served without a session cookie, and the only way to get one is a
  one-time launch URL that the tray or `rltray settings` hands to the window
  through a pipe (never argv: ``/proc/PID/cmdline`` is world-readable). The
  token in it is spent on first use and expires after a few minutes;
- every launch mints its own session with its own CSRF token; a session ends
  after ``SESSION_IDLE_S`` without a request, or when the user signs out, so a
  cookie that leaked once does not open the app for good;
- the cookie is HttpOnly and SameSite=Strict. Cookies are not scoped by port,
  and other ports of 127.0.0.1 are *same-site*, so SameSite alone would still
  send it to a page served on another port; ``check_fetch_site`` refuses every
  request a browser marks ``same-site`` or ``cross-site`` (a page cannot forge
  ``Sec-Fetch-*``), which covers images, no-cors fetches and navigations that
  carry no ``Origin``;
- a ``Host`` other than 127.0.0.1/localhost on our port is refused (DNS
  rebinding), and so is a foreign ``Origin``;
- every state-changing request carries its session's CSRF token, in the
  ``X-CSRF-Token`` header or a ``csrf_token`` form field, compared server-side.
"""

from __future__ import annotations

import hmac
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COOKIE = "rltray_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
LAUNCH_TTL_S = 300.0
SESSION_IDLE_S = 8 * 3600.0  # a working day without a request signs the window out
MAX_SESSIONS = 32  # launches kept at once; the oldest idle one goes first
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
LOCAL_HOSTS = ("127.0.0.1", "localhost")
# What browsers send in Sec-Fetch-Site: "same-origin" (our own pages) and "none" (the user
# typed the URL, the window or a redirect file opened it) are ours; the other two are not.
FOREIGN_FETCH_SITES = ("same-site", "cross-site")
PAGES = {"": "/", "dashboard": "/", "setup": "/setup", "ratings": "/ratings",
         "lessons": "/lessons", "adapters": "/adapters", "settings": "/settings"}  # fmt: skip


class Refused(Exception):
    """A request the guard turns away: HTTP status, error code and one sentence."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass
class Session:
    """One signed-in window: its CSRF token and when it last made a request."""

    csrf: str
    last_seen: float


SIGNED_OUT = Refused(
    401,
    "unauthorized",
    "Open rltray's settings from the tray menu or with `rltray settings`; "
    "this window is not signed in (or its session ended).",
)


@dataclass
class Guard:
    """The secrets of one running web app; nothing here is written to disk.

    ``clock`` is monotonic seconds; tests step it to expire tokens and sessions.
    """

    port: int | None = None  # the served port; None accepts any (the Flask test client)
    api_token: str | None = None  # the bearer token the CLI sends; None: no bearer accepted
    clock: Callable[[], float] = time.monotonic
    _launch: dict[str, tuple[str, float]] = field(default_factory=dict)
    _sessions: dict[str, Session] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- launch tokens and sessions ------------------------------------------------

    def launch_token(self, page: str = "") -> str:
        """A new one-time token that opens ``page`` ("" = dashboard, "setup" = wizard)."""
        if page not in PAGES:
            known = ", ".join(repr(p) for p in PAGES)
            raise ValueError(f"Unknown page {page!r}; known: {known}.")
        token = secrets.token_urlsafe(24)
        with self._lock:
            now = self.clock()
            self._launch = {t: v for t, v in self._launch.items() if v[1] > now}
            self._launch[token] = (PAGES[page], now + LAUNCH_TTL_S)
        return token

    def spend(self, token: str) -> str | None:
        """The page a launch token opens, once; None for an unknown, used or expired token."""
        with self._lock:
            entry = self._launch.pop(token, None)
        if entry is None or entry[1] < self.clock():
            return None
        return entry[0]

    def open_session(self) -> str:
        """A new session id (the cookie's value) with a CSRF token of its own."""
        sid = secrets.token_urlsafe(32)
        with self._lock:
            now = self.clock()
            self._drop_idle(now)
            while len(self._sessions) >= MAX_SESSIONS:
                oldest = min(self._sessions, key=lambda s: self._sessions[s].last_seen)
                del self._sessions[oldest]
            self._sessions[sid] = Session(csrf=secrets.token_urlsafe(32), last_seen=now)
        return sid

    def close_session(self, sid: str | None) -> bool:
        """Sign a window out; True when it was signed in."""
        with self._lock:
            return self._sessions.pop(sid or "", None) is not None

    def session(self, cookie: str | None) -> Session:
        """The live session ``cookie`` names (its idle clock restarts), else ``Refused``."""
        with self._lock:
            now = self.clock()
            self._drop_idle(now)
            found = None
            for sid, session in self._sessions.items():
                # compare every id in constant time: which one matched must not leak by timing
                if cookie and hmac.compare_digest(cookie.encode(), sid.encode()):
                    found = session
            if found is None:
                raise SIGNED_OUT
            found.last_seen = now
            return found

    def csrf_for(self, cookie: str | None) -> str:
        """The CSRF token of ``cookie``'s session ("" when it is not signed in)."""
        with self._lock:
            session = self._sessions.get(cookie or "")
            return session.csrf if session else ""

    def _drop_idle(self, now: float) -> None:
        idle = [s for s, v in self._sessions.items() if now - v.last_seen > SESSION_IDLE_S]
        for sid in idle:
            del self._sessions[sid]

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

    def check_fetch_site(self, fetch_site: str | None) -> None:
        """Refuse what a browser says another site (or another port of 127.0.0.1) started."""
        if (fetch_site or "").strip().lower() in FOREIGN_FETCH_SITES:
            raise Refused(
                403,
                "forbidden_site",
                "Requests started by another web page (another site or another port of "
                "127.0.0.1) are not accepted; open rltray's settings from the tray or with "
                "`rltray settings`.",
            )

    def check_bearer(self, authorization: str) -> None:
        """A request that names a bearer must carry this app's token (compared in constant
        time); it then needs no session: the CLI and scripts are not browsers."""
        expected = f"Bearer {self.api_token}".encode() if self.api_token else b""
        if not expected or not hmac.compare_digest(authorization.encode(), expected):
            raise Refused(401, "unauthorized", "A valid bearer token is required.")

    def check_csrf(self, method: str, session: Session, given: str | None) -> None:
        if method in SAFE_METHODS:
            return
        if not hmac.compare_digest((given or "").encode(), session.csrf.encode()):
            raise Refused(
                403,
                "csrf",
                "This change did not come from rltray's own page (missing or wrong CSRF token); "
                "reload the page and try again.",
            )

    def cookie_options(self) -> dict[str, Any]:
        return {"httponly": True, "samesite": "Strict", "secure": False, "path": "/"}


# Settings that name a program rltray will run. Through the web they may only name what
# rltray itself built (or rltray's own interpreter): a page that got past every other
# check must still not be able to make the service run a program of its choosing. Any
# other value is set where only the user can type it: `rltray config set` or config.toml.
PROGRAM_SETTINGS = ("training.python",)
BUILT_ENVIRONMENTS = ("trainer-env",)  # folders of the data folder that rltray creates


def program_setting_refusal(home: Path, key: str, value: Any) -> str | None:
    """Why the web may not set ``key`` to ``value`` (one sentence), or None when it may."""
    if key not in PROGRAM_SETTINGS or not isinstance(value, str):
        return None
    given = value.strip()
    if not given:
        return None  # back to rltray's own interpreter
    path = Path(given).expanduser()
    if path.is_absolute():
        resolved = path.resolve()
        if resolved == Path(sys.executable).resolve():
            return None
        for folder in BUILT_ENVIRONMENTS:
            env = (home / folder).resolve()
            if resolved.is_relative_to(env):
                return None
    return (
        f"For safety the settings window only picks an interpreter rltray built "
        f"(in {home / BUILT_ENVIRONMENTS[0]}); set {key} to {given[:200]!r} with "
        f"`rltray config set {key} PATH` or in config.toml."
    )
