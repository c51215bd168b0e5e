"""The Python a trainer environment is built from: >= 3.10 with venv and ensurepip.

Outside a bundle rltray's own interpreter qualifies; the frozen bundle has no full
Python of its own, so the system's are tried, best first, each passed over with
the reason it cannot build a venv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from rltray.app.training.trainerenv.plan import TrainerEnvError

MIN_PYTHON = (3, 10)


def find_base_python(explicit: str | None = None) -> str:
    """A Python >= 3.10 with venv and ensurepip to build from.

    Outside a bundle rltray's own interpreter qualifies; a bundle has no full
    Python of its own, so it looks for the system's.
    """
    from rltray.app import bundle

    if explicit:
        candidates = [explicit]
    elif not bundle.frozen():
        candidates = [sys.executable]
    else:
        candidates = system_pythons()
    problems = []
    for candidate in candidates:
        reason = _unusable(candidate)
        if reason is None:
            return candidate
        problems.append(f"{candidate}: {reason}")
    looked = "; ".join(problems) or "none on PATH"
    raise TrainerEnvError(
        f"No Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]}+ with venv to build the trainer "
        f"environment from ({looked}). Install one (Debian/Ubuntu: sudo apt install "
        "python3-venv; macOS/Windows: python.org), or name it with --python."
    )


def system_pythons(plat: str | None = None) -> list[str]:
    """Pythons to try, best first, without any that would pop up an installer.

    An app started at login gets a short PATH, so macOS also looks where
    Homebrew and python.org install; its /usr/bin/python3 is only a stub that
    offers to install the developer tools unless they are installed. On
    Windows the ``py`` launcher comes first: ``python`` may be the Microsoft
    Store alias.
    """
    plat = plat or sys.platform
    versioned = [f"python3.{minor}" for minor in range(14, MIN_PYTHON[1] - 1, -1)]
    names = ["py", "python3", "python"] if plat == "win32" else [*versioned, "python3"]
    path = os.environ.get("PATH", "")
    if plat == "darwin":
        extra = ["/opt/homebrew/bin", "/usr/local/bin",
                 "/Library/Frameworks/Python.framework/Versions/Current/bin"]  # fmt: skip
        path = os.pathsep.join([path, *extra])
    found: list[str] = []
    for name in names:
        where = shutil.which(name, path=path)
        if where and where not in found:
            found.append(where)
    if plat == "darwin" and not _developer_tools_installed():
        found = [p for p in found if not p.startswith("/usr/bin/")]
    return found


def _developer_tools_installed() -> bool:
    try:
        done = subprocess.run(["xcode-select", "-p"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _unusable(python: str) -> str | None:
    from rltray.app import childpython

    code = (
        "import sys, venv, ensurepip; "
        f"sys.exit(0 if sys.version_info >= {MIN_PYTHON} else 3)"
    )
    # -I: the standard library only, the current folder never on sys.path (a planted
    # venv.py ran as the user: review 3, finding 2); a private cwd for good measure.
    argv = [python, "-3", "-I", "-c", code] if Path(python).stem == "py" else [
        python, "-I", "-c", code]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                              **childpython.options())  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"does not run ({exc})"
    if done.returncode == 3:
        return "older than 3.10"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return f"has no venv/ensurepip ({last})"
    return None
