"""Training on a bigger machine through Ray Jobs over SSH (issue 26).

The runner asks :func:`launch` whether a round goes remote; when it does, it starts
:mod:`.standin` (``python -m rltray.app.training.remote JOB.json``) in place of the
trainer and writes :func:`handshake` as its first stdin line: the
``training.remote_*`` settings and the secrets from the OS keyring (the SSH key and
the Ray token are never in a file or argv). Everything after that is the trainer's
own contract. ``remote.json`` in a run folder marks a round that was sent to Ray, so
the runner re-attaches to it after a tray restart (:func:`attachable`).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from rltray.app.errors import UserError
from rltray.app.userpath import user_path

#: The most a private key file may hold (an RSA-16384 key in PEM is under 13 kB).
KEY_FILE_LIMIT = 64 * 1024

STATE_FILE = "remote.json"
SSH_KEY_SECRET = "remote-ssh-key"
RAY_TOKEN_SECRET = "ray-token"
CONFIG_FIELDS = {
    "host": "remote_host", "port": "remote_port", "user": "remote_user",
    "host_key": "remote_host_key", "dashboard_port": "remote_dashboard_port",
    "dir": "remote_dir", "python": "remote_python", "gpus": "remote_gpus",
    "stop_grace_s": "remote_stop_grace_s", "base_model": "remote_base_model",
}  # fmt: skip


def enabled(training: Any) -> bool:
    """A round goes remote when ``training.remote_host`` names a machine."""
    return bool(str(getattr(training, "remote_host", "") or "").strip())


def read_private_key(name: str) -> str:
    """The text of the private key file ``name`` (``~`` expanded), for the keyring; the
    CLI's `rltray remote key` and the wizard both read it here."""
    if not name.strip():
        raise UserError("Name the private key file, e.g. ~/.ssh/id_ed25519.")
    path = user_path(name.strip())
    try:  # a key is a few kB: a mistyped path to a model file, /dev/zero or a FIFO is not
        # (non-blocking: opening a FIFO would wait for a writer)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with os.fdopen(fd, "rb", buffering=0) as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise UserError(f"{name.strip()} is not a file.")
            raw = fh.read(KEY_FILE_LIMIT + 1)
        if len(raw) > KEY_FILE_LIMIT:
            raise UserError(f"{name.strip()} is not a private key (it is larger than any is).")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise UserError(f"Cannot read the key file {name.strip()}: {reason}.") from None
    if "PRIVATE KEY" not in text:
        raise UserError(f"{name.strip()} is not a private key (it has no PRIVATE KEY block).")
    return text


def command(job_path: Path) -> list[str]:
    """The stand-in's command line (this interpreter: the tray's, which has asyncssh)."""
    return [sys.executable, "-m", "rltray.app.training.remote", str(job_path)]


def config_of(training: Any) -> dict[str, Any]:
    return {
        key: getattr(training, name)
        for key, name in CONFIG_FIELDS.items()
        if getattr(training, name, None) not in (None, "")
    }


def handshake(training: Any, secrets: Any = None) -> bytes:
    """The stand-in's first stdin line: settings plus the keyring's SSH key and Ray token."""
    line: dict[str, Any] = {"config": config_of(training)}
    for key, name in (("ssh_key", SSH_KEY_SECRET), ("ray_token", RAY_TOKEN_SECRET)):
        line[key] = _secret(name, secrets)
    return (json.dumps(line) + "\n").encode()


def _secret(name: str, secrets: Any) -> str | None:
    from rltray.app import secrets as keyring_secrets

    try:
        if secrets is not None:
            return secrets.get(name)
        return keyring_secrets.get_secret(name)
    except keyring_secrets.SecretsUnavailable:
        return None


def attachable(folder: Path) -> bool:
    """The run was sent to Ray (its submission is named in ``remote.json``)."""
    try:
        return bool(
            json.loads((folder / STATE_FILE).read_text(encoding="utf-8")).get("submission_id")
        )
    except (OSError, ValueError, AttributeError):
        return False
