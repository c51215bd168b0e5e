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
from pathlib import Path

HOOK_EXECUTABLE = "rltray-hook"  # packaging/pyinstaller/rltray.spec builds it beside rltray


def frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def bundle_folder() -> Path | None:
    """The bundle's data folder (``_internal`` in a one-folder build); None outside a bundle."""
    meipass = getattr(sys, "_MEIPASS", None)
    return Path(meipass) if frozen() and meipass else None


def cli_argv(*args: str) -> list[str]:
    """How this installation runs an `rltray` command in a child process.

    A bundle's executable takes the command itself; a Python install runs the
    CLI module with this interpreter (no PATH lookup, so the same rltray answers).
    """
    if frozen():
        return [sys.executable, *args]
    return [sys.executable, "-m", "rltray.app.cli", *args]


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


def transient_location(
    path: str | os.PathLike[str], platform: str = sys.platform
) -> str | None:
    """Why ``path`` will not exist after installation (a mounted disk image, macOS App
    Translocation, a temporary folder), or None when it looks permanent."""
    text = str(Path(path).resolve())
    if platform == "darwin" and ("/AppTranslocation/" in text or text.startswith("/Volumes/")):
        return "it runs from a disk image or a translocated copy; move rltray to Applications"
    temp = os.environ.get("TMPDIR") or os.environ.get("TEMP")
    if frozen() and temp and text.startswith(str(Path(temp).resolve()) + os.sep):
        return "it runs from a temporary folder; install it somewhere permanent first"
    return None


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
