"""`rltray remote …`: the SSH key and Ray token into the OS keyring, and the end-to-end check.

Why commands of their own: the settings (`rltray config set training.remote_*`) are
plain TOML, but the key and the token must never be in a file rltray writes or on a
command line (shell history, ``ps``): ``key`` reads the private key file the user
names and keeps its text in the keyring; ``token`` reads the token from standard
input. ``check`` runs the real steps of a round against the machine
(``training/remote/check.py``) and says which one fails.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rltray.app.errors import ExitCode, UserError

if TYPE_CHECKING:
    from rltray.app.cli.context import Context


def cmd_remote(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app import secrets
    from rltray.app.training import remote

    if args.action == "key":
        if not args.file:
            raise UserError("name the private key file: rltray remote key ~/.ssh/id_ed25519")
        secrets.set_secret(remote.SSH_KEY_SECRET, remote.read_private_key(args.file))
        ctx.say(f"The SSH key from {args.file} is in the {secrets.backend_name()} keyring.")
        return ExitCode.OK
    if args.action == "token":
        token = ctx.stdin.readline().strip()
        if not token:
            raise UserError("give the Ray token on standard input: rltray remote token < FILE")
        secrets.set_secret(remote.RAY_TOKEN_SECRET, token)
        ctx.say(f"The Ray token is in the {secrets.backend_name()} keyring.")
        return ExitCode.OK
    from rltray.app import config
    from rltray.app.paths import Paths
    from rltray.app.training.remote import check

    training = config.load_config(Paths.from_env(ctx.env)).training
    if not remote.enabled(training):
        raise UserError("no remote machine is set: rltray config set training.remote_host HOST")
    rows = check.run(training)
    for name, ok, said in rows:
        ctx.say((f"{'ok' if ok else 'FAIL':>4}  ", "green" if ok else "red"), f"{name}: {said}")
    return ExitCode.OK if rows and all(ok for _, ok, _ in rows) else ExitCode.NOT_AVAILABLE


def add_commands(add: Callable[..., Any]) -> None:
    """Register this module's commands with the CLI parser (see cli.COMMAND_MODULES)."""
    p = add("remote", cmd_remote, "train on a bigger machine: its SSH key, Ray token, check")
    p.add_argument("action", choices=("key", "token", "check"),
                   help="key FILE: keep the SSH key in the keyring; token: read the Ray token "
                   "from standard input; check: try each step of a remote round")  # fmt: skip
    p.add_argument("file", nargs="?", help="key: the private key file")
