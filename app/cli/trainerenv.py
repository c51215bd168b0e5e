"""``rltray trainer-env create|status``: a venv in the data folder with the training stack.

Why: the tray app (and above all the frozen bundle) never holds torch or mlx;
training runs as ``<training.python> -m rltray.trainer JOB``. ``create`` builds
that Python: ``<data folder>/trainer-env`` with rltray's trainer package and the
pinned packages of one backend, then records it as ``training.python``.

The steps live in their own modules (app/training/trainerenv/): ``plan`` (which backend, which
packages, which index), ``python`` (the Python to build from) and
``build`` (built beside, proven by a real training step, swapped in;
status). This module is the CLI's two faces on them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rltray.app.errors import ExitCode
from rltray.app.training.trainerenv.build import Layout, Say, build, record, status, venv_python
from rltray.app.training.trainerenv.plan import plan
from rltray.app.training.trainerenv.python import find_base_python

if TYPE_CHECKING:
    from rltray.app.cli.context import Context


def create(
    ctx: Context,
    backend: str | None = None,
    base_python: str | None = None,
    torch_index: str | None = None,
) -> int:
    from rltray.app.paths import Paths

    paths = Paths.from_env(ctx.env)
    the_plan = plan(backend, torch_index)
    base = find_base_python(base_python)
    ctx.say(f"Trainer environment for {the_plan.backend} ({the_plan.why}), built with {base}.")
    result = build(paths, the_plan, base, _progress_say(ctx))
    python = venv_python(Layout(paths.home).final)
    record(paths, python, the_plan)
    ctx.say(
        ("Ready: ", "green"),
        f"one training step took {result.get('seconds', '?')} s on {result.get('device')}; "
        f"training.python is now {python}.",
    )
    return ExitCode.OK


def _progress_say(ctx: Context) -> Say:
    """pip's lines for a person or a program: a terminal hides the raw "Progress N of M"
    lines behind a percentage; a pipe (the setup wizard's job) gets them as they are."""
    terminal = ctx.out.is_terminal

    def say(line: str) -> None:
        found = _PIP_PROGRESS.match(line)
        if found is None or not terminal:
            ctx.say(line if found else ("  " + line, "dim"))
            return
        done, total = int(found.group(1)), int(found.group(2))
        if total:
            ctx.out.print(f"  downloading… {100 * done // total:3d}%", end="\r")

    return say


_PIP_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)")


def show_status(ctx: Context, json_out: bool = False) -> int:
    from rltray.app.paths import Paths

    info = status(Paths.from_env(ctx.env))
    if json_out:
        ctx.print_json(info)
    elif not info["exists"]:
        ctx.say(f"No trainer environment at {info['folder']}; run `rltray trainer-env create`.")
    elif info["in_use"]:
        ctx.say(f"Trainer environment {info['folder']} is in use (training.python).")
    else:
        ctx.say(
            f"Trainer environment {info['folder']} exists, but training.python is "
            f"{info['training_python'] or 'empty'}; run `rltray trainer-env create` to use it."
        )
    return ExitCode.OK if info["exists"] else ExitCode.NOT_AVAILABLE
