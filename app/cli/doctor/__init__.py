"""`rltray doctor`: what is installed, what works, and what to fix.

Each check is a small function returning a Check; one failing check never
stops the others, because the point is to see every problem at once.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.app import instance
from rltray.app.cli.doctor.check import FAIL, OK, WARN, Check
from rltray.app.errors import ExitCode

if TYPE_CHECKING:
    from rltray.app.cli.context import Context
    from rltray.app.paths import Paths
    from rltray.app.service import Service

REPAIR = "rltray doctor --repair"
BACKUP_STALE_DAYS = 3


MARK_STYLES = {OK: ("✓", "green"), WARN: ("!", "yellow"), FAIL: ("✗", "red")}


def run(ctx: Context) -> int:
    from rich.table import Table
    from rich.text import Text

    checks = list(collect(ctx))
    table = Table("", "check", "detail")
    for c in checks:
        # Details quote files, settings and captured text: plain Text, never markup.
        table.add_row(Text(*MARK_STYLES[c.state]), Text(c.name), Text(c.detail))
    ctx.out.print(table)
    # Fixes are commands to copy: printed unwrapped, outside the table.
    fixes = [c for c in checks if c.fix and c.state != OK]
    if fixes:
        ctx.say("\nTo fix:")
        for c in fixes:
            ctx.say("  ", MARK_STYLES[c.state], f" {c.name}: {c.fix}")
    failed = [c for c in checks if c.state == FAIL]
    if failed:
        ctx.say((f"{len(failed)} problem(s) need fixing.", "red"))
        return ExitCode.NOT_AVAILABLE
    if not _capture_installed(ctx):
        ctx.say(
            (
                "Nothing is broken, but no agent's hooks are installed, so no turn is captured "
                "yet: run `rltray hooks install`.",
                "yellow",
            )
        )
        return ExitCode.OK
    ctx.say(("Everything rltray needs for capture and rating works.", "green"))
    return ExitCode.OK


def _capture_installed(ctx: Context) -> bool:
    from rltray.app.hooks import registry

    paths = ctx.service(ingest=False).paths
    for agent in registry.all_agents():
        try:
            if agent.status(paths).installed:
                return True
        except Exception:  # its own check above already reported the unreadable config
            continue
    return False


def collect(ctx: Context) -> Iterator[Check]:
    from rltray.app.paths import Paths

    yield _python()
    try:
        service = ctx.service()
    except Exception as exc:  # the folder or the database will not open: say which, check the rest
        folder_only = _FolderOnly(Paths.from_env(ctx.env))
        yield _safely(_data_folder, folder_only)
        yield _unopened_database(exc)
        for check in (_spool, _hook_log, _config, _keyring):
            yield _safely(check, folder_only)
        yield Check("agents", WARN, "not checked: their last captured turn is in the database")
        yield from _training(ctx)
        return
    for check in (
        _data_folder, _database, _spool, _hook_log, _config, _hook_program, _ollama, _training_base
    ):
        yield _safely(check, service)
    yield from _agents_safely(service)
    from rltray.app.cli.doctor.agents import agent_version_checks

    yield from agent_version_checks()
    yield _safely(_keyring, service)
    from rltray.app.cli.doctor.desktop import desktop_checks

    yield from desktop_checks(ctx, service)
    yield from _training(ctx)
    yield from _remote_training(service)


class _FolderOnly:
    """What the checks that need no database read from a Service (the database would not open)."""

    def __init__(self, paths: Paths) -> None:
        self.paths = paths

    def pending_spool(self) -> int:
        return instance.count_records(self.paths.spool_incoming)

    def rejected_spool(self) -> int:
        return instance.count_records(self.paths.spool_rejected)




def _unopened_database(exc: Exception) -> Check:
    """The database check when opening failed: the one sentence and its fix, never a crash."""
    from rltray.app.errors import (
        DatabaseBusy,
        DatabaseDamaged,
        DataFolderNotWritable,
        UserError,
    )
    from rltray.app.store.migrations import SchemaTooNew

    if isinstance(exc, DataFolderNotWritable):
        return Check("database", FAIL, "not opened: the data folder is not writable (see above)")
    if isinstance(exc, DatabaseDamaged):
        return Check("database", FAIL, str(exc), REPAIR)
    if isinstance(exc, DatabaseBusy):
        return Check("database", FAIL, str(exc), "stop other rltray processes, then try again")
    if isinstance(exc, SchemaTooNew):
        return Check("database", FAIL, str(exc), "pip install --upgrade rltray")
    if isinstance(exc, UserError):
        return Check("database", FAIL, str(exc))
    return Check(
        "database",
        FAIL,
        f"cannot open: {type(exc).__name__}: {exc}",
        "run `rltray --debug doctor` and report the traceback as a bug",
    )


def _agents_safely(service: Service) -> Iterator[Check]:
    try:
        checks = list(_agents(service))
    except Exception as exc:  # e.g. the database broke after it opened
        checks = [Check("agents", FAIL, f"not checked: {exc}", "")]
    yield from checks


def repair(ctx: Context) -> int:
    """`rltray doctor --repair`: rebuild a damaged or lost database, then run every check."""
    from rltray.app.paths import Paths
    from rltray.app.store import repair as dbrepair

    report = dbrepair.repair(Paths.from_env(ctx.env))
    for line in report.lines():
        ctx.say(line)
    ctx.say("")
    code = run(ctx)
    return ExitCode.DATA if code == ExitCode.OK and not report.complete else code


def _safely(check: Callable[[Service], Check], service: Service) -> Check:
    try:
        return check(service)
    except Exception as exc:
        name = check.__name__.strip("_").replace("_", " ")
        return Check(
            name, FAIL, f"check crashed: {type(exc).__name__}: {exc}", "report this as a bug"
        )


def _python() -> Check:
    # No version check: pip refuses to install rltray on Python < 3.10.
    version = ".".join(map(str, sys.version_info[:3]))
    return Check("python", OK, f"{version} ({sys.executable})")


def _data_folder(service: Service) -> Check:
    """Writable, and private to the user; a warning only, rltray never changes the mode."""
    from rltray.app.errors import DataFolderNotWritable

    home = service.paths.home
    try:
        service.paths.ensure()
    except DataFolderNotWritable as exc:
        from rltray.app.paths import DataFolderNotSafe

        fix = ("run the command the message names" if isinstance(exc, DataFolderNotSafe)
               else f"make it writable or set RLTRAY_HOME ({home})")
        return Check("data folder", FAIL, str(exc), fix)
    if os.name == "posix":
        mode = stat.S_IMODE(home.stat().st_mode)
        if mode & 0o077:
            return Check(
                "data folder", WARN, f"{home} is mode {mode:o}, open to others", f"chmod 700 {home}"
            )
    return Check("data folder", OK, str(home))


def _database(service: Service) -> Check:
    from rltray.app.errors import DatabaseDamaged
    from rltray.app.store import backup as dbbackup

    store = service.store
    try:
        problem = store.integrity_check()
        if problem != "ok":
            return Check("database", FAIL, f"{store.path} is damaged: {problem}", REPAIR)
        detail = f"schema v{store.schema_version()}, {store.counts()['turns']} turns"
    except DatabaseDamaged as exc:
        return Check("database", FAIL, str(exc), REPAIR)
    found = dbbackup.backups(store.path)
    when = dbbackup.taken_at(found[0]) if found else None
    if when is None:
        return Check("database", OK, f"{detail}; no backup yet (one is taken each day)")
    age = datetime.now(timezone.utc) - when
    detail += f"; {len(found)} backup(s), newest {when:%Y-%m-%d %H:%M} UTC"
    if age > timedelta(days=BACKUP_STALE_DAYS):
        return Check(
            "database",
            WARN,
            f"{detail}, {age.days} days old",
            f"check free space and permissions of {dbbackup.folder(store.path)}",
        )
    return Check("database", OK, detail)


def _spool(service: Service) -> Check:
    pending, rejected = service.pending_spool(), service.rejected_spool()
    detail = f"{pending} waiting, {rejected} rejected"
    if rejected:
        return Check(
            "hook records",
            WARN,
            detail,
            f"read the .reason.txt files in {service.paths.spool_rejected}",
        )
    return Check("hook records", OK, detail)


def _hook_log(service: Service) -> Check:
    log = service.paths.hook_log
    if not log.exists():
        return Check("hook errors", OK, "none logged")
    lines = log.read_text("utf-8", errors="replace").splitlines()
    if not lines:
        return Check("hook errors", OK, "none logged")
    return Check("hook errors", WARN, f"{len(lines)} logged; last: {lines[-1][:120]}", f"see {log}")


def _config(service: Service) -> Check:
    problem = service.settings_problem()
    if problem is not None:
        return Check(
            "settings", FAIL, problem,
            f"fix or delete {service.paths.config}; until then rltray keeps its last valid "
            "settings and trains nothing on its own",
        )
    from rltray.app import config

    newer = config.from_newer(service.paths)
    if newer is not None:  # after a downgrade: left out, kept in the file
        return Check(
            "settings", WARN,
            f"{service.paths.config} was written by rltray {newer[0]}; this older rltray leaves "
            f"out its {', '.join(newer[1])} (kept in the file) and uses every other setting",
            f"upgrade to rltray {newer[0]} again, or delete those lines",
        )  # fmt: skip
    where = service.paths.config if service.paths.config.exists() else "defaults (no file yet)"
    return Check("settings", OK, str(where))


def _ollama(service: Service) -> Check:
    """The Ollama server answers and has the model versions are published on (stdlib HTTP)."""
    import json
    import urllib.error
    import urllib.request

    cfg = service.settings().ollama
    model = cfg.model.strip()
    if not model:
        return Check("ollama", OK, "not used: set ollama.model to publish each version there")
    host = cfg.host.rstrip("/")
    try:
        with urllib.request.urlopen(f"{host}/api/version", timeout=3) as r:
            version = json.load(r).get("version", "?")
    except (OSError, ValueError) as exc:
        return Check("ollama", FAIL, f"not reachable at {host} ({exc})",
                     "start Ollama (`ollama serve` or the app), or fix ollama.host")
    request = urllib.request.Request(
        f"{host}/api/show", data=json.dumps({"model": model}).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            details = json.load(r).get("details") or {}
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return Check("ollama", FAIL, f"{version} at {host}, but {model} is not installed",
                         f"ollama pull {model}")
        raise
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:3])
    path = "merged models" if numbers >= (0, 34, 1) else "base + GGUF adapter"
    return Check("ollama", OK, f"{version} at {host}; {model} "
                 f"({details.get('quantization_level', '?')}); versions go in as {path}")


def gguf_cache(dirs: Any = None) -> Path:
    """The trainer's GGUF cache folder (``rltray.trainer.gguf_base.cache_root``), found
    the same way here without importing the trainer (a test ties the two):
    ``$RLTRAY_GGUF_CACHE``, else the per-user cache folder, beside the data folder on
    Windows where platformdirs nests it inside."""
    override = os.environ.get("RLTRAY_GGUF_CACHE")
    if override:
        return Path(override).expanduser()
    if dirs is None:
        import platformdirs

        dirs = platformdirs.PlatformDirs("rltray", appauthor=False)
    cache, data = Path(dirs.user_cache_dir), Path(dirs.user_data_dir)
    if cache == data or data in cache.parents:
        cache = data.with_name(f"{data.name}-cache")
    return cache / "gguf-bases"


def _training_base(service: Service) -> Check:
    """training.base_model names something the trainer can load (``basemodel.problem``,
    offline); for a GGUF, where its HF copy goes and what the copy costs.

    Regression (issue 22): an empty or missing model showed "✓ training base" and
    failed only when a round started.
    """
    from rltray.app import basemodel

    value = service.settings().training.base_model
    if not value.strip():
        return Check("training base", WARN, "none chosen: nothing can be trained yet",
                     basemodel.WHERE_TO_CHOOSE)
    problem = basemodel.problem(value)
    if problem:
        return Check("training base", FAIL, problem.removeprefix(f"{basemodel.KEY}: "),
                     f"fix {basemodel.KEY}: {basemodel.WHERE_TO_CHOOSE}")
    base = Path(value).expanduser()
    if not base.is_file():
        return Check("training base", OK, basemodel.describe(value))
    cache = gguf_cache()
    used = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) if cache.is_dir() else 0
    free = shutil.disk_usage(cache if cache.is_dir() else cache.parent if cache.parent.is_dir()
                             else Path.home()).free
    return Check(
        "training base",
        OK if free > base.stat().st_size * 5 else WARN,
        f"{base.name}: converted once into {cache} (now {used / 1e9:.1f} GB there; a model "
        "takes about 2 bytes per parameter on disk, and 2-3 GB of memory while converting; "
        f"{free / 1e9:.0f} GB free)",
        "free disk space or set RLTRAY_GGUF_CACHE to a bigger disk",
    )


def _hook_program(service: Service) -> Check:
    """The interpreter the hook commands start exists, stays put, and runs capture.py.

    The installed commands come first: they hold absolute paths, so a moved or
    deleted clone (or its .venv) left hooks that start nothing and capture
    stopped without a word (issue 22).
    """
    from rltray.app import bundle
    from rltray.app.hooks import registry

    agents = registry.all_agents()
    for agent in agents:
        for installed in agent.status(service.paths).commands:
            gone = _missing_program(installed)
            if gone:
                return Check(
                    "hook program", FAIL,
                    f"{agent.display_name} hooks point at a missing program {gone}: "
                    "no turn is captured",
                    "run `rltray hooks install`",
                )  # fmt: skip
            unsafe = _unsafe_program(installed)
            if unsafe:
                return Check(
                    "hook program", FAIL,
                    f"{agent.display_name} hooks run {unsafe[0]}, but {unsafe[1]}: another user "
                    "of this computer could put a program there that runs as you",
                    f"{bundle.MOVE_IT}, then run `rltray hooks install` from there",
                )  # fmt: skip
    argv = agents[0].command("claude-stop", service.paths)
    problem = bundle.probe_hook_program(argv)
    if problem:
        return Check("hook program", FAIL, problem, "reinstall rltray, then `rltray hooks install`")
    unsafe = _unsafe_program(argv)
    if unsafe:
        return Check(
            "hook program", FAIL,
            f"{unsafe[0]}: {unsafe[1]}, so `rltray hooks install` refuses to point hooks at it "
            "(another user could put a program there that runs as you)",
            f"{bundle.MOVE_IT}, then run `rltray hooks install` from there",
        )  # fmt: skip
    stale = [a.display_name for a in agents if a.status(service.paths).stale]
    if stale:
        return Check(
            "hook program",
            WARN,
            f"{' and '.join(stale)} hooks start another Python or data folder than {argv[0]}",
            "rltray hooks install",
        )
    allowed = ""
    if any(bundle.unsafe_location(p) for p in (argv[0], argv[3])):  # only with the switch set
        allowed = f" (in a folder others can write: allowed by {bundle.ALLOW_UNSAFE_ENV}=1)"
    return Check("hook program", OK, f"{argv[0]} runs {argv[3]}{allowed}")


def _unsafe_program(argv: list[str]) -> tuple[str, str] | None:
    """The interpreter or capture.py of a hook command that another user could replace, and
    why (``bundle.unsafe_location``); None when both are safe or the user allowed it."""
    from rltray.app import bundle

    for program in argv[:1] + [a for a in argv[3:4] if a.endswith("capture.py")]:
        why = bundle.refused_location(program)
        if why:
            return program, why
    return None


def _missing_program(argv: list[str]) -> str | None:
    """The interpreter or capture.py of an installed hook command that is gone, or None."""
    python = argv[0] if argv else ""
    if not python or not Path(python).is_file() or not os.access(python, os.X_OK):
        return python or "(an empty command)"
    script = argv[3] if len(argv) > 3 and argv[3].endswith("capture.py") else None
    if script is not None and not Path(script).is_file():
        return script
    return None


def _agents(service: Service) -> Iterator[Check]:
    from rltray.app.hooks import registry

    arrived = service.status()["agents"]
    for agent in registry.all_agents():
        try:
            status = agent.status(service.paths)
        except Exception as exc:
            yield Check(agent.display_name, FAIL, f"cannot read its config: {exc}", "")
            continue
        last = arrived.get(agent.name, {}).get("last_event_at")
        notes = "; ".join(status.notes)
        if not status.installed:
            found = agent.detect()
            state = WARN if found else OK
            detail = "hooks not installed" + ("" if found else " (agent not found)")
            yield Check(
                agent.display_name, state, detail, f"rltray hooks install --agent {agent.name}"
            )
        elif last is None:
            yield Check(
                agent.display_name,
                WARN,
                f"hooks installed, no turn captured yet. {notes}".strip(),
                "finish one turn in the agent, then run `rltray status`",
            )
        else:
            yield Check(
                agent.display_name, OK, f"hooks installed; last turn at {last}. {notes}".strip()
            )


def _remote_training(service: Service) -> Iterator[Check]:
    """The remote training machine, step by step, when one is set (issue 26)."""
    from rltray.app.training import remote

    try:
        training = service.settings().training
    except Exception:  # the config check above already says why it cannot be read
        return
    if not remote.enabled(training):
        return
    from rltray.app.training.remote import check

    fix = "see `rltray remote check` and the README's remote training section"
    for name, ok, said in check.run(training):
        yield Check(f"remote {name}", OK if ok else FAIL, said, "" if ok else fix)


def _keyring(service: Service) -> Check:
    from rltray.app import secrets

    try:
        backend = secrets.backend_name()
        secrets.get_secret("api-token")
    except secrets.SecretsUnavailable as exc:
        return Check("keyring", WARN, str(exc), "install/unlock GNOME Keyring or KWallet")
    return Check("keyring", OK, backend)


def _training(ctx: Context) -> Iterator[Check]:
    """The Python that trains: the configured one (a trainer environment), or this one.

    A bundle's own interpreter never trains, and a set ``training.python`` is what a round
    starts: asking this Python for torch there said `pip install 'rltray[torch]'` to a
    user whose trainer environment worked (review 3, finding 5). Then the self-test's
    probe of that interpreter answers (``selftest.trainer_environment``).
    """
    from rltray.app import bundle, config
    from rltray.app.paths import Paths

    try:
        python = config.load_config(Paths.from_env(ctx.env)).training.python.strip()
    except Exception:  # the config check above already says why it cannot be read
        python = ""
    if not python and not bundle.frozen():
        yield from _training_backends()
        return
    from rltray.app.cli.selftest import trainer_environment

    name = "training: trainer environment"
    try:
        state, detail = trainer_environment(ctx.env)
    except Exception as exc:  # a probe that could not run is that check failing, not doctor
        state, detail = WARN, f"not checked: {type(exc).__name__}: {exc}"
    yield Check(name, OK if state == "ok" else WARN, detail,
                "" if state == "ok" else "rltray trainer-env create")  # fmt: skip


def _training_backends() -> Iterator[Check]:
    """Each backend this Python could train with (find_spec only: importing torch here
    would cost seconds and gigabytes); one that cannot run on this platform is left out."""
    from rltray.app.training.backends import BACKENDS

    for backend in BACKENDS.values():
        name = f"training: {backend.name}"
        missing = backend.missing()
        if not missing:
            yield Check(name, OK, ", ".join(backend.requires) + " are installed")
        elif not backend.platforms or sys.platform in {p for p, _ in backend.platforms}:
            fix = f"pip install 'rltray[{backend.extra}]'"
            yield Check(name, WARN, "missing " + ", ".join(missing), fix)
