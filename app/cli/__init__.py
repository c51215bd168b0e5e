"""The `rltray` command: parses arguments and dispatches, nothing more.

Each command is a small function over the Service; heavy imports stay inside
the functions so `rltray good` starts fast. `main(argv, env)` takes its
environment as parameters so tests run the real CLI in process.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any

from rltray.app.cli.context import Context, plain
from rltray.app.errors import ExitCode, UserError

# Each module here owns a group of commands and registers them with
# `add_commands(add)`; a new group is one line here and one module (under rltray.app.cli).
COMMAND_MODULES = ("training", "tray", "settings", "model", "bundle", "lessons", "remote")
WIDE = 120  # columns from which `turns` shows prompt and answer side by side


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# -- commands ------------------------------------------------------------------


def _said(ctx: Context, verb: str, outcome: Any) -> None:
    """The turn a rating went to, with its project: `rltray good` rates the newest turn of
    every agent and folder, which may not be the one in this terminal."""
    from rltray.app.rating import label
    from rltray.app.words import folder, preview

    turn, value = outcome.turn, outcome.rating.value
    where = f"{turn.agent} in {folder(turn.cwd)}" if turn.cwd else turn.agent
    ctx.say(
        f"{verb} ",
        (label(value, outcome.rating.score), "green" if value > 0 else "red"),
        f": turn {turn.id} ({where}) — {preview(turn.prompt or turn.response)}",
    )


def cmd_rate(ctx: Context, args: argparse.Namespace) -> int:
    value = 1 if args.command == "good" else -1
    outcome = ctx.service().rate_newest(value, comment=args.comment, change=args.last)
    _said(ctx, "Rated" if outcome.changed else "Already rated", outcome)
    return ExitCode.OK


def cmd_rate_turn(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app import rating

    value, score = rating.parse(args.rating)
    outcome = ctx.service().rate(args.turn, value, comment=args.comment, score=score)
    _said(ctx, "Rated" if outcome.changed else "Already rated", outcome)
    return ExitCode.OK


def cmd_undo(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.rating import label
    from rltray.app.words import preview

    outcome = ctx.service().undo()
    ctx.say(
        f"Withdrew the {label(outcome.rating.value, outcome.rating.score)} rating of turn "
        f"{outcome.turn.id} — "
        f"{preview(outcome.turn.prompt or outcome.turn.response)}"
    )
    return ExitCode.OK


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.api.client import ApiClient
    from rltray.app.paths import Paths
    from rltray.app.words import local_time

    client = ApiClient.find(Paths.from_env(ctx.env))
    # The running service knows what the next training waits for; ask it.
    status = client.call("GET", "/api/status") if client else ctx.service().status()
    if args.json:
        ctx.print_json(status)
        return ExitCode.OK
    from rich.table import Table

    table = Table(title="rltray", show_header=False, box=None)
    for key in ("turns", "good", "bad", "unrated", "untrained", "held_out", "pending_spool",
                "rejected_spool"):
        table.add_row(key.replace("_", " "), str(status.get(key, 0)))
    for agent, info in status["agents"].items():
        last = local_time(info["last_event_at"])
        table.add_row(plain(agent), plain(f"{plural(info['turns'], 'turn')}, last at {last}"))
    training = status["training"]
    table.add_row("rltray running", "yes" if status["service_running"] else "no")
    table.add_row("automatic training", "on" if training["automatic"] else "paused")
    table.add_row("next training", plain(training["next_training"]))
    active = training["active_version"]
    table.add_row("active version", "base model" if active is None else f"v{active}")
    table.add_row("data folder", plain(status["data_folder"]))
    problem = status.get("settings_problem")
    if problem:  # the last valid settings are in effect meanwhile
        table.add_row("settings", plain(f"config.toml is not in effect: {problem}"))
    stopped = training.get("stopped")
    if stopped:  # the failure budget is used up: say why, with the trainer's log tail
        table.add_row("training stopped", plain(f"{stopped['message']}; last: {stopped['cause']}"))
    ctx.out.print(table)
    if stopped and stopped.get("log_tail"):
        ctx.say(f"trainer.log of run {stopped['run']} (last lines):")
        ctx.out.print(plain(stopped["log_tail"]))
    return ExitCode.OK


def cmd_turns(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.words import local_time, preview

    turns = ctx.service().turns(limit=args.limit)
    if args.json:
        ctx.print_json([_turn_json(t) for t in turns])
        return ExitCode.OK
    if not turns:
        ctx.say(
            "No turns captured yet. Install the hooks with `rltray hooks install`, "
            "then finish a turn in Claude Code or Codex."
        )
        return ExitCode.OK
    from rich import box
    from rich.table import Table
    from rich.text import Text
    from rltray.app.rating import label

    wide = ctx.out.width >= WIDE
    rows = [
        (
            str(t.id),
            t.agent,
            local_time(t.captured_at),
            "" if t.rating is None else label(t.rating.value, t.rating.score),
            [t.prompt, t.response] if wide else [f"{t.prompt} → {t.response}"],
        )
        for t in turns
    ]
    # The id and rating are what `rltray rate 42 good` needs: these four columns are
    # never cut (a newcomer once rated the wrong turns from "…" ids); only the text
    # columns give way, and they shrink first because only they may wrap. Each text
    # cell carries its own no_wrap, so "wrapping" it cuts it at one line with "…".
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for i, name in enumerate(("id", "agent", "captured", "rating")):
        longest = max(len(name), *(len(row[i]) for row in rows))
        table.add_column(name, no_wrap=True, min_width=longest)
    for name in ("prompt", "answer") if wide else ("prompt → answer",):
        table.add_column(Text(name, no_wrap=True, overflow="ellipsis"), overflow="ellipsis")
    for ident, agent, captured, rating, texts in rows:
        cells = [Text(preview(text, 200), no_wrap=True, overflow="ellipsis") for text in texts]
        table.add_row(ident, plain(agent), captured, rating, *cells)
    ctx.out.print(table)
    return ExitCode.OK


def cmd_export(ctx: Context, args: argparse.Namespace) -> int:
    rows = ctx.service().export()
    if args.output in (None, "-"):
        for row in rows:
            ctx.stdout.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        return ExitCode.OK
    from rltray.app.fileio import write_private_atomic

    lines = [json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows]
    try:
        write_private_atomic(args.output, "".join(lines).encode("utf-8"))
    except OSError as exc:
        raise UserError(
            f"Cannot write {args.output}: {exc.strerror or exc}. Nothing was exported."
        ) from None
    ctx.say(f"Wrote {plural(len(lines), 'turn')} to {args.output}", err=True)
    return ExitCode.OK


def cmd_hooks(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.cli import hooks as hookscli

    return hookscli.run(ctx, args.action, args.agent, lessons_file=args.lessons_file,
                       accept=args.accept_conversation_access,
                       reply_buttons=args.reply_buttons)


def cmd_doctor(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.cli import doctor

    return doctor.repair(ctx) if args.repair else doctor.run(ctx)


def cmd_serve(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.cli import headless

    return headless.serve(ctx, once=args.once)


def _turn_json(t: Any) -> dict[str, Any]:
    return {
        "id": t.id,
        "agent": t.agent,
        "session": t.session,
        "turn": t.turn,
        "captured_at": t.captured_at,
        "prompt": t.prompt,
        "response": t.response,
        "rating": None
        if t.rating is None
        else {"value": t.rating.value, "score": t.rating.score, "comment": t.rating.comment,
              "source": t.rating.source},
    }


# -- parsing -------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from rltray import app
    from rltray.app.hooks import registry

    description = (
        "Rate your coding agent's answers; rltray turns the ratings into a better local model."
    )
    # --debug is accepted before or after the command: on each subparser too, with
    # SUPPRESS so a subparser's default never overwrites a flag given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show tracebacks for unexpected errors",
    )
    parser = argparse.ArgumentParser(prog="rltray", description=description)
    parser.add_argument(
        "--debug", action="store_true", default=False, help="show tracebacks for unexpected errors"
    )
    parser.add_argument("--version", action="version", version=f"rltray {app.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(
        name: str, func: Callable[[Context, argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=[common])
        p.set_defaults(func=func)
        return p

    for name in ("good", "bad"):
        p = add(name, cmd_rate, f"rate the newest captured turn {name}")
        p.add_argument("--comment", "-c", help="why (kept with the rating)")
        p.add_argument(
            "--last",
            action="store_true",
            help="change the newest turn's rating even if it is already rated",
        )
    p = add("rate", cmd_rate_turn, "rate (or re-rate) one turn by its id from `rltray turns`")
    p.add_argument("turn", type=_positive_int, help="the turn's id")
    p.add_argument(
        "rating", metavar="RATING",
        help="good, bad, or a score from 1 to 5 (4-5 good, 1-2 bad; 3 says neither)",
    )  # fmt: skip
    p.add_argument("--comment", "-c", help="why (kept with the rating)")
    add("undo", cmd_undo, "withdraw the rating given last (history is kept)")
    p = add("status", cmd_status, "counts of turns, ratings and pending records")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("turns", cmd_turns, "list recent captured turns")
    p.add_argument("--limit", "-n", type=_positive_int, default=20)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("export", cmd_export, "write every turn with its rating as JSON lines")
    p.add_argument("--output", "-o", help="file to write (default: standard output)")
    p = add("hooks", cmd_hooks, "install, remove or check the agent hooks")
    p.add_argument("action", choices=("install", "uninstall", "status"))
    p.add_argument("--agent", "-a", choices=(*registry.names(), "all"), default="all")
    p.add_argument(
        "--accept-conversation-access", action="store_true",
        help="install: let rltray's OpenClaw plugin see every run's messages (what that "
        "means is said before anything is installed)",
    )
    p.add_argument(
        "--reply-buttons", choices=("on", "off"),
        help="install --agent openclaw: Good/Bad buttons under each reply in Telegram direct "
        "chats, for the owner and allowlisted senders (default: as before, first install off)",
    )
    p.add_argument(
        "--lessons-file", action="store_true",
        help="install: also write the lessons to Claude Code's ~/.claude/rules/rltray-lessons.md, "
        "for setups where hooks cannot add context (rltray stops rewriting it once you edit it)",
    )  # fmt: skip
    p = add("doctor", cmd_doctor, "check what is installed and working, and say what to fix")
    p.add_argument(
        "--repair",
        action="store_true",
        help="rebuild a damaged or lost database from what is readable and the newest backup "
        "(the damaged file is kept)",
    )
    p = add("serve", cmd_serve, "run the headless service (ingest hook records as they arrive)")
    p.add_argument("--once", action="store_true", help="ingest what is waiting and exit")
    for name in COMMAND_MODULES:
        importlib.import_module(f"rltray.app.cli.{name}").add_commands(add)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def main(
    argv: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    stdin: IO[str] | None = None,
) -> int:
    parser = build_parser()
    if argv is None:
        argv = sys.argv[1:]
    # `rltray --selftest`, the installed app's global flag, is `rltray selftest` (bundlecli).
    argv = ["selftest" if a == "--selftest" else a for a in argv]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the message
        return int(exc.code or 0)
    ctx = Context(env, stdout, stderr, stdin)
    try:
        return int(args.func(ctx, args))
    except UserError as exc:
        ctx.say(("rltray: ", "red"), str(exc), err=True)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.debug:
            raise
        ctx.say(
            ("rltray: unexpected error: ", "red"),
            f"{type(exc).__name__}: {exc} (run again with --debug for details)",
            err=True,
        )
        return int(ExitCode.ERROR)
    finally:
        ctx.close()
