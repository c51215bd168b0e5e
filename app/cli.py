"""The `rltray` command: parses arguments and dispatches, nothing more.

Each command is a small function over the Service; heavy imports stay inside
the functions so `rltray good` starts fast. `main(argv, env)` takes its
environment as parameters so tests run the real CLI in process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from rltray.app.errors import ExitCode, UserError

if TYPE_CHECKING:
    from rich.console import Console
    from rltray.app.service import Service

AGENT_CHOICES = ("claude-code", "codex", "all")


class Context:
    """What a command needs from the outside world, injectable for tests."""

    def __init__(
        self,
        env: dict[str, str] | None = None,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
    ) -> None:
        self.env = dict(os.environ if env is None else env)
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self._service: Service | None = None

    @property
    def out(self) -> Console:
        from rich.console import Console

        return Console(file=self.stdout, highlight=False, soft_wrap=True)

    @property
    def err(self) -> Console:
        from rich.console import Console

        return Console(file=self.stderr, highlight=False, soft_wrap=True)

    def service(self, ingest: bool = True) -> Service:
        """Open the data folder once; pick up waiting hook records first."""
        if self._service is None:
            from rltray.app.paths import Paths
            from rltray.app.service import Service

            self._service = Service(Paths.from_env(self.env))
            if ingest:
                report = self._service.ingest()
                for message in report.messages:
                    self.err.print(f"[yellow]{message}[/]")
        return self._service

    def close(self) -> None:
        if self._service is not None:
            self._service.close()
            self._service = None

    def print_json(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


# -- commands ------------------------------------------------------------------


def cmd_rate(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.service import preview

    value = 1 if args.command == "good" else -1
    outcome = ctx.service().rate_latest(value, comment=args.comment)
    word = "[green]good[/]" if value > 0 else "[red]bad[/]"
    turn = outcome.turn
    ctx.out.print(
        f"Rated {word}: turn {turn.id} ({turn.agent}) — {preview(turn.prompt or turn.response)}"
    )
    return ExitCode.OK


def cmd_undo(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.service import preview

    outcome = ctx.service().undo()
    word = "good" if outcome.rating.value > 0 else "bad"
    ctx.out.print(
        f"Withdrew the {word} rating of turn {outcome.turn.id} — "
        f"{preview(outcome.turn.prompt or outcome.turn.response)}"
    )
    return ExitCode.OK


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.service import local_time

    status = ctx.service().status()
    if args.json:
        ctx.print_json(status)
        return ExitCode.OK
    from rich.table import Table

    table = Table(title="rltray", show_header=False, box=None)
    for key in ("turns", "good", "bad", "unrated", "untrained", "pending_spool", "rejected_spool"):
        table.add_row(key.replace("_", " "), str(status[key]))
    for agent, info in status["agents"].items():
        last = local_time(info["last_event_at"])
        table.add_row(f"{agent}", f"{info['turns']} turns, last at {last}")
    table.add_row("data folder", status["data_folder"])
    ctx.out.print(table)
    return ExitCode.OK


def cmd_turns(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.service import local_time, preview

    turns = ctx.service().turns(limit=args.limit)
    if args.json:
        ctx.print_json([_turn_json(t) for t in turns])
        return ExitCode.OK
    from rich.table import Table

    table = Table()
    for name in ("id", "agent", "captured", "rating"):
        table.add_column(name, no_wrap=True)
    table.add_column("prompt", ratio=1)
    table.add_column("response", ratio=1)
    for t in turns:
        rating = "" if t.rating is None else ("good" if t.rating.value > 0 else "bad")
        table.add_row(
            str(t.id),
            t.agent,
            local_time(t.captured_at),
            rating,
            preview(t.prompt, 40),
            preview(t.response, 40),
        )
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
    write_private_atomic(args.output, "".join(lines).encode("utf-8"))
    ctx.err.print(f"Wrote {len(lines)} turns to {args.output}")
    return ExitCode.OK


def cmd_hooks(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app import hookscli

    return hookscli.run(ctx, args.action, args.agent)


def cmd_doctor(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app import doctor

    return doctor.run(ctx)


def cmd_serve(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app import headless

    return headless.serve(ctx, once=args.once)


def cmd_run(ctx: Context, args: argparse.Namespace) -> int:
    # The tray arrives with its own issue; until then `run` is the headless service.
    from rltray.app import headless

    return headless.serve(ctx, once=False)


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
        else {"value": t.rating.value, "comment": t.rating.comment, "source": t.rating.source},
    }


# -- parsing -------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rltray",
        description=(
            "Rate your coding agent's answers; rltray turns the ratings into a better local model."
        ),
    )
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks for unexpected errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(
        name: str, func: Callable[[Context, argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        return p

    for name, word in (("good", "good"), ("bad", "bad")):
        p = add(name, cmd_rate, f"rate the newest unrated captured turn {word}")
        p.add_argument("--comment", "-c", help="why (kept with the rating)")
    add("undo", cmd_undo, "withdraw the newest rating (history is kept)")
    p = add("status", cmd_status, "counts of turns, ratings and pending records")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("turns", cmd_turns, "list recent captured turns")
    p.add_argument("--limit", "-n", type=_positive_int, default=20)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("export", cmd_export, "write every turn with its rating as JSON lines")
    p.add_argument("--output", "-o", help="file to write (default: standard output)")
    p = add("hooks", cmd_hooks, "install, remove or check the agent hooks")
    p.add_argument("action", choices=("install", "uninstall", "status"))
    p.add_argument("--agent", "-a", choices=AGENT_CHOICES, default="all")
    add("doctor", cmd_doctor, "check what is installed and working, and say what to fix")
    p = add("serve", cmd_serve, "run the headless service (ingest hook records as they arrive)")
    p.add_argument("--once", action="store_true", help="ingest what is waiting and exit")
    add("run", cmd_run, "start rltray")
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
) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the message
        return int(exc.code or 0)
    ctx = Context(env, stdout, stderr)
    try:
        return int(args.func(ctx, args))
    except UserError as exc:
        ctx.err.print(f"[red]rltray:[/] {exc}")
        return int(exc.exit_code)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.debug:
            raise
        ctx.err.print(
            f"[red]rltray: unexpected error:[/] {type(exc).__name__}: {exc} "
            "(run again with --debug for details)"
        )
        return int(ExitCode.ERROR)
    finally:
        ctx.close()


if __name__ == "__main__":
    sys.exit(main())
