"""Hand a file, folder or URL to the desktop: the one place that knows each OS's opener.

``webbrowser`` opens URLs everywhere but folders only on some systems, so
folders go to the platform's own opener (xdg-open, open, os.startfile).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rltray.app.errors import UserError


def open_path(path: str | os.PathLike[str]) -> None:
    """Open a folder or file with the user's default application, without waiting for it."""
    target = str(Path(path))
    try:
        if sys.platform == "win32":
            os.startfile(target)  # type: ignore[attr-defined]
            return
        opener = "open" if sys.platform == "darwin" else "xdg-open"
        subprocess.Popen(
            [opener, target],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        raise UserError(f"Could not open {target}: {exc.strerror or exc}.") from None
