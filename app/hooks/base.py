"""The one small interface every coding agent implements (agents are plugins).

The CLI, the doctor and the settings page only ever talk to ``Agent``:
``detect``, ``install``, ``uninstall``, ``status``. Supporting a third agent
means one new module with an ``Agent`` subclass and one line in
``registry.py``; nothing else in rltray needs to know its config format.

How the hook command line looks is owned by ``capture.build_command`` (the
hook program itself), so installers never duplicate that format; how that argv
becomes a JSON ``command`` string is the agent's shell's business
(``shellcommand.py``: bash for Claude Code, cmd.exe for Codex on Windows). This
module recognises our own entries again, whatever Python or data folder they
were written with.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from rltray.app.errors import ExitCode, UserError
from rltray.app.hooks import shellcommand
from rltray.app.paths import Paths

HOOK_TIMEOUT_S = 10  # seconds an agent waits for our hook; it normally takes ~30 ms

# `.../capture.py --home ...`: the marker of an rltray hook command, in a shell
# string (POSIX or Windows quoting) or an argv list joined with spaces.
_VERSION = re.compile(r"\b\d+\.\d+\.\d+\b")
_OURS = re.compile(r"""(?:^|[\\/'" ])capture\.py['"]?\s+['"]?--home(?:\s|=|['"])""")


class HookInstallError(UserError):
    """An agent config rltray refuses to edit (malformed, a symlink, ...); one sentence."""


class AgentNotFound(UserError):
    exit_code = ExitCode.USAGE


@dataclass
class InstallReport:
    """What install/uninstall did, for people (``lines``) and for code (``changed``)."""

    agent: str
    lines: list[str] = field(default_factory=list)
    changed: list[Path] = field(default_factory=list)
    backups: list[Path] = field(default_factory=list)

    def extend(self, other: InstallReport) -> None:
        self.lines += other.lines
        self.changed += other.changed
        self.backups += other.backups


@dataclass
class AgentStatus:
    """Which of rltray's pieces an agent's config holds right now.

    ``installed`` is true only when every piece is there. ``stale`` means an
    entry is ours but points at another Python, capture.py or data folder
    (install again). ``hooks_disabled`` means the agent is told to run no hooks.
    ``commands``: the argv of each of our entries as installed, so doctor can see
    that the program they start still exists (a moved clone silently stops
    capture). Whether events actually arrive is the store's business, keyed by ``name``.
    """

    name: str
    display_name: str
    detected: bool
    installed: bool
    pieces: dict[str, bool]
    config_files: list[Path]
    notes: list[str] = field(default_factory=list)
    stale: bool = False
    hooks_disabled: bool = False
    commands: list[list[str]] = field(default_factory=list)


class Agent(ABC):
    """A coding agent rltray can capture turns from.

    ``name`` is the value the hook writes into spool records' ``agent`` field
    and the store's ``by_agent`` keys, so the CLI can join status with arrivals.
    ``env`` (default: ``os.environ``) and ``python`` (default: the interpreter
    ``capture.build_command`` picks) are parameters so tests and the packaged
    app can say exactly which environment and interpreter the hook will use.
    """

    name: ClassVar[str]
    display_name: ClassVar[str]
    executable: ClassVar[str]  # the agent's command-line program, used by detect()
    # (oldest, newest) release the real-program tests (tests/agents/) ran: hook formats
    # change between releases, so doctor says when the installed one is newer.
    verified: ClassVar[tuple[str, str]]
    # The shell the agent hands a hooks.json ``command`` to (shellcommand.BASH or CMD):
    # it decides how the command string is spelled on Windows.
    shell: ClassVar[str]

    def __init__(self, env: Mapping[str, str] | None = None, python: str | None = None) -> None:
        self._env = env
        self.python = python

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self._env is None else self._env

    def home_dir(self) -> Path:
        """The user's home folder as this agent would compute it."""
        home = self.env.get("HOME") or self.env.get("USERPROFILE")
        return Path(home) if home else Path.home()

    @abstractmethod
    def config_home(self) -> Path:
        """The agent's user config folder (honouring its own override variable)."""

    def detect(self) -> bool:
        """True when the agent seems installed: its config folder or its program exists."""
        path = self.env.get("PATH") if self._env is not None else None
        return self.config_home().is_dir() or shutil.which(self.executable, path=path) is not None

    @abstractmethod
    def install(self, paths: Paths) -> InstallReport:
        """Merge rltray's hooks into the agent's config (idempotent, backed up, atomic)."""

    @abstractmethod
    def uninstall(self, paths: Paths) -> InstallReport:
        """Remove exactly what install added (byte-for-byte restore when untouched since)."""

    @abstractmethod
    def status(self, paths: Paths) -> AgentStatus:
        """Which pieces are installed, which files hold them, and what the user should know."""

    def command(self, event: str, paths: Paths, chain: Sequence[str] | None = None) -> list[str]:
        """The hook's argv for ``event``, exactly as the hook program defines it."""
        from rltray.app import bundle
        from rltray.app.hooks import capture

        # In a frozen bundle the interpreter is the app's own executable (it runs
        # `-I -S capture.py` like a Python), so hooks survive without a system Python.
        python = self.python or bundle.hook_interpreter()
        return list(capture.build_command(event, paths.home, python=python, chain=chain))

    def unsafe_program(self, paths: Paths, env: Mapping[str, str] | None = None) -> str | None:
        """One sentence refusing to install when the hook's interpreter or capture.py sits
        where another user could replace it (``bundle.location_refusal``); None when safe.

        Every hook runs that program as the user at each agent turn, so a path in /tmp
        or a folder others can write is code execution for them once it is gone
        (review 3, finding 1). The faces (`rltray hooks install`, the setup wizard) ask
        this before ``install``; ``install`` itself stays a plain config edit.
        """
        from rltray.app import bundle

        argv = self.command("claude-stop", paths)
        for program in dict.fromkeys((argv[0], argv[3])):
            said = bundle.location_refusal(program, "point agent hooks at", env)
            if said:
                return said
        return None

    def handlers(self, events: Mapping[str, str], paths: Paths) -> dict[str, dict[str, object]]:
        """The exact handler objects for a hooks.json-shaped file: agent event -> handler."""
        return {
            event: {
                "type": "command",
                "command": shellcommand.spell(self.command(arg, paths), self.shell),
                "timeout": HOOK_TIMEOUT_S,
            }
            for event, arg in events.items()
        }

    def shell_problem(self, events: Mapping[str, str], paths: Paths) -> str | None:
        """One sentence when this agent's shell cannot run the hook commands as spelled."""
        for arg in events.values():
            said = shellcommand.problem(self.command(arg, paths), self.shell)
            if said:
                return said
        return None

    def split_command(self, command: object) -> list[str]:
        """An installed command as the argv this agent's shell starts (``command_argv``)."""
        return command_argv(command, self.shell)

    def installed_version(self, timeout: float = 5.0) -> str | None:
        """The ``x.y.z`` that ``<executable> --version`` prints; None when it is not there."""
        path = self.env.get("PATH") if self._env is not None else None
        program = shutil.which(self.executable, path=path)
        if program is None:
            return None
        try:
            done = subprocess.run([program, "--version"], capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL, env=dict(self.env))
        except (OSError, subprocess.TimeoutExpired):
            return None
        found = _VERSION.search(done.stdout or "")
        return found.group(0) if found else None

    def version_note(self, version: str) -> str | None:
        """One sentence when ``version`` is outside the verified range, else None."""
        oldest, newest = self.verified
        span = oldest if oldest == newest else f"{oldest} to {newest}"
        if version_key(version) > version_key(newest):
            return (f"{self.display_name} {version} is newer than the versions rltray was "
                    f"verified with ({span}); if turns or /rl stop arriving, tell rltray.")
        if version_key(version) < version_key(oldest):
            return (f"{self.display_name} {version} is older than the versions rltray was "
                    f"verified with ({span}); update it.")
        return None

    def not_found_report(self) -> InstallReport:
        return InstallReport(
            self.name,
            [
                f"{self.display_name} not found ({self.config_home()} is missing and "
                f"`{self.executable}` is not on PATH); nothing installed. Install it, then run "
                f"`rltray hooks install --agent {self.name}`."
            ],
        )


def refuse_unsafe_program(
    agents: Sequence[Agent], paths: Paths, env: Mapping[str, str] | None = None
) -> None:
    """Raise ``HookInstallError`` (nothing written) when any of ``agents`` would point its
    hooks at a program others could replace (``Agent.unsafe_program``)."""
    for agent in agents:
        said = agent.unsafe_program(paths, env)
        if said:
            raise HookInstallError(said, ExitCode.NOT_AVAILABLE)


def version_key(version: str) -> tuple[int, ...]:
    """``"2.1.197"`` -> ``(2, 1, 197)`` for comparing releases."""
    return tuple(int(part) for part in version.split("."))


def join_command(argv: Sequence[str]) -> str:
    """An argv as one line for people to read (a chained notify program), quoted for this
    OS's own shell; hooks.json commands are spelled by ``shellcommand.spell`` instead."""
    return subprocess.list2cmdline(list(argv)) if os.name == "nt" else shlex.join(argv)


def command_argv(command: object, shell: str = shellcommand.CMD) -> list[str]:
    """An installed command as an argv: a JSON ``command`` string split as the agent's
    ``shell`` would (``shellcommand.split``), an argv list (Codex's notify) as it is."""
    if isinstance(command, (list, tuple)):
        return [str(part) for part in command]
    if not isinstance(command, str):
        return []
    return shellcommand.split(command, shell)


def is_rltray_command(command: object) -> bool:
    """True when a command string or argv list runs rltray's capture.py hook.

    The marker ``capture.py --home`` and, last, one of the hook program's own event
    names: a user's own script that happens to be called capture.py and take a --home
    (a notes tool, say) is theirs, never replaced or removed as ours.
    """
    from rltray.app.hooks import capture_core

    if isinstance(command, (list, tuple)):
        if not all(isinstance(part, str) for part in command):
            return False
        command = " ".join(command)
    if not isinstance(command, str) or _OURS.search(command) is None:
        return False
    words = command.split()
    return bool(words) and capture_core.is_event(words[-1].strip("'\""))
