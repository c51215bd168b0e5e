"""`rltray lessons …`: list, add, change and preview lessons; turn them on or off per agent.

Each action is one call of the service's lesson intents (``app/lessons/intents.py``),
the same ones the settings page calls; this module only words the answers.
``preview`` writes the exact text to standard output and what it costs against
the budget to standard error, so ``rltray lessons preview > file`` holds the text
alone. ``suggest`` changes nothing unless the user says yes (or passes ``--yes``):
a suggestion from a model is the user's to take, and a pipe never says yes.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rltray.app.errors import ExitCode

if TYPE_CHECKING:
    from rltray.app.cli.context import Context
    from rltray.app.lessons.intents import Preview

PAST = {"mute": "muted", "unmute": "unmuted", "pin": "pinned", "unpin": "unpinned",
        "delete": "deleted"}  # fmt: skip
ID_HELP = "the lesson's id from `rltray lessons list` (c12, t3, u4)"


def cmd_lessons(ctx: Context, args: argparse.Namespace) -> int:
    action: Callable[[Context, argparse.Namespace], int] = ACTIONS[args.action]
    return action(ctx, args)


def _list(ctx: Context, args: argparse.Namespace) -> int:
    rows = ctx.service().lessons.listing()
    if args.json:
        ctx.print_json(rows)
        return ExitCode.OK
    if not rows:
        ctx.say(
            "No lessons yet: they come from the comments and tags of your ratings "
            '(`rltray bad -c "why"`), or add one with `rltray lessons add "text"`.'
        )
        return ExitCode.OK
    from rich import box
    from rich.table import Table
    from rltray.app.cli.context import plain
    from rltray.app.words import local_time, preview

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("id", "kind"):
        table.add_column(name, no_wrap=True)
    table.add_column("lesson", overflow="fold", min_width=24, ratio=1)
    for name in ("bad", "good", "last", "where", "status", "still happening"):
        table.add_column(name, overflow="fold")
    notes: list[str] = []
    for row in rows:
        where = "every project" if row["scope"] == "global" else _folders(row["folders"])
        trend = row["still_happening"]
        table.add_row(
            row["id"],
            row["kind"],
            plain(preview(row["words"], 120)),
            str(row["bad"]),
            str(row["good"]),
            local_time(row["last"])[:10],
            plain(where + (" (global?)" if row["suggested_global"] else "")),
            row["status"],
            "—" if trend is None else _trend_words(trend),
        )
        notes += _notes(row)
    ctx.out.print(table)
    for note in notes:
        ctx.say(note)
    return ExitCode.OK


def _folders(folders: list[str]) -> str:
    """Project folders by their last names (the full paths are in --json)."""
    return ", ".join(os.path.basename(f.rstrip(os.sep)) or f for f in folders) or "—"


def _trend_words(trend: dict[str, Any]) -> str:
    return f"{trend['after_per_week']:.1f}/wk (was {trend['before_per_week']:.1f})"


def _notes(row: dict[str, Any]) -> list[str]:
    notes = []
    if row["contradiction"] and row["status"] == "contradiction":
        notes.append(
            f"{row['id']} is not told: {row['contradiction']}. Say which way it goes with "
            f"`rltray lessons resolve {row['id']} avoid` (or keep), or mute or delete it."
        )
    if row["suggested_global"] and row["status"] != "deleted":
        notes.append(
            f"{row['id']} was rated in {len(row['folders'])} projects: tell it in every "
            f"project with `rltray lessons scope {row['id']} global`."
        )
    return notes


def _add(ctx: Context, args: argparse.Namespace) -> int:
    folder = None if args.everywhere else os.path.abspath(args.project or os.getcwd())
    key = ctx.service().lessons.add(args.text, folder, args.kind)
    ctx.say(f"Added lesson {key} for " + (folder or "every project") + ".")
    return ExitCode.OK


def _edit(ctx: Context, args: argparse.Namespace) -> int:
    lesson = ctx.service().lessons.edit(args.id, args.text)
    said = "now told as" if lesson.edited or lesson.user_added else "back to your own words:"
    ctx.say(f"Lesson {lesson.key} {said} ", (lesson.words, "bold"))
    return ExitCode.OK


def _suggest(ctx: Context, args: argparse.Namespace) -> int:
    lessons = ctx.service().lessons
    now = lessons.get(args.id).words
    ctx.say(f"Asking {args.model or ctx.service().settings().ollama.model or 'Ollama'} to "
            f"reword lesson {args.id} from its comments…", err=True)  # fmt: skip
    got = lessons.suggest(args.id, args.model)
    ctx.say(f"Lesson {got.key} now:   ", now)
    ctx.say(f"Suggested by {got.model}: ", (got.text, "bold"))
    if not (args.yes or ctx.confirm("Use it?")):
        ctx.say(f"Lesson {got.key} keeps its words (`--yes` takes a suggestion).")
        return ExitCode.OK
    lesson = lessons.edit(got.key, got.text)
    ctx.say(f"Lesson {lesson.key} now told as ", (lesson.words, "bold"))
    return ExitCode.OK


def _flag(verb: str) -> Callable[[Context, argparse.Namespace], int]:
    def run(ctx: Context, args: argparse.Namespace) -> int:
        lessons = ctx.service().lessons
        if verb == "delete":
            lessons.delete(args.id)
        elif verb in ("mute", "unmute"):
            lessons.mute(args.id, on=verb == "mute")
        else:
            lessons.pin(args.id, on=verb == "pin")
        ctx.say(f"Lesson {args.id} {PAST[verb]}.")
        return ExitCode.OK

    return run


def _resolve(ctx: Context, args: argparse.Namespace) -> int:
    lesson = ctx.service().lessons.resolve(args.id, args.kind)
    ctx.say(f"Lesson {lesson.key} is told as {args.kind} from now on ({lesson.status()}).")
    return ExitCode.OK


def _scope(ctx: Context, args: argparse.Namespace) -> int:
    lesson = ctx.service().lessons.set_scope(args.id, args.scope)
    where = "every project" if args.scope == "global" else ", ".join(lesson.folders) or "none"
    ctx.say(f"Lesson {lesson.key} is told in {where}.")
    return ExitCode.OK


def _preview(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.cli import plural
    from rltray.app.hooks import lessonfiles, registry

    folder = os.path.abspath(args.project or os.getcwd())
    lessons = ctx.service().lessons
    agents = [args.agent] if args.agent else registry.names()
    shown = lessons.preview(folder, agents[0])
    if shown.text is None:
        ctx.say(f"Nothing would be told to a session in {folder}: no lesson to tell there.",
                err=True)  # fmt: skip
    else:
        ctx.stdout.write(shown.text + "\n")
        ctx.stdout.flush()
        ctx.say(
            f"{plural(shown.lessons, 'lesson')}, {len(shown.text):,} of "
            f"{lessonfiles.BUDGET_CHARS:,} characters (the hook cuts at "
            f"{lessonfiles.MAX_CHARS:,}).",
            err=True,
        )
    for agent in agents:
        _say_where(ctx, agent, lessons.preview(folder, agent), err=True)
    return ExitCode.OK


def _say_where(ctx: Context, agent: str, shown: Preview, err: bool = False) -> None:
    from rltray.app.hooks import registry

    name = registry.display_names()[agent]
    if not shown.on:
        ctx.say(
            f"{name}: lessons are off, nothing is sent "
            f"(`rltray lessons on --agent {agent}` turns them on).",
            err=err,
        )
    elif shown.file is None:
        ctx.say(f"{name}: lessons are on; there is nothing to tell a session there yet.", err=err)
    else:
        ctx.say(
            f"{name}: lessons are on; its hook reads {shown.file} and puts it into {name}'s "
            "context when a session starts there.",
            err=err,
        )


def _switch(on: bool) -> Callable[[Context, argparse.Namespace], int]:
    def run(ctx: Context, args: argparse.Namespace) -> int:
        from rltray.app.cli import plural
        from rltray.app.hooks import lessonfiles, registry

        lessons = ctx.service().lessons
        lessons.switch(args.agent, on)
        name = registry.display_names()[args.agent]
        folder = lessonfiles.agent_folder(str(ctx.service().paths.home), args.agent)
        if not on:
            ctx.say(
                f"Lessons are off for {name}: {folder} is gone, so nothing is put into "
                f"{name}'s context at session start."
            )
            return ExitCode.OK
        files = sorted(n for n in os.listdir(folder) if n.endswith(".md"))
        ctx.say(
            f"Lessons are on for {name}: when a {name} session starts, rltray's hook puts the "
            f"text of {folder}{os.sep}<folder key>.md (that project's lessons) or of "
            f"{folder}{os.sep}{lessonfiles.GLOBAL}.md (every other folder) into {name}'s "
            f"context; {plural(len(files), 'such file')} written now, each at most "
            f"{lessonfiles.BUDGET_CHARS:,} characters. `rltray lessons preview --agent "
            f"{args.agent}` shows the text for this folder."
        )
        return ExitCode.OK

    return run


ACTIONS: dict[str, Callable[[Context, argparse.Namespace], int]] = {
    "list": _list,
    "add": _add,
    "edit": _edit,
    "suggest": _suggest,
    "mute": _flag("mute"),
    "unmute": _flag("unmute"),
    "pin": _flag("pin"),
    "unpin": _flag("unpin"),
    "delete": _flag("delete"),
    "resolve": _resolve,
    "scope": _scope,
    "preview": _preview,
    "on": _switch(True),
    "off": _switch(False),
}


def add_commands(add: Callable[..., Any]) -> None:
    """Register `rltray lessons` with the CLI parser (see cli.COMMAND_MODULES)."""
    from rltray.app.hooks import registry

    p = add("lessons", cmd_lessons, "what the agents are told from your ratings' comments")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = sub.add_parser("list", help="every lesson with its counts, scope and status")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s = sub.add_parser("add", help="add a lesson in your own words")
    s.add_argument("text")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--project", metavar="DIR", help="its project folder (default: this one)")
    where.add_argument(
        "--global", dest="everywhere", action="store_true", help="tell it in every project"
    )
    kind = s.add_mutually_exclusive_group()
    for flag in ("avoid", "keep"):  # the agent reads the words as typed, with the mark
        kind.add_argument(f"--{flag}", dest="kind", action="store_const", const=flag,
                          help=f'mark it "{flag}" (the agent is told your words as you typed '
                          f'them, filed under "{flag}")')  # fmt: skip
    s.set_defaults(kind="note")
    s = sub.add_parser("edit", help="tell a lesson in other words ('' for your comment's)")
    s.add_argument("id", help=ID_HELP)
    s.add_argument("text")
    s = sub.add_parser(
        "suggest", help="your local model (Ollama) rewords a lesson's comments; you accept or not"
    )
    s.add_argument("id", help=ID_HELP)
    s.add_argument("--model", metavar="M", help="the Ollama model to ask (default: ollama.model)")
    s.add_argument("--yes", "-y", action="store_true", help="use the suggestion without asking")
    for verb, what in (
        ("mute", "stop telling a lesson (it stays listed)"),
        ("unmute", "tell a muted lesson again"),
        ("pin", "keep a lesson told first and never retired"),
        ("unpin", "let a lesson retire after 60 days without a new rating"),
        ("delete", "never list or tell a lesson again"),
    ):
        s = sub.add_parser(verb, help=what)
        s.add_argument("id", help=ID_HELP)
    s = sub.add_parser("resolve", help="settle a contradiction: which way the lesson goes")
    s.add_argument("id", help=ID_HELP)
    s.add_argument("kind", choices=("avoid", "keep"))
    s = sub.add_parser("scope", help="tell a lesson in its own project or in every project")
    s.add_argument("id", help=ID_HELP)
    s.add_argument("scope", choices=("project", "global"))
    s = sub.add_parser("preview", help="print exactly what a session would be told")
    s.add_argument("--agent", "-a", choices=registry.names())
    s.add_argument("--project", metavar="DIR", help="the session's folder (default: this one)")
    for verb, what in (("on", "start telling an agent"), ("off", "stop telling an agent")):
        s = sub.add_parser(verb, help=f"{what} the lessons at session start")
        s.add_argument("--agent", "-a", choices=registry.names(), required=True)
