"""Facts about how this rltray was installed: a frozen bundle (PyInstaller) or a Python environment.

Why one module: the hook command, the trainer environment and the self-test
each need to know which program is "rltray's own interpreter" after
installation, and a frozen bundle answers differently from a venv. In a
bundle ``sys.executable`` is the app's own executable, which runs the hook
program as ``<exe> -I -S capture.py ...`` exactly like a Python would
(packaging/pyinstaller/rltray_main.py, hook_main.py), so installed hooks
keep working without any system Python.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

HOOK_EXECUTABLE = "rltray-hook"  # packaging/pyinstaller/rltray.spec builds it beside rltray
# Set to 1, hooks and the login entry may name a program in a folder others can write
# (``location_refusal``): for a test suite run from a clone in /tmp, never a default.
ALLOW_UNSAFE_ENV = "RLTRAY_ALLOW_UNSAFE_LOCATION"
MOVE_IT = (
    "move rltray (the app folder, or this clone with its .venv) somewhere only you can write, "
    "e.g. ~/Applications or ~/.local/opt"
)


def frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def bundle_folder() -> Path | None:
    """The bundle's data folder (``_internal`` in a one-folder build); None outside a bundle."""
    meipass = getattr(sys, "_MEIPASS", None)
    return Path(meipass) if frozen() and meipass else None


def code_location() -> Path:
    """Where this rltray's own code is read from: the bundle's folder, or the file of the
    ``rltray.app`` package (a venv's site-packages, or, installed editable, the clone).

    A login entry runs that code as much as its interpreter, so it is checked the same
    way (``unsafe_location``): a clone in /tmp installed editable into a venv in the home
    folder passed `autostart on` on its interpreter alone, while `hooks install` refused
    it for capture.py (review 4, item 3).
    """
    folder = bundle_folder()
    if folder is not None:
        return folder
    import rltray.app

    return Path(str(rltray.app.__file__))


def cli_argv(*args: str) -> list[str]:
    """How this installation runs an `rltray` command in a child process.

    A bundle's executable takes the command itself; a Python install runs the
    CLI module with this interpreter (no PATH lookup, so the same rltray answers),
    the current folder kept off sys.path (``childpython.own_module``).
    """
    from rltray.app import childpython

    if frozen():
        return [sys.executable, *args]
    return childpython.own_module("rltray.app.cli", *args)


def hook_interpreter() -> str:
    """The program an agent's hook command starts: this Python, or the bundle's hook executable.

    A bundle carries ``rltray-hook``, a small interpreter that starts in about
    the time a Python does (packaging/pyinstaller/hook_main.py); the main
    executable also runs ``-I -S script`` but spends ~0.3 s in GUI start-up
    first, inside every agent turn.
    """
    exe = Path(sys.executable)
    if frozen():
        hook = exe.with_name(HOOK_EXECUTABLE + (".exe" if os.name == "nt" else ""))
        if hook.is_file():
            return str(hook)
    return str(exe)


def unsafe_location(
    path: str | os.PathLike[str], platform: str = sys.platform
) -> str | None:
    """Why a program at ``path`` must not be named by a hook or a login entry; None when safe.

    Why: an agent hook and a login entry run their program by path, as the user, for
    months after installation. A program in a folder another account can write (any
    ancestor writable by its group or by everyone, sticky or not: /tmp, /var/tmp,
    /dev/shm, except a sticky one only its group may write above a root-owned entry, as
    in the Nix store; any ancestor owned by someone other than the user or root), or
    inside the temporary folder (emptied at reboot), leaves that path free once the
    folder is gone: another local user recreates it and the next agent turn or login
    runs their program as this user (review 3, finding 1). A disk image or macOS's
    translocated copy is gone after the next restart too. Both the path as written and
    the file it resolves to are checked: either chain of folders can be swapped. A
    group-writable folder is fine when the group is root's, the user's own private group
    (Debian/Ubuntu's umask 002 makes every folder of the user's 775), or macOS's
    admin/wheel (whose members are root already). Windows keeps permissions in ACLs,
    which ``st_mode`` does not show: there only the temporary folder is refused.
    """
    import tempfile

    given = Path(os.path.abspath(path))
    resolved = given.resolve()
    if _translocated(resolved, platform):
        return "it runs from a disk image or a translocated copy, which is gone after a restart"
    temp = Path(tempfile.gettempdir()).resolve()
    if resolved == temp or temp in resolved.parents:
        return f"it is inside the temporary folder {temp}, which is emptied"
    if os.name == "nt" or platform == "win32":
        return None
    for chain in (_chain(given), _chain(resolved)):
        for below, folder in zip([None, *chain[:-1]], chain, strict=True):
            why = _others_can_replace(folder, platform, below)
            if why:
                return why
    return None


def location_refusal(
    path: str | os.PathLike[str],
    doing: str,
    env: Mapping[str, str] | None = None,
    platform: str = sys.platform,
) -> str | None:
    """One sentence refusing to ``doing`` (e.g. "point agent hooks at") ``path``; None when
    the path is safe, or when ``RLTRAY_ALLOW_UNSAFE_LOCATION=1`` is set in ``env``.

    The switch is for a test suite run from a clone in /tmp (CI) and for a person who
    knows the machine has no other users; nothing sets it by default.
    """
    why = refused_location(path, env, platform)
    if why is None:
        return None
    return (
        f"Refusing to {doing} {path} because {why} (once it is gone, another user of this "
        f"computer could put a program there that would run as you); {MOVE_IT}, and run "
        "this again from there."
    )


