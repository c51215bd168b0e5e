"""`rltray --selftest`: does every part of this installation work here? One line per part.

Why it exists: an installed bundle can be complete on the build machine and
broken on a user's (a missing system library, no notification server, no
keyring, a hook interpreter that moved). Each part is exercised for real, not
looked up: the store answers an integrity check, a notification is sent, the
tray icon is shown and taken down, the settings web server answers a request,
and each agent's hook commands are run exactly as that agent runs them (Claude
Code through bash, Codex through cmd.exe on Windows) until its turn is in a
database. Parts that could disturb the user's data (tray, web, hook) run
against a scratch data folder that is deleted afterwards, so a running rltray
is never in the way.

Required parts fail the exit status; the keyring and the trainer environment
only inform (rltray works without them, and their line says what to do).
Notifications and the tray are required only where a desktop session exists.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rltray.app.errors import ExitCode

if TYPE_CHECKING:
    from rltray.app.cli.context import Context
    from rltray.app.hooks.base import Agent
    from rltray.app.runtime import Runtime
    from rltray.app.service import Service

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
MARKS = {OK: ("✓", "green"), WARN: ("!", "yellow"), FAIL: ("✗", "red"), SKIP: ("-", "dim")}
TRAY_TIMEOUT_S = 20.0
NOTIFY_TIMEOUT_S = 10.0
HOOK_TIMEOUT_S = 10.0  # what the agents allow our hook (hooks/base.HOOK_TIMEOUT_S)
PROMPT = "rltray self-test: add two numbers"
ANSWER = "def add(a, b):\n    return a + b"
HOOK_EVENTS = {  # agent -> its (prompt, stop) hook events, run in that order
    "claude-code": ("claude-prompt", "claude-stop"),
    "codex": ("codex-prompt", "codex-stop"),
}


@dataclass(frozen=True)
class Part:
    name: str
    state: str
    detail: str
    required: bool
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.required and self.state == FAIL


def run(ctx: Context) -> int:
    """Print one line per part as it finishes; non-zero when a required part failed."""
    failed = False
    started = time.monotonic()
    for part in parts(ctx.env):
        mark, style = MARKS[part.state]
        ctx.say((mark, style), f" {part.name}: ", part.detail, (f" ({part.seconds:.1f} s)", "dim"))
        failed = failed or part.failed
    ctx.say(f"self-test finished in {time.monotonic() - started:.1f} s", err=True)
    return ExitCode.NOT_AVAILABLE if failed else ExitCode.OK


def parts(env: dict[str, str]) -> Iterator[Part]:
    desktop = has_desktop(env)
    yield _timed("store", True, lambda: store(env))
    yield _timed("keyring", False, keyring)
    yield _timed("notifications", desktop, notifications)
    with scratch_runtime(env) as runtime:
        yield _timed("hook program", True, lambda: hook_program(runtime.service, env))
        yield _timed("web server", True, lambda: web_server(runtime))
        yield _timed("tray", desktop, lambda: tray(runtime, env))
    yield _timed("trainer environment", False, lambda: trainer_environment(env))


def has_desktop(env: dict[str, str]) -> bool:
    """A session with a display and a session bus (Linux); macOS and Windows always have one."""
    if not sys.platform.startswith("linux"):
        return True
    display = env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")
    return bool(display and env.get("DBUS_SESSION_BUS_ADDRESS"))


def _timed(name: str, required: bool, check: Callable[[], tuple[str, str]]) -> Part:
    started = time.monotonic()
    try:
        state, detail = check()
    except Exception as exc:  # a crashing probe is that part failing, never the whole test
        state, detail = FAIL, f"{type(exc).__name__}: {exc}"
    if state == FAIL and not required:
        state = WARN
    return Part(name, state, detail, required, time.monotonic() - started)


# -- the parts ------------------------------------------------------------------


def store(env: dict[str, str]) -> tuple[str, str]:
    """The user's own database opens and passes SQLite's integrity check."""
    from rltray.app.paths import Paths
    from rltray.app.store import Store

    paths = Paths.from_env(env)
    paths.ensure()
    with Store(paths.db) as db:
        problem = db.integrity_check()
        if problem != "ok":
            return FAIL, f"{paths.db} is damaged: {problem}; run `rltray doctor --repair`"
        return OK, f"schema v{db.schema_version()}, {db.counts()['turns']} turns in {paths.db}"


def keyring() -> tuple[str, str]:
    from rltray.app import secrets

    try:
        backend = secrets.backend_name()
        secrets.get_secret("api-token")
    except secrets.SecretsUnavailable as exc:
        return WARN, str(exc)
    return OK, backend


def notifications() -> tuple[str, str]:
    """A real test notification, accepted by the desktop's notification server."""
    from rltray.app.desktop.notifier import Notifier

    notifier = Notifier(lambda *_: None, dispatch_timeout=NOTIFY_TIMEOUT_S)
    try:
        notifier.start().result(NOTIFY_TIMEOUT_S)
        delivered = notifier.send_test().result(NOTIFY_TIMEOUT_S + 5)
        problems = notifier.delivery_problems()
    finally:
        notifier.close()
    if not delivered:
        return FAIL, " ".join(problems) or "the notification server did not accept the test"
    if problems:
        return WARN, "delivered, but " + " ".join(problems)
    return OK, "a test notification was delivered"


