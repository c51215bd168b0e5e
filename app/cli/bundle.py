"""`rltray trainer-env create|status` and `rltray selftest` (also `rltray --selftest`).

What an installed bundle needs beyond the everyday commands: an environment
to train in (the bundle never holds torch or mlx) and a way to prove every
part works on this machine.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rltray.app.cli.context import Context

BACKENDS = ("cuda", "mps", "mlx", "cpu")


def cmd_selftest(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.cli import selftest

    return selftest.run(ctx)


def cmd_trainer_env(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.cli import trainerenv

    if args.action == "status":
        return trainerenv.show_status(ctx, json_out=args.json)
    return trainerenv.create(
        ctx, backend=args.backend, base_python=args.python, torch_index=args.torch_index
    )


def add_commands(add: Callable[..., Any]) -> None:
    """Register this module's commands with the CLI parser (see cli.COMMAND_MODULES)."""
    add(
        "selftest",
        cmd_selftest,
        "check every part here for real (store, keyring, notifications, tray, web server, "
        "hook program, trainer environment); one line each",
    )
    p = add(
        "trainer-env",
        cmd_trainer_env,
        "create (or repair/upgrade) the Python environment training runs in, or show it",
    )
    p.add_argument("action", choices=("create", "status"))
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        help="what to train with (default: cuda with an NVIDIA GPU, mlx on Apple Silicon, "
        "mps on other Macs, else cpu)",
    )
    p.add_argument(
        "--python",
        help="the Python 3.10+ to build the environment from (default: the first one found)",
    )
    p.add_argument(
        "--torch-index",
        help="the package index torch comes from ('none': only the configured ones; "
        "default: PyTorch's CPU or CUDA index where PyPI's default wheel is the wrong build)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable status")

