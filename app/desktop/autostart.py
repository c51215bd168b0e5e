"""Start rltray at login: an XDG autostart entry, a LaunchAgent, or a Windows Run key.

Each OS has one documented per-user place that needs no admin rights; rltray
writes exactly one entry there, recognises it again by name, and removes only
what it wrote. The command is resolved now (this interpreter's ``rltray``) so
a login never depends on PATH, which login sessions set differently.
"""

from __future__ import annotations

import os
import plistlib
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from rltray.app import bundle
from rltray.app.errors import UserError
from rltray.app.fileio import write_private_atomic
from rltray.app.paths import make_folders

RESERVED = ' \t\n"\'\\><~|&;$*?#()`'  # Exec characters that need quoting
LABEL = "dev.rltray.tray"  # LaunchAgent label and file name
RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
RUN_VALUE = "rltray"


@dataclass(frozen=True)
class AutostartStatus:
    enabled: bool
    where: str  # the file or registry value that holds the entry
    command: list[str] | None  # what login runs, when enabled
    problem: str | None = None  # e.g. the command no longer exists
    unsafe: str | None = None  # why its program's folder is open to others (doctor fails it)


def command(
    os_name: str = os.name, executable: str = sys.executable, frozen: bool | None = None
) -> list[str]:
    """How login starts rltray: the frozen app, this venv's `rltray` script, or `python -m`.

    On Windows never a console program: pip's ``rltray.exe`` launcher (like
    ``rltray-cli.exe`` in the bundle) opens a console window at every login, so a
    venv's login entry runs ``pythonw.exe -m rltray.app.cli run`` (issue 23 item 12).
    """
    frozen = getattr(sys, "frozen", False) if frozen is None else frozen
    exe = Path(executable)
    if frozen:
        if os_name == "nt":  # rltray-cli.exe has a console window; login starts the windowed one
            exe = exe.with_name("rltray.exe")
        return [str(exe), "run"]
    if os_name == "nt":
        windowed = exe.with_name("pythonw.exe")
        return [str(windowed if windowed.is_file() else exe), "-m", "rltray.app.cli", "run"]
    script = exe.with_name("rltray")
    if script.is_file():
        return [str(script), "run"]
    return [executable, "-m", "rltray.app.cli", "run"]


def _home(env: dict[str, str]) -> Path:
    return Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())


def _desktop_file(env: dict[str, str]) -> Path:
    config = env.get("XDG_CONFIG_HOME") or str(_home(env) / ".config")
    return Path(config) / "autostart" / "rltray.desktop"


def _plist_file(env: dict[str, str]) -> Path:
    return _home(env) / "Library" / "LaunchAgents" / f"{LABEL}.plist"


def _exec_line(cmd: list[str]) -> str:
    """The desktop-entry ``Exec`` value: its quoting rule, then the string escape rule.

    (Desktop Entry spec, "The Exec key"; shlex's single quotes are not allowed there.)
    """

    def quote(arg: str) -> str:
        if arg and not any(c in arg for c in RESERVED):
            return arg
        return '"' + "".join("\\" + c if c in '"`$\\' else c for c in arg) + '"'

    return " ".join(quote(a) for a in cmd).replace("\\", "\\\\")


def _split_exec(value: str) -> list[str]:
    """Read an ``Exec`` value back into arguments (the inverse of ``_exec_line``)."""
    text, i = [], 0
    while i < len(value):  # the string escape rule first
        if value[i] == "\\" and i + 1 < len(value):
            text.append({"s": " ", "n": "\n", "t": "\t", "r": "\r"}.get(value[i + 1], value[i + 1]))
            i += 2
        else:
            text.append(value[i])
            i += 1
    line = "".join(text)
    args: list[str] = []
    current: list[str] | None = None
    quoted, i = False, 0
    while i < len(line):
        c = line[i]
        if quoted:
            if c == "\\" and i + 1 < len(line):
                current.append(line[i + 1])  # type: ignore[union-attr]
                i += 1
            elif c == '"':
                quoted = False
            else:
                current.append(c)  # type: ignore[union-attr]
        elif c == '"':
            quoted, current = True, current if current is not None else []
        elif c == " ":
            if current is not None:
                args.append("".join(current))
            current = None
        else:
            current = (current or []) + [c]
        i += 1
    if current is not None:
        args.append("".join(current))
    return args


def _desktop_entry(cmd: list[str]) -> str:
    return (
        "[Desktop Entry]\n"
        "Type=Application\n"
        "Name=rltray\n"
        "Comment=Rate your coding agent's answers and train your local model\n"
        f"Exec={_exec_line(cmd)}\n"
        "Icon=rltray\n"
        "Terminal=false\n"
        "X-GNOME-Autostart-enabled=true\n"
    )