def hook_program(service: Service, env: dict[str, str]) -> tuple[str, str]:
    """Each agent's installed hook commands, run the way that agent runs them, store a turn.

    Claude Code hands its command strings to bash (Git Bash on Windows), Codex to
    cmd.exe /C (``$SHELL -lc`` elsewhere): a string one shell runs can start nothing in
    the other (issue 23 item 9), so each agent's pair goes through its own shell
    (``shellcommand.runner``). Python's Windows argument quoting is the same as Codex's
    (Rust's), so cmd.exe here meets exactly what it meets there.
    """
    from rltray.app.hooks import registry, shellcommand

    said, slow, skipped = [], 0.0, []
    for name, (prompt_event, stop_event) in HOOK_EVENTS.items():
        agent = registry.get(name, env=env)
        shell = shellcommand.runner(agent.shell, env)
        if shell is None:
            skipped.append(f"{agent.display_name} runs hooks through Git Bash, and none was found")
            continue
        failed, seconds = _run_agent_hooks(service, agent, shell, prompt_event, stop_event, env)
        if failed:
            return FAIL, f"{agent.display_name}: {failed}"
        slow = max(slow, seconds)
        said.append(f"{agent.display_name} through {Path(shell[0]).name}")
    if not said:
        return FAIL, "; ".join(skipped)
    interpreter = registry.get("claude-code", env=env).command("claude-stop", service.paths)[0]
    detail = (f"captured a turn for {' and '.join(said)} via {interpreter} "
              f"({slow * 1000:.0f} ms per event)")
    if skipped:
        return WARN, f"{detail}; {'; '.join(skipped)}"
    return OK, detail


def _run_agent_hooks(
    service: Service, agent: Agent, shell: list[str], prompt_event: str, stop_event: str,
    env: dict[str, str],
) -> tuple[str | None, float]:
    """(what went wrong or None, seconds per event) for one agent's prompt and stop hooks."""
    from rltray.app.hooks import shellcommand

    session = {"session_id": f"rltray-selftest-{agent.name}", "cwd": str(service.paths.home),
               "turn_id": "rltray-selftest-turn"}  # fmt: skip
    payloads = {
        prompt_event: {**session, "hook_event_name": "UserPromptSubmit", "prompt": PROMPT},
        stop_event: {**session, "hook_event_name": "Stop", "stop_hook_active": False,
                     "last_assistant_message": ANSWER},
    }  # fmt: skip
    started = time.monotonic()
    for event, payload in payloads.items():
        argv = agent.command(event, service.paths)
        problem = shellcommand.problem(argv, agent.shell)
        if problem:
            return problem, 0.0
        command = shellcommand.spell(argv, agent.shell)
        done = subprocess.run(
            [*shell, command],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=HOOK_TIMEOUT_S,
            env=env,
        )
        if done.returncode != 0:
            return f"`{command}` exited {done.returncode}: {done.stderr.strip()[-200:]}", 0.0
    per_event = (time.monotonic() - started) / 2
    service.ingest()
    turn = service.store.newest_turn(agent=agent.name)
    if turn is None or turn.prompt != PROMPT or turn.response != ANSWER:
        log = service.paths.hook_log
        said = log.read_text("utf-8", "replace").strip()[-300:] if log.exists() else "nothing"
        return f"the hook ran through {shell[0]} but stored no turn; its log says: {said}", 0.0
    return None, per_event


