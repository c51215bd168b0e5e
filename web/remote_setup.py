"""The wizard's "train on a bigger machine" part (issue 26): key, token, host key, check.

The machine's settings (``training.remote_*``) save through ``/api/settings`` like every
other field of the wizard. What cannot be a setting has a route here, each the same
call the CLI makes (app/cli/remote.py):

* the SSH private key, read from the file the user names, and the Ray token go into
  the OS keyring (never a file rltray writes, never sent back to the page: the page
  only learns whether each is kept);
* the host key is shown before anything trusts it — the fingerprint the server
  presents, asked without logging in — and pinned only when the user accepts it;
* the end-to-end check (``training/remote/check.py``: SSH, Ray and its token, a GPU,
  the remote trainer, one training step) runs as a job the page polls, its rows
  appearing one by one.

The OS keyring, not the app's session fallback: a key kept only in this process's
memory would be gone for the round the tray starts after a restart.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request
from rltray.app.errors import UserError
from rltray.web.settings import save_values
from rltray.web.state import state

bp = Blueprint("remote_setup", __name__)
CHECK_JOB = "remote check"


def _kept(name: str) -> bool | None:
    """Whether the keyring holds ``name``; None when the keyring cannot be asked."""
    from rltray.app import secrets

    try:
        return bool(secrets.get_secret(name))
    except secrets.SecretsUnavailable:
        return None


def _status() -> dict[str, Any]:
    from rltray.app import secrets
    from rltray.app.training import remote

    training = state().service.settings().training
    job = state().jobs.running(CHECK_JOB)
    try:
        keyring = secrets.backend_name()
    except secrets.SecretsUnavailable as exc:
        keyring = None
        problem = str(exc)
    else:
        problem = ""
    return {
        "enabled": remote.enabled(training),
        "host": training.remote_host,
        "port": training.remote_port,
        "host_key": training.remote_host_key,
        "has_key": _kept(remote.SSH_KEY_SECRET),
        "has_token": _kept(remote.RAY_TOKEN_SECRET),
        "keyring": keyring,
        "keyring_problem": problem,
        "job": job.as_dict() if job else None,
    }


@bp.post("/api/setup/remote")
def api_remote() -> Any:
    """Where the remote machine's setup stands (a POST: it asks the keyring)."""
    return jsonify(_status())


def _field(name: str) -> str:
    """One text field of the request's JSON body, trimmed ("" when absent)."""
    return str((request.get_json(silent=True) or {}).get(name) or "").strip()


def _host_key_seen() -> tuple[Any, str]:
    """(training settings, the fingerprint their host shows now, asked before any login)."""
    from rltray.app.training.remote.ssh import server_fingerprint

    training = state().service.settings().training
    if not training.remote_host.strip():
        raise UserError("Name the remote host first.")
    return training, server_fingerprint(training.remote_host.strip(), int(training.remote_port))


@bp.post("/api/setup/remote/host-key")
def api_host_key() -> Any:
    """The fingerprint the configured host shows, and whether it is the pinned one."""
    training, seen = _host_key_seen()
    pinned = training.remote_host_key.strip()
    return jsonify({"host": training.remote_host.strip(), "port": training.remote_port,
                    "fingerprint": seen, "pinned": pinned,
                    "matches": bool(pinned) and pinned == seen})  # fmt: skip


@bp.post("/api/setup/remote/accept-host-key")
def api_accept_host_key() -> Any:
    """Pin the fingerprint the page showed — only if the host still shows that one."""
    shown = _field("fingerprint")
    training, seen = _host_key_seen()
    if not shown or shown != seen:
        raise UserError(f"The host now shows {seen}, not the key you accepted; compare again.")
    errors, _ = save_values({"training.remote_host_key": seen})
    if errors:
        raise UserError(next(iter(errors.values())))
    state().service.note("setup", f"accepted the host key {seen} of {training.remote_host}")
    return jsonify(_status())


@bp.post("/api/setup/remote/key")
def api_key() -> Any:
    """Keep the private key from the file the user names in the keyring."""
    from rltray.app import secrets
    from rltray.app.training import remote

    name = _field("path")
    secrets.set_secret(remote.SSH_KEY_SECRET, remote.read_private_key(name))
    state().service.note("setup", f"kept the SSH key from {name} in the keyring")
    return jsonify(_status())


@bp.post("/api/setup/remote/token")
def api_token() -> Any:
    """Keep the Ray token in the keyring."""
    from rltray.app import secrets
    from rltray.app.training import remote

    token = _field("token")
    if not token:
        raise UserError("Paste the Ray token (the head's ~/.ray/auth_token).")
    secrets.set_secret(remote.RAY_TOKEN_SECRET, token)
    state().service.note("setup", "kept the Ray token in the keyring")
    return jsonify(_status())


@bp.post("/api/setup/remote/check")
def api_check() -> Any:
    """Start the end-to-end check; poll /api/jobs/<id> (``result.rows`` grow as it goes)."""
    from rltray.app.training import remote
    from rltray.app.training.remote import check

    jobs = state().jobs
    running = jobs.running(CHECK_JOB)
    if running is not None:
        return jsonify(running.as_dict())
    service = state().service  # the job's thread has no app context
    training = service.settings().training
    if not remote.enabled(training):
        raise UserError("Name the remote host first.")

    def work(job: Any) -> None:
        rows: list[dict[str, Any]] = job.result.setdefault("rows", [])

        def told(row: tuple[str, bool, str]) -> None:
            name, ok, said = row
            rows.append({"name": name, "ok": ok, "said": said})

        got = check.run(training, on_row=told)
        if not got or not all(ok for _, ok, _ in got):
            raise UserError("The check stopped at a step; its row says why.")
        service.note("setup", f"checked the remote machine {training.remote_host}")

    return jsonify(jobs.start_call(CHECK_JOB, "Checking each step of a remote round",
                                   work).as_dict())
