"""`rltray run` (the tray, or headless where none can show) and `rltray autostart on|off|status`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rltray.app.errors import ExitCode

if TYPE_CHECKING:
    from rltray.app.cli.context import Context
    from rltray.app.runtime import Runtime


def cmd_run(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.cli import headless
    from rltray.app.tray import display_present, run_tray, why_no_tray

    reason = why_no_tray(ctx.env)
    if reason is not None:
        ctx.say(
            f"No tray icon: {reason}. Running without one; notifications and the "
            "`rltray` commands work as usual.",
            err=True,
        )
        # a desktop without a tray still gets the setup wizard on its first run
        return headless.serve(ctx, open_setup=display_present(ctx.env))
    from rltray.app.runtime import compose
    from rltray.web.server import SettingsWeb

    runtime = compose(ctx.service(ingest=False), SettingsWeb())
    ctx.say(
        f"rltray is running in the tray (data folder {runtime.service.paths.home}). "
        "Quit from its menu, or press Ctrl+C here.",
        err=True,
    )
    try:
        run_tray(runtime, ready=lambda _tray: _first_run(ctx, runtime))
    finally:
        runtime.close()
        ctx.say("rltray stopped.", err=True)
    return ExitCode.OK


def _first_run(ctx: Context, runtime: Runtime) -> None:
    """Open the setup wizard by itself until it was finished once for this data folder."""

    if runtime.service.needs_setup():
        try:
            runtime.open_settings("setup")
        except Exception as exc:  # the tray works without the window; say how to get it
            ctx.warn(f"could not open the setup wizard ({exc}); run `rltray setup`")


def cmd_autostart(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.desktop import autostart

    if args.action == "on":
        state = autostart.enable(ctx.env)
    elif args.action == "off":
        state = autostart.disable(ctx.env)
    else:
        state = autostart.status(ctx.env)
    if args.json:
        ctx.print_json(
            {
                "enabled": state.enabled,
                "where": state.where,
                "command": state.command,
                "problem": state.problem,
            }
        )
    elif state.enabled:
        ctx.say(f"rltray starts at login: {state.where} runs {' '.join(state.command or [])}")
    else:
        ctx.say(f"rltray does not start at login (no entry at {state.where}).")
    if state.problem:
        ctx.warn(state.problem)
        return ExitCode.ERROR
    return ExitCode.OK


def add_commands(add: Callable[..., Any]) -> None:
    """Register this module's commands with the CLI parser (see cli.COMMAND_MODULES)."""
    add("run", cmd_run, "start rltray: the tray icon, or the headless service without a display")
    p = add("autostart", cmd_autostart, "start rltray at login, or stop doing so")
    p.add_argument("action", choices=("on", "off", "status"))
    p.add_argument("--json", action="store_true", help="machine-readable output")
