"""`rltray settings|setup`: open the settings window or the setup wizard.

With a running rltray the window is asked of it (its web app, its store), so
there is one server per data folder. Without one, this process serves the web
app itself until the window is closed or Ctrl+C. ``--print-url`` prints the
one-time launch URL instead of opening a window, for a browser of the user's
choice and for scripts.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rltray.app.errors import ExitCode

if TYPE_CHECKING:
    from rltray.app.cli.context import Context


def _run(ctx: Context, args: argparse.Namespace, page: str) -> int:
    from rltray.app.api.client import ApiClient
    from rltray.app.paths import Paths

    client = ApiClient.find(Paths.from_env(ctx.env))
    if client is not None:
        answer = client.call(
            "POST", "/api/settings-window", {"page": page, "open": not args.print_url}
        )
        if args.print_url:
            ctx.stdout.write(answer["url"] + "\n")
        else:
            ctx.say("Opened the settings window of the running rltray.")
        return ExitCode.OK
    return _serve_here(ctx, args, page)


def _serve_here(ctx: Context, args: argparse.Namespace, page: str) -> int:
    """No rltray runs: serve the web app from this process while it is needed."""
    from rltray.app.runtime import Runtime
    from rltray.web.server import SettingsWeb, open_window

    service = ctx.service()
    runtime = Runtime(service, SettingsWeb())  # not started: it only serves the settings app
    url = runtime.settings_url(page)
    try:
        if args.print_url:
            ctx.warn("rltray is not running, so this command serves the settings; Ctrl+C stops it.")
            ctx.stdout.write(url + "\n")
            ctx.stdout.flush()
            while True:
                time.sleep(3600)
        window = open_window(url, str(service.paths.launch_pages))
        ctx.say("Settings window open; close it (or press Ctrl+C) to stop serving it.")
        window.wait()
    except KeyboardInterrupt:
        ctx.say("Stopped serving the settings.")
        return 130
    finally:
        runtime.close()
    return ExitCode.OK


def cmd_settings(ctx: Context, args: argparse.Namespace) -> int:
    return _run(ctx, args, "")


def cmd_setup(ctx: Context, args: argparse.Namespace) -> int:
    return _run(ctx, args, "setup")


def add_commands(add: Callable[..., Any]) -> None:
    """Register this module's commands with the CLI parser (see cli.COMMAND_MODULES)."""
    for name, func, what in (
        ("settings", cmd_settings, "open the settings window (dashboard, ratings, adapters)"),
        ("setup", cmd_setup, "open the setup wizard (agents, model, backend, schedule)"),
    ):
        p = add(name, func, what)
        p.add_argument(
            "--print-url",
            action="store_true",
            help="print the one-time launch URL instead of opening a window",
        )
