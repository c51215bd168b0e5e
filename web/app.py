"""The settings web app's factory: one Flask app over one Runtime, one blueprint per screen.

Why it looks like this (flaskr, Datasette): ``create_app`` builds everything
from its arguments, so tests make as many apps as they like over real data
folders; screens are blueprints (wizard, dashboard, ratings, lessons, adapters,
settings) that reach the service through ``state()``; every refusal and error
leaves through one place: a JSON body ``{"error": {"code", "message"}}``
(``web/errors.error_body``) under ``/api/``, the same sentence in a page elsewhere,
never a stack trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.web.errors import error_body
from rltray.web.security import (
    COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    FOREIGN_FETCH_SITES,
    Guard,
    Refused,
)
from rltray.web.state import KEY, WebState

if TYPE_CHECKING:
    from flask import Flask, Response
    from rltray.app.runtime import Runtime
    from rltray.app.secrets import Secrets

HERE = Path(__file__).resolve().parent
NAV = (
    ("dashboard.page", "Dashboard"),
    ("ratings.page", "Ratings"),
    ("lessons.page", "Lessons"),
    ("adapters.page", "Adapters"),
    ("settings.page", "Settings"),
    ("wizard.page", "Setup"),
)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; "
    "base-uri 'none'"
)


def create_app(
    runtime: Runtime,
    *,
    guard: Guard | None = None,
    secrets: Secrets | None = None,
    options: dict[str, Any] | None = None,
) -> Flask:
    """The app over ``runtime``; ``guard`` holds its tokens (a fresh one when not given)."""
    from flask import Flask
    from rltray.app.secrets import Secrets
    from rltray.web import (
        adapters,
        api,
        dashboard,
        lessons,
        ratings,
        remote_setup,
        settings,
        wizard,
    )
    from rltray.web.jobs import Jobs

    app = Flask(
        "rltray.web",
        root_path=str(HERE),
        template_folder="templates",
        static_folder="static",
        instance_path=str(HERE / "instance"),  # given: Flask cannot find it in a namespace package
    )
    app.config.update(
        MAX_CONTENT_LENGTH=4 * 1024 * 1024,
        SEND_FILE_MAX_AGE_DEFAULT=0,
        JSON_SORT_KEYS=False,
    )
    app.extensions[KEY] = WebState(
        runtime=runtime,
        guard=guard or Guard(),
        secrets=secrets or Secrets(),
        jobs=Jobs(),
        options=dict(options or {}),
    )
    _install_guard(app)
    _install_errors(app)
    _install_templates(app)
    for module in (api, dashboard, ratings, lessons, adapters, settings, wizard, remote_setup):
        app.register_blueprint(module.bp)
    _warm(app)
    return app


def _warm(app: Flask) -> None:
    """Compile the templates and import the settings declaration now, not on the first request.

    The window's first paint is one request; paying ~0.2 s of imports and template
    compilation while the server starts keeps that request fast (bench/dashboard_paint.py).
    """
    from rltray.app import config  # noqa: F401  (pydantic models: the slowest import)

    for name in app.jinja_env.list_templates():
        if name.endswith(".html"):
            app.jinja_env.get_template(name)


def _install_guard(app: Flask) -> None:
    from flask import g, make_response, redirect, request

    @app.before_request
    def guard_request() -> Any:
        guard = app.extensions[KEY].guard
        guard.check_host(request.host)
        guard.check_origin(request.headers.get("Origin"), request.host)
        if request.endpoint == "launch":
            # the token is the credential here, and a redirect file (file://) is cross-site
            return None
        authorization = request.headers.get("Authorization")
        if authorization is not None:  # the CLI or a script: the token, no browser session
            guard.check_bearer(authorization)
            g.rltray_session = None
            return None
        guard.check_fetch_site(request.headers.get("Sec-Fetch-Site"))
        if request.endpoint == "static":
            # the package's own stylesheet and scripts, public anyway; the signed-out and
            # refusal pages need them too
            return None
        session = guard.session(request.cookies.get(COOKIE))
        form_token = request.form.get(CSRF_FIELD) if request.mimetype in _FORMS else None
        guard.check_csrf(request.method, session, request.headers.get(CSRF_HEADER) or form_token)
        g.rltray_session = session
        return None

    @app.get("/launch/<token>", endpoint="launch")
    def launch(token: str) -> Any:
        """Spend the token, sign this window in with a session of its own, go on to its page.

        A browser that arrives from a redirect file (``file://``) marks the navigation
        cross-site; a 303 would keep it so, the next page would be refused and the Strict
        cookie not sent. Such a browser gets a page that refreshes itself to the target
        instead: that navigation starts from our own origin.
        """
        state: WebState = app.extensions[KEY]
        page = state.guard.spend(token)
        if page is None:
            raise Refused(
                401,
                "launch_token",
                "This launch link was already used or has expired; open the settings again "
                "from the tray menu or with `rltray settings`.",
            )
        if request.headers.get("Sec-Fetch-Site", "").lower() in FOREIGN_FETCH_SITES:
            response = make_response(LAUNCH_PAGE.format(page=page))
        else:
            response = make_response(redirect(page, code=303))
        response.headers["Referrer-Policy"] = "no-referrer"  # the spent token is in this URL
        response.set_cookie(COOKIE, state.guard.open_session(), **state.guard.cookie_options())
        return response

    @app.post("/signout", endpoint="signout")
    def signout() -> Any:
        state: WebState = app.extensions[KEY]
        from flask import render_template

        state.guard.close_session(request.cookies.get(COOKIE))
        g.rltray_session = None  # the page below has no session: no Sign out button
        response = make_response(render_template("signed_out.html"))
        response.delete_cookie(COOKIE, path="/")
        return response

    @app.after_request
    def headers(response: Response) -> Response:
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        # same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on our
        # own form posts, which the Origin check must refuse
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("Cache-Control", "no-store")
        return response


# The page ``launch`` answers with: ``page`` is one of security.PAGES, never user input.
LAUNCH_PAGE = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">'
    '<meta http-equiv="refresh" content="0;url={page}"><title>rltray</title>'
    '<link rel="icon" type="image/svg+xml" href="/static/rltray.svg"></head>'
    '<body><p>Opening rltray… <a href="{page}">Continue</a></p></body></html>'
)


_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def wants_json() -> bool:
    from flask import request

    return request.path.startswith("/api/")


def fail(status: int, code: str, message: str) -> Any:
    """The one error answer: JSON under /api/, otherwise a page with the same sentence."""
    from flask import jsonify, render_template

    if wants_json():
        response = jsonify(error_body(code, message))
    else:
        from flask import make_response

        response = make_response(
            render_template("error.html", status=status, code=code, message=message)
        )
    response.status_code = status
    return response


def _install_errors(app: Flask) -> None:
    from rltray.app.api.input import JSONObjectRequest
    from rltray.app.errors import UserError
    from rltray.app.store import StoreError
    from werkzeug.exceptions import HTTPException

    # views with a model read their body through httpinput.takes; the others (the wizard's)
    # call request.get_json, which now refuses a body that is not a JSON object (one sentence)
    # where Flask's let a deep one through as a RecursionError and a list reach `.get`
    app.request_class = JSONObjectRequest

    @app.errorhandler(Refused)
    def refused(exc: Refused) -> Any:
        return fail(exc.status, exc.code, exc.message)

    @app.errorhandler(UserError)
    def user_error(exc: UserError) -> Any:
        return fail(400, type(exc).__name__, str(exc))

    @app.errorhandler(StoreError)
    def store_error(exc: StoreError) -> Any:
        return fail(400, "StoreError", str(exc))

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Any:
        from flask import request

        code = (exc.name or "error").lower().replace(" ", "_")
        messages = {
            404: f"There is no page {request.path}.",
            405: f"{request.method} is not allowed on {request.path}.",
            413: f"The request body is larger than this route takes "
            f"({(request.max_content_length or 0) // 1024} KiB).",
        }
        return fail(exc.code or 500, code, messages.get(exc.code or 0, exc.description or code))

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Any:
        app.logger.exception("unexpected error")
        return fail(500, "internal", f"Something went wrong ({type(exc).__name__}: {exc}).")


def _install_templates(app: Flask) -> None:
    from rltray.app import words
    from rltray.web import render

    @app.context_processor
    def globals_() -> dict[str, Any]:
        from flask import g

        session = g.get("rltray_session")
        return {"csrf_token": session.csrf if session is not None else "", "nav": NAV}

    app.jinja_env.filters["markdown"] = render.markdown
    app.jinja_env.filters["commands"] = render.commands
    app.jinja_env.filters["localtime"] = render.local_time
    app.jinja_env.filters["version"] = render.version
    app.jinja_env.filters["number"] = render.number
    app.jinja_env.filters["preview"] = words.preview