def enable(env: dict[str, str] | None = None, platform: str = sys.platform) -> AutostartStatus:
    env = dict(os.environ) if env is None else env
    cmd = command()
    # A disk image or a translocated copy is gone after the next restart (issue 23 item 4);
    # a folder others can write lets another user put a program at this path that every
    # login then runs as this user (review 3, finding 1): refused, nothing written.
    # The code it runs is checked too (a clone in /tmp installed editable: review 4, 3).
    refusal = bundle.location_refusal(
        cmd[0], "start rltray at login from", env, platform
    ) or bundle.location_refusal(
        bundle.code_location(), "start rltray at login with its code at", env, platform
    )
    if refusal:
        raise UserError(refusal)
    if platform == "win32":
        _windows_set(subprocess_line(cmd))
    elif platform == "darwin":
        plist = {
            "Label": LABEL,
            "ProgramArguments": cmd,
            "RunAtLoad": True,
            "ProcessType": "Interactive",
            "KeepAlive": False,
        }
        _write(_plist_file(env), plistlib.dumps(plist))
    else:
        from rltray.app.desktop import appicon

        appicon.install(env, platform)  # the entry's Icon=rltray names this file
        _write(_desktop_file(env), _desktop_entry(cmd).encode())
    return status(env, platform)


def disable(env: dict[str, str] | None = None, platform: str = sys.platform) -> AutostartStatus:
    env = dict(os.environ) if env is None else env
    if platform == "win32":
        _windows_delete()
    else:
        path = _plist_file(env) if platform == "darwin" else _desktop_file(env)
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise UserError(f"Could not remove {path}: {exc.strerror or exc}.") from None
    return status(env, platform)


def status(env: dict[str, str] | None = None, platform: str = sys.platform) -> AutostartStatus:
    env = dict(os.environ) if env is None else env
    if platform == "win32":
        line = _windows_get()
        cmd = None if line is None else _split_windows(line)
        return _checked(line is not None, rf"HKCU\{RUN_KEY}\{RUN_VALUE}", cmd, env)
    if platform == "darwin":
        path = _plist_file(env)
        if not path.is_file():
            return AutostartStatus(False, str(path), None)
        try:
            args = plistlib.loads(path.read_bytes()).get("ProgramArguments")
        except Exception as exc:
            return AutostartStatus(True, str(path), None, f"{path} cannot be read: {exc}")
        return _checked(True, str(path), list(args or []), env)
    path = _desktop_file(env)
    if not path.is_file():
        return AutostartStatus(False, str(path), None)
    exec_line = next(
        (ln[5:] for ln in path.read_text(errors="replace").splitlines() if ln.startswith("Exec=")),
        "",
    )
    return _checked(True, str(path), _split_exec(exec_line) if exec_line else None, env)


def _checked(
    enabled: bool, where: str, cmd: list[str] | None, env: dict[str, str]
) -> AutostartStatus:
    """The entry as read back, with what is wrong with it: its program is gone, or it sits
    in a folder others can write (``bundle.unsafe_location``: an entry an older rltray
    wrote before it refused those; ``RLTRAY_ALLOW_UNSAFE_LOCATION=1`` in ``env`` allows it)."""
    problem = unsafe = None
    if enabled and (not cmd or not Path(cmd[0]).exists()):
        problem = (
            f"the login entry runs {cmd[0] if cmd else 'nothing'}, which does not exist any more; "
            "run `rltray autostart on` again"
        )
    elif enabled and cmd:
        for what, path in _what_login_runs(cmd):
            unsafe = bundle.refused_location(path, env)
            if unsafe:
                problem = (
                    f"the login entry runs {what}, but {unsafe}: another user could put "
                    f"a program there; run `rltray autostart off`, {bundle.MOVE_IT}, and turn "
                    "it on again from there"
                )
                break
    return AutostartStatus(enabled, where, cmd, problem, unsafe)


def _what_login_runs(cmd: list[str]) -> list[tuple[str, str]]:
    """The entry's program and, when it is this installation's own entry, the folder of
    the rltray code that program imports (``bundle.code_location``); another
    installation's code cannot be found from here without running it."""
    runs = [(cmd[0], cmd[0])]
    if cmd[:1] == command()[:1]:
        code = str(bundle.code_location())
        runs.append((f"rltray's code at {code}", code))
    return runs


def _write(path: Path, data: bytes) -> None:
    try:
        make_folders(path.parent)  # never open to others' writes, who could swap the entry
        write_private_atomic(path, data, 0o644)
    except OSError as exc:
        raise UserError(f"Could not write {path}: {exc.strerror or exc}.") from None


def subprocess_line(cmd: list[str]) -> str:
    import subprocess

    return subprocess.list2cmdline(cmd)


def _split_windows(line: str) -> list[str]:
    # The Run value is one command line; split it the way we wrote it (list2cmdline).
    return shlex.split(line.replace("\\", "\\\\"), posix=True)


def _windows_set(line: str) -> None:  # pragma: no cover - Windows only
    import winreg

    with winreg.CreateKey(winreg.HKEY_CURRENT_USER, RUN_KEY) as key:
        winreg.SetValueEx(key, RUN_VALUE, 0, winreg.REG_SZ, line)


def _windows_get() -> str | None:  # pragma: no cover - Windows only
    import winreg

    try:
        with winreg.OpenKey(winreg.HKEY_CURRENT_USER, RUN_KEY) as key:
            value, _kind = winreg.QueryValueEx(key, RUN_VALUE)
    except FileNotFoundError:
        return None
    return str(value)


def _windows_delete() -> None:  # pragma: no cover - Windows only
    import winreg

    try:
        with winreg.OpenKey(winreg.HKEY_CURRENT_USER, RUN_KEY, 0, winreg.KEY_SET_VALUE) as key:
            winreg.DeleteValue(key, RUN_VALUE)
    except FileNotFoundError:
        pass