def refused_location(
    path: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    platform: str = sys.platform,
) -> str | None:
    """``unsafe_location``, unless ``RLTRAY_ALLOW_UNSAFE_LOCATION=1`` allows it: the switch
    is about other users, so a disk image or a translocated copy stays refused."""
    why = unsafe_location(path, platform)
    if why is None or (allowed_anyway(env) and not _translocated(Path(path).resolve(), platform)):
        return None
    return why


def allowed_anyway(env: Mapping[str, str] | None = None) -> bool:
    """True when ``RLTRAY_ALLOW_UNSAFE_LOCATION=1`` is set in ``env`` or in this process's
    environment (see ``location_refusal``): a switch about the machine, so a command given
    a trimmed ``env`` (the login entry's HOME only) still sees it."""
    return any(
        where.get(ALLOW_UNSAFE_ENV, "").strip() == "1" for where in (env or {}, os.environ)
    )


def _translocated(resolved: Path, platform: str) -> bool:
    """A mounted disk image or macOS's App Translocation copy: gone after a restart."""
    text = str(resolved)
    return platform == "darwin" and ("/AppTranslocation/" in text or text.startswith("/Volumes/"))


def _chain(path: Path) -> list[Path]:
    """``path`` and every folder above it, the file itself first."""
    return [path, *path.parents]


def _others_can_replace(folder: Path, platform: str, below: Path | None = None) -> str | None:
    """Why another account could replace ``folder`` (or what is in it on the way to the
    program: ``below``, the next folder or the file itself); None when only the user or
    root can.

    A folder its group may write but with the sticky bit (``chmod +t``) lets only an
    entry's owner, the folder's owner and root remove or rename that entry. So a root-owned
    entry under it stays put: a multi-user Nix or Guix store (/nix/store is root:nixbld
    1775, /gnu/store root:guixbuild 1775) holds every interpreter as such an entry
    (review 4, item 2). Anything else there is still refused: an entry the user owns is
    gone once the user deletes it, and another user may then make it again, the /tmp case
    of finding 1. A sticky folder everyone may write (/tmp, /var/tmp, /dev/shm) is refused
    whoever owns the entry: its clean-up (systemd-tmpfiles, a reboot) removes old entries,
    root's too, and for a user who is root, root's entries are the user's own.
    """
    import stat

    try:
        st = folder.stat()
    except FileNotFoundError:
        return None  # not there (yet): its parent, checked next, decides
    except OSError as exc:
        return f"{folder} cannot be checked ({exc.strerror or exc})"
    if st.st_uid not in (0, os.geteuid()):
        return f"{folder} belongs to another user (uid {st.st_uid})"
    why = None
    if st.st_mode & stat.S_IWOTH:
        why = f"{folder} is writable by every user"
    elif st.st_mode & stat.S_IWGRP and not _trusted_group(st.st_gid, platform):
        why = f"{folder} is writable by the group {_group_name(st.st_gid)}"
    sticky = st.st_mode & stat.S_ISVTX and not st.st_mode & stat.S_IWOTH
    if why and sticky and below is not None and _root_owned(below):
        return None  # only root may remove or rename ``below`` (the Nix store's case)
    return why


def _root_owned(entry: Path) -> bool:
    """``entry`` itself (a link, not what it names) exists and belongs to root."""
    try:
        return entry.lstat().st_uid == 0
    except OSError:
        return False


def _trusted_group(gid: int, platform: str) -> bool:
    """Root's group, the user's own private group, or macOS's administrators."""
    if gid == 0:
        return True
    name = _group_name(gid)
    if platform == "darwin" and name in ("admin", "wheel"):
        return True
    try:
        import grp
        import pwd

        me = pwd.getpwuid(os.geteuid()).pw_name
        members = set(grp.getgrgid(gid).gr_mem)
    except (ImportError, KeyError):
        return False
    return gid == os.getegid() and name == me and members <= {me}


def _group_name(gid: int) -> str:
    try:
        import grp

        return grp.getgrgid(gid).gr_name
    except (ImportError, KeyError):
        return str(gid)


def probe_hook_program(argv: list[str], timeout: float = 10.0) -> str | None:
    """Run a hook command's interpreter and script without an event; None when it worked.

    ``argv`` is a hook command as installed (``<python> -I -S capture.py --home H
    EVENT``). The probe runs it against a throwaway data folder and without the
    event, which the hook program answers by logging "no event given": proof
    that the interpreter starts and loads the hook program, with nothing recorded.
    """
    import subprocess
    import tempfile

    python, script = argv[0], argv[3] if len(argv) > 3 else ""
    if not Path(python).is_file() or not os.access(python, os.X_OK):
        return f"the hook interpreter {python} does not exist or cannot run"
    if not Path(script).is_file():
        return f"the hook program {script} does not exist"
    with tempfile.TemporaryDirectory(prefix="rltray-hookprobe-") as home:
        try:
            subprocess.run(
                [*argv[:4], "--home", home], input=b"", capture_output=True, timeout=timeout
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{python} did not run the hook program: {exc}"
        log = Path(home) / "logs" / "hook.log"
        said = log.read_text("utf-8", "replace") if log.exists() else ""
    if "no event given" not in said:
        return f"{python} -I -S {script} did not run as a hook (it logged {said.strip()!r})"
    return None