def web_server(runtime: Runtime) -> tuple[str, str]:
    """The settings app answers its launch link with a page, as the window would open it."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no access log lines in the report
    url = runtime.settings_url()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    with opener.open(url, timeout=10) as response:
        status, kind = response.status, response.headers.get("Content-Type", "")
        where = response.url
    if status != 200 or "html" not in kind:
        return FAIL, f"{where} answered {status} {kind}"
    return OK, f"{where.split('/launch')[0]} answered {status} ({kind.split(';')[0]})"


def tray(runtime: Runtime, env: dict[str, str]) -> tuple[str, str]:
    """Show the tray icon, see the desktop's tray take it (Linux), then remove it.

    Runs on this (the main) thread, as the tray must. On Linux the icon counts
    as shown once the StatusNotifierWatcher lists one more item than before.
    """
    from rltray.app.tray import Tray, why_no_tray

    reason = why_no_tray(env)
    if reason is not None:
        return FAIL, f"no tray icon: {reason}"
    address = env.get("DBUS_SESSION_BUS_ADDRESS") if sys.platform.startswith("linux") else None
    before = registered_tray_items(address) if address else None
    icon = Tray(runtime)
    outcome: list[tuple[str, str]] = []

    def ready(tray: Tray) -> None:
        try:
            outcome.append(_seen_by_the_desktop(address, before))
        finally:
            tray.stop()

    watchdog = threading.Timer(TRAY_TIMEOUT_S, icon.stop)
    watchdog.daemon = True
    watchdog.start()
    try:
        icon.run(ready)
    finally:
        watchdog.cancel()
    if not outcome:
        return FAIL, f"the icon did not appear within {TRAY_TIMEOUT_S:.0f} s"
    backend = type(icon.icon).__module__.rsplit(".", 1)[-1].lstrip("_")
    state, detail = outcome[0]
    return state, f"{detail} ({backend} backend)"


def _seen_by_the_desktop(address: str | None, before: list[str] | None) -> tuple[str, str]:
    if address is None:
        return OK, "shown and removed"
    if before is None:
        return WARN, (
            "shown and removed, but this desktop draws no tray icons (nothing owns "
            "org.kde.StatusNotifierWatcher; on GNOME that needs the AppIndicator extension)"
        )
    deadline = time.monotonic() + TRAY_TIMEOUT_S / 2
    while time.monotonic() < deadline:
        now = registered_tray_items(address)
        if now is not None and len(now) > len(before):
            return OK, "shown in the desktop's tray and removed"
        time.sleep(0.05)
    return FAIL, "the desktop's tray (StatusNotifierWatcher) never received the icon"


def registered_tray_items(address: str) -> list[str] | None:
    """The StatusNotifierWatcher's RegisteredStatusNotifierItems; None without a watcher."""
    from rltray.app.desktop import dbus as dbusquery

    watcher = "org.kde.StatusNotifierWatcher"
    reply = dbusquery.call(
        address, watcher, "/StatusNotifierWatcher", "org.freedesktop.DBus.Properties", "Get",
        "ss", [watcher, "RegisteredStatusNotifierItems"],
    )  # fmt: skip
    return None if reply is None else list(reply[0].value)


def trainer_environment(env: dict[str, str]) -> tuple[str, str]:
    """Informational: which Python trains, and whether it has its backend's library."""
    from rltray.app import bundle, childpython, config
    from rltray.app.paths import Paths
    from rltray.app.training import backends

    training = config.load_config(Paths.from_env(env)).training
    module = backends.resolve(training.backend).library
    python = training.python.strip()
    if not python:
        if not bundle.frozen() and importlib.util.find_spec(module) is not None:
            return OK, f"rltray's own Python trains ({sys.executable} has {module})"
        return WARN, "not set up; run `rltray trainer-env create` (or Set up training)"
    if not Path(python).is_file():
        return WARN, f"{python} is gone; run `rltray trainer-env create` to rebuild it"
    code = f"import importlib.util as u, sys; sys.exit(u.find_spec({module!r}) is None)"
    probe = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        timeout=30,
        **childpython.options(env),  # a private cwd: nothing planted where rltray was started
    )
    if probe.returncode != 0:
        return WARN, f"{python} has no {module}; run `rltray trainer-env create` to repair it"
    from rltray.app.training.trainerenv import stamp

    # an environment built before an upgrade (review 3, finding 3), and what the next round
    # does about it: updates it, runs with the old trainer, or fails (review 4, item 1)
    old = stamp.outlook(python)
    if old:
        return WARN, f"{python} has {module}, but {old}"
    return OK, f"{python} (has {module})"


# -- the scratch data folder ------------------------------------------------------


@contextmanager
def scratch_runtime(env: dict[str, str]) -> Iterator[Runtime]:
    """A started rltray on a throwaway data folder (no notifications, scheduler or API)."""
    from rltray.app.paths import Paths
    from rltray.app.runtime import compose
    from rltray.app.service import Service
    from rltray.web.server import SettingsWeb

    folder = Path(tempfile.mkdtemp(prefix="rltray-selftest-"))
    service = Service(Paths(folder))
    runtime = None
    try:
        runtime = compose(service, SettingsWeb(), notifications=False, scheduler=False, api=False)
        yield runtime
    finally:
        if runtime is not None:
            runtime.close()
        service.close()
        shutil.rmtree(folder, ignore_errors=True)
