"""`rltray train|rollback|publish|pause|resume|versions|runs|config`: training and settings.

When the service runs, commands that change what it owns (the trainer, the
schedule) go through its local API, so there is one trainer and one schedule;
when it does not, they work alone on the data folder. `train` with no service
trains in the foreground with a progress bar; Ctrl+C pauses the run. Every
command that makes a version active ends with an "Ollama: …" line: what Ollama
serves now, or why it does not (the version is active here either way).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rltray.app.errors import ExitCode, UserError

if TYPE_CHECKING:
    from rltray.app.api.client import ApiClient
    from rltray.app.cli.context import Context
    from rltray.app.service import Service
    from rltray.app.training.runner import TrainingRunner

#: How long a command waits for a starting rltray's API (its start may settle a killed
#: tray's trainer first: up to the runner's one-minute stop timeout).
SERVICE_START_WAIT_S = 90.0

def _client(ctx: Context) -> ApiClient | None:
    """The running rltray's client; None when none runs, so this process does the work.

    A service that holds its lock but has not published its endpoint yet is starting
    (settling a killed tray's trainer can take a minute): wait for it rather than train
    here beside it, since two trainers must never share one folder's ratings.
    """
    from rltray.app import instance
    from rltray.app.api.client import ApiClient
    from rltray.app.paths import Paths

    paths = Paths.from_env(ctx.env)
    client = ApiClient.find(paths)
    deadline = time.monotonic() + SERVICE_START_WAIT_S
    told = False
    while client is None and instance.service_running(paths):
        if time.monotonic() >= deadline:
            raise UserError(
                "rltray is running for this data folder but its API does not answer yet; "
                "nothing was done here. Try again in a minute."
            )
        if not told:
            ctx.say("Waiting for the running rltray to finish starting…")
            told = True
        time.sleep(0.25)
        client = ApiClient.find(paths)
    return client


def _started(run: dict[str, Any]) -> str:
    """'started' or 'resumed from its checkpoint' (Train now resumes a paused round)."""
    return "resumed from its checkpoint" if run.get("resumed") else "started"


def cmd_train(ctx: Context, args: argparse.Namespace) -> int:
    client = _client(ctx)
    if client is not None:
        started = client.call("POST", "/api/train")
        ctx.say(f"Training run {started['run']} {_started(started)} in the running rltray.")
        if args.wait:
            return _wait_remote(ctx, client, started["run"])
        return ExitCode.OK
    service = ctx.service()
    # No rltray runs: a round a killed tray or `rltray train` left behind is settled first
    # (its trainer stopped, its run paused or failed), as the tray does when it starts. A
    # round another live `rltray train` runs is its own: train_now refuses, saying so.
    service.runner().reconcile()
    run = service.train_now(wait=False)
    ctx.say(
        f"Training run {run['run']} {_started(run)} (Ctrl+C pauses it; `rltray train` resumes)."
    )
    runner = service.runner()
    try:
        _progress(ctx, lambda: runner.progress, runner.running)
    except KeyboardInterrupt:
        if runner.stop(pause=True):
            ctx.say("Paused. Run `rltray train` again to resume from the checkpoint.")
            return 130
        return _interrupted_after_training(ctx, service, runner, run["run"])
    return _outcome(ctx, _find(service.runs(), run["run"]))


#: How long Ctrl+C after the trainer's end waits for its result to be recorded (a rename
#: and one transaction; never the publish to Ollama, which may take tens of minutes).
RECORD_WAIT_S = 30.0


def _interrupted_after_training(
    ctx: Context, service: Service, runner: TrainingRunner, run_id: str
) -> int:
    """Ctrl+C once the trainer had exited: nothing was left to pause. Regression (review 3
    r8): "Paused. Run `rltray train` again…" was said of a round that was accepted and
    active, whose export to Ollama the Ctrl+C cut short."""
    deadline = time.monotonic() + RECORD_WAIT_S
    while runner.running() and not runner.exporting() and time.monotonic() < deadline:
        time.sleep(0.05)
    exporting = runner.exporting()
    run = _find(service.runs(), run_id)
    version = run.get("adapter_version")
    if exporting and version is not None:
        ctx.say(
            ("Accepted: ", "green"),
            f"v{version} is active; its export to Ollama was cut short: run `rltray publish`.",
        )
        return 130
    return _outcome(ctx, run)


def _find(runs: list[dict[str, Any]], run_id: str) -> dict[str, Any]:
    """The run ``run_id`` from a newest-first list (the newest if it is not listed)."""
    return next((r for r in runs if r["id"] == run_id), runs[0])


def _progress(ctx: Context, read: Any, running: Any) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("training"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"))
    with Progress(*columns, TimeElapsedColumn(), console=ctx.err, transient=True) as bar:
        task = bar.add_task("train", total=100)
        while running():
            bar.update(task, completed=float(read().get("percent") or 0.0))
            time.sleep(0.2)


def _wait_remote(ctx: Context, client: ApiClient, run_id: str) -> int:
    """Follow a round the running rltray trains; Ctrl+C stops following, not the round."""

    def status() -> dict[str, Any]:
        return client.call("GET", "/api/status")["training"]

    try:
        _progress(ctx, lambda: status().get("progress") or {}, lambda: status()["running"])
    except KeyboardInterrupt:
        ctx.say(
            f"Stopped waiting. Run {run_id} goes on in the running rltray: follow it with "
            "`rltray status`, see how it ended with `rltray runs`; the tray's "
            "Stop training pauses it."
        )
        return 130
    return _outcome(ctx, _find(client.call("GET", "/api/runs"), run_id))


def _outcome(ctx: Context, run: dict[str, Any]) -> int:
    """Say how the round ended: what happened to the versions, the gate's verdict and notes."""
    from rltray.app.training import outcome

    status = run["status"]
    if outcome.accepted(run):
        ctx.say(("Accepted: ", "green"), outcome.accepted_sentence(run))
        metrics = run.get("metrics")
        if isinstance(metrics, dict) and metrics.get("ollama"):
            _said_ollama(ctx, str(metrics["ollama"]))
    elif outcome.rejected(run):
        ctx.say(("Rejected: ", "yellow"), "no new version; the ratings wait for the next round.")
    else:
        where = f" (see runs/{run['id']}/trainer.log)" if status == "failed" else ""
        ctx.say((f"Run {run['id']} {status}: ", "yellow"), outcome.cause(run) + where)
        return ExitCode.OK if status == "paused" else ExitCode.ERROR
    ctx.say("Gate: ", outcome.verdict(run))
    for note in outcome.gate_notes(run):
        ctx.say(f"  · {note}")
    return ExitCode.OK


def cmd_rollback(ctx: Context, args: argparse.Namespace) -> int:
    client = _client(ctx)
    if client is not None:
        result = client.call("POST", "/api/rollback", {"version": args.version})
    else:
        result = ctx.service().rollback(args.version)
    active = result["active"]
    ctx.say("Active now: " + ("the base model (no adapter)" if active is None else f"v{active}"))
    if result.get("ollama"):
        _said_ollama(ctx, result["ollama"])
    return ExitCode.OK


def cmd_publish(ctx: Context, args: argparse.Namespace) -> int:
    """Send the active version to Ollama again (it was down when the version became active)."""
    result = ctx.service(ingest=False).publish()
    active = result["active"]
    ctx.say("Active here: " + ("the base model" if active is None else f"v{active}"))
    line = result.get("ollama")
    if line and not _said_ollama(ctx, line):
        return ExitCode.NOT_AVAILABLE
    return ExitCode.OK


def _said_ollama(ctx: Context, line: str) -> bool:
    """Print the publisher's line; False when Ollama does not serve the active version (the
    line then says why, and what to do)."""
    from rltray.app.training.publisher import said_failure

    failed = said_failure(line)
    ctx.say(("Ollama: ", "yellow" if failed else "green"), line)
    return not failed


def cmd_automatic(ctx: Context, args: argparse.Namespace) -> int:
    on = args.command == "resume"
    client = _client(ctx)
    if client is not None:
        client.call("POST", "/api/resume" if on else "/api/pause")
    else:
        ctx.service(ingest=False).set_automatic(on)
    ctx.say("Automatic training " + ("resumed." if on else "paused (Train now still works)."))
    return ExitCode.OK


def _listing(
    ctx: Context,
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    empty: str,
    columns: tuple[str, ...],
    cells: Callable[[dict[str, Any]], tuple[Any, ...]],
) -> int:
    """JSON with --json, a sentence when empty, else a table; cells hold captured text as Text."""
    if args.json:
        ctx.print_json(rows)
        return ExitCode.OK
    if not rows:
        ctx.say(empty)
        return ExitCode.OK
    from rich.table import Table

    table = Table(*columns)
    for row in rows:
        table.add_row(*cells(row))
    ctx.out.print(table)
    return ExitCode.OK


def _version(v: int | None) -> str:
    return "—" if v is None else f"v{v}"


def cmd_versions(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.cli.context import plain
    from rltray.app.words import local_time

    def cells(v: dict[str, Any]) -> tuple[Any, ...]:
        # the trainer's name for the new weights' held-out AUROC (trainer/evaluate.py; the
        # web page reads the same key); "heldout_auroc" was never written, so always "—"
        auroc = v["metrics"].get("auroc_new") if isinstance(v["metrics"], dict) else None
        return (
            ("▶ " if v["active"] else "  ") + _version(v["version"]),
            v["status"],
            _version(v["parent"]),
            local_time(v["created_at"]),
            f"{auroc:.2f}" if isinstance(auroc, (int, float)) else "—",
            plain(v.get("published") or v["ollama_tag"] or "—"),
        )

    columns = ("version", "status", "parent", "created", "held-out AUROC", "published as")
    empty = "No trained versions yet; `rltray train` starts a round."
    return _listing(ctx, args, ctx.service(ingest=False).versions(), empty, columns, cells)


def cmd_runs(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app.cli.context import plain
    from rltray.app.training import outcome
    from rltray.app.words import local_time

    def cells(r: dict[str, Any]) -> tuple[Any, ...]:
        resumed = (r["metrics"] or {}).get("resumes") if isinstance(r["metrics"], dict) else 0
        return (
            plain(r["id"]),
            r["status"] + (", resumed" if resumed else ""),
            local_time(r["started_at"]),
            local_time(r["finished_at"]),
            _version(r["adapter_version"]),
            plain(r["outcome"][:240]),
        )

    rows = [{**r, "outcome": outcome.summary(r)} for r in ctx.service(ingest=False).runs()]
    columns = ("run", "status", "started", "finished", "version", "verdict or cause")
    return _listing(ctx, args, rows, "No training runs yet.", columns, cells)


def cmd_config(ctx: Context, args: argparse.Namespace) -> int:
    from rltray.app import config
    from rltray.app.paths import Paths

    paths = Paths.from_env(ctx.env).ensure()
    if args.action == "list":
        current = config.load_config(paths)
        for s in config.describe():
            ctx.say((s.key, "bold"), f" = {json.dumps(current.get(s.key))}")
            ctx.say(f"    {s.help}")
        return ExitCode.OK
    if args.key is None:
        raise config.ConfigError(f"`rltray config {args.action}` needs a setting name.")
    if args.action == "get":
        ctx.say(json.dumps(config.load_config(paths).get(args.key)))
        return ExitCode.OK
    if args.value is None:
        raise config.ConfigError(f"`rltray config set {args.key}` needs a value.")
    new = ctx.service().set_setting(args.key, args.value)  # logged; a running tray re-reads
    ctx.say(f"{args.key} = {json.dumps(new)} (saved in {paths.config})")
    return ExitCode.OK


def add_commands(add: Any) -> None:
    """Register these commands on the CLI's parser (``add(name, func, help)``)."""
    p = add("train", cmd_train, "train a new version now from the ratings not yet trained on")
    p.add_argument("--wait", action="store_true", help="with a running rltray: wait for the end")
    p = add("rollback", cmd_rollback, "make an older version active (default: the previous one)")
    p.add_argument("version", nargs="?", help="v3 or 3; 0 for the base model")
    add("publish", cmd_publish, "send the active version to Ollama again (after it was down)")
    add("pause", cmd_automatic, "pause automatic training (Train now still works)")
    add("resume", cmd_automatic, "resume automatic training")
    p = add("versions", cmd_versions, "trained versions, the active one marked")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("runs", cmd_runs, "training runs with their outcome")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("config", cmd_config, "list, read or change settings (config.toml keeps comments)")
    p.add_argument("action", choices=("list", "get", "set"))
    p.add_argument("key", nargs="?")
    p.add_argument("value", nargs="?")
