"""A hook's argv spelled as the one command string each agent's shell runs, per OS.

Why one module: the agents hand a hooks.json ``command`` to different shells, and a
string right for one is broken in another (issue 23 item 9):

* Claude Code runs it with bash: ``/bin/sh``-style on Linux and macOS, **Git Bash** on
  Windows. Bash treats ``\\`` as an escape, so a Windows path written for cmd.exe
  (``C:\\Users\\me\\.venv\\Scripts\\python.exe``) reaches it as ``C:Usersme.venv...``
  ("command not found"), and an unquoted ``--home C:\\...`` turns into a path relative
  to the current drive's folder. So on Windows every path gets forward slashes
  (Git Bash and Python take ``C:/Users/...``) and POSIX single quotes (``shlex``).
* Codex runs it as ``%COMSPEC% /C <command>`` (``codex-rs/hooks/src/engine/
  command_runner.rs``), passing the string as one argument through Rust's Windows
  argument escaping, which turns every ``"`` into ``\\"``; cmd.exe does not read
  ``\\"`` as a quote, so a quoted path never starts. So on Windows the Codex string
  has no quotes at all: a path that would need them (spaces, or characters cmd.exe or
  PowerShell read as syntax) is replaced by its short 8.3 form (``GetShortPathNameW``),
  in Windows' own backslashes, which cmd.exe and PowerShell take as they are (cmd.exe
  can read a ``/`` as the start of a switch). Where a drive keeps no short names and
  the path still needs quotes, ``problem`` says so in one sentence.

On Linux and macOS both agents use a POSIX shell (Codex: ``$SHELL -lc``), so both
strings are ``shlex.join``. ``split`` reads a string back the way that agent's shell
would, so ``rltray doctor`` checks the program the agent will really start, and
``runner`` is how the agent starts it, so ``rltray --selftest`` runs it the same way.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import PureWindowsPath

BASH = "bash"  # Claude Code: /bin/sh or bash; Git Bash on Windows
CMD = "cmd"  # Codex: %COMSPEC% /C on Windows (Rust argument escaping); $SHELL -lc elsewhere

# Characters cmd.exe or PowerShell read as syntax in an unquoted word (cmd.exe also
# splits words at , ; =). A short 8.3 name has none of them.
_CMD_UNSAFE = frozenset(" \t\"'&|<>^%!(),;=$`{}@#")
_WINDOWS_PATH = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def spell(
    argv: Sequence[str],
    shell: str,
    os_name: str = os.name,
    shorten: Callable[[str], str] | None = None,
) -> str:
    """The command string for an agent whose hooks run through ``shell`` on ``os_name``.

    ``shorten`` maps a Windows path to its short form (default: ``short_path``); it
    is a parameter so the choice is tested on any OS.
    """
    if os_name != "nt":
        return shlex.join(argv)
    if shell == BASH:
        return shlex.join([forward_slashes(arg) for arg in argv])
    short = shorten or short_path
    return " ".join(short(arg) if needs_quotes(arg) else arg for arg in argv)


def split(command: str, shell: str, os_name: str = os.name) -> list[str]:
    """``spell`` in reverse: a command string as that agent's shell splits it into words.

    An entry written by an older rltray with Windows quoting reads back as bash would
    read it (backslashes eaten), which is what Claude Code would try to start.
    """
    try:
        if os_name != "nt" or shell == BASH:
            return shlex.split(command)
        return [part.strip('"') for part in shlex.split(command, posix=False)]
    except ValueError:
        return []


def problem(
    argv: Sequence[str],
    shell: str,
    os_name: str = os.name,
    shorten: Callable[[str], str] | None = None,
) -> str | None:
    """One sentence when ``spell`` cannot give a string the shell runs as meant, else None."""
    if os_name != "nt" or shell != CMD:
        return None
    short = shorten or short_path
    stuck = [arg for arg in argv if needs_quotes(arg) and needs_quotes(short(arg))]
    if not stuck:
        return None
    return (
        f"Codex runs hooks through cmd.exe, which cannot start them from {stuck[0]} (its path "
        "would need quotes and this drive keeps no short 8.3 names); move rltray and its data "
        "folder (RLTRAY_HOME) to folders without spaces, then run `rltray hooks install` again. "
        "Until then rltray captures Codex turns through `notify`."
    )


def runner(
    shell: str,
    env: Mapping[str, str],
    os_name: str = os.name,
    which: Callable[[str], str | None] | None = None,
    is_file: Callable[[str], bool] = os.path.isfile,
) -> list[str] | None:
    """The argv an agent puts before a hook command string; None when its shell is missing.

    ``which(name)`` finds a program on ``env``'s PATH; ``which`` and ``is_file`` are
    parameters so the Windows choice is tested anywhere.
    """
    find = which or (lambda name: shutil.which(name, path=env.get("PATH")))
    if os_name != "nt":
        if shell == BASH:
            return [find("bash") or "/bin/sh", "-c"]
        return [env.get("SHELL") or "/bin/sh", "-lc"]
    if shell == CMD:
        return [env.get("COMSPEC") or "cmd.exe", "/C"]
    bash = git_bash(env, find, is_file)
    return [bash, "-c"] if bash else None


def git_bash(
    env: Mapping[str, str],
    which: Callable[[str], str | None],
    is_file: Callable[[str], bool] = os.path.isfile,
) -> str | None:
    """Git for Windows' bash.exe, found as Claude Code finds it; None without Git.

    Claude Code's override ``CLAUDE_CODE_GIT_BASH_PATH`` first, then the bash beside
    ``git.exe`` on PATH (``Git\\cmd\\git.exe`` -> ``Git\\bin\\bash.exe``), then
    the default install folders. A ``bash`` in System32 is WSL's launcher: never it.
    """
    candidates = [env.get("CLAUDE_CODE_GIT_BASH_PATH") or ""]
    git = which("git")
    if git:
        root = PureWindowsPath(git).parent.parent
        candidates += [str(root / "bin" / "bash.exe"), str(root / "usr" / "bin" / "bash.exe")]
    # os.environ spells Windows' variable names in capitals; a hand-made env may not
    folders = [env.get(name) or env.get(name.upper()) for name in ("ProgramFiles", "ProgramW6432")]
    for folder in (*folders, r"C:\Program Files"):
        if folder:
            candidates.append(str(PureWindowsPath(folder) / "Git" / "bin" / "bash.exe"))
    found = which("bash")
    if found and "system32" not in found.lower():
        candidates.append(found)
    return next((c for c in candidates if c and is_file(c)), None)


def needs_quotes(arg: str) -> bool:
    """True when cmd.exe or PowerShell would not read ``arg`` as one plain word."""
    return not arg or any(c in _CMD_UNSAFE for c in arg)


def forward_slashes(arg: str) -> str:
    r"""``C:\Users\me`` -> ``C:/Users/me`` (and ``\\server\share`` -> ``//server/share``);
    any other word as it is."""
    return arg.replace("\\", "/") if _WINDOWS_PATH.match(arg) else arg


def short_path(path: str) -> str:  # pragma: no cover - Windows only (kernel32)
    """``path`` with every folder and file name in its 8.3 form where the drive keeps one.

    GetShortPathNameW needs an existing path, so a tail that does not exist yet (a data
    folder made later) is shortened as far as it exists and the rest kept as written.
    """
    if os.name != "nt":
        return path
    import ctypes

    get_short = ctypes.windll.kernel32.GetShortPathNameW  # type: ignore[attr-defined]
    head, tail = path, ""
    while head and not os.path.exists(head):
        head, name = os.path.split(head)
        if not name:
            return path
        tail = os.path.join(name, tail) if tail else name
    size = get_short(head, None, 0)
    if not head or size == 0:
        return path
    buffer = ctypes.create_unicode_buffer(size)
    if get_short(head, buffer, size) == 0:
        return path
    return os.path.join(buffer.value, tail) if tail else buffer.value
