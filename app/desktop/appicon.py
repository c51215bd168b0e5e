"""rltray's picture (a speech bubble with a check mark) as drawn shapes, and as an installed icon.

Why installed: a notification or launcher entry that names ``rltray`` gets no
picture unless a file of that name is in the icon theme's folders ("No icon found
in path: 'rltray'", the notification server said); a notification given the
file's path gets it even from servers that ignore icon themes (dunst's default).
The shapes follow packaging/icons/rltray.svg; the tray draws its states over the
same bubble (app/tray/icon.py).
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any

BLUE = (45, 108, 223, 255)
WHITE = (255, 255, 255, 255)
NAME = "rltray"
INSTALLED_SIZE = 256


def bubble(pen: Any, size: int, colour: tuple[int, ...]) -> None:
    """The speech bubble, on a ``size`` x ``size`` canvas (designed on 64)."""
    k = size / 64
    pen.rounded_rectangle((4 * k, 6 * k, 60 * k, 48 * k), radius=10 * k, fill=colour)
    pen.polygon([(18 * k, 48 * k), (18 * k, 60 * k), (32 * k, 48 * k)], fill=colour)


def check(pen: Any, size: int, colour: tuple[int, ...] = WHITE) -> None:
    """The check mark inside the bubble (white; a hole in macOS's template glyph)."""
    k = size / 64
    points = [(19 * k, 27 * k), (28 * k, 36 * k), (45 * k, 18 * k)]
    pen.line(points, fill=colour, width=max(1, round(6 * k)), joint="curve")


def png(size: int = INSTALLED_SIZE) -> bytes:
    """The idle icon as PNG bytes."""
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    pen = ImageDraw.Draw(image)
    bubble(pen, size, BLUE)
    check(pen, size)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def icon_dir(env: dict[str, str] | None = None) -> Path:
    """hicolor's folder for 256-pixel application icons in the user's data home (XDG)."""
    env = dict(os.environ) if env is None else env
    home = Path(env.get("HOME") or Path.home())
    data = Path(env.get("XDG_DATA_HOME") or home / ".local" / "share")
    return data / "icons" / "hicolor" / f"{INSTALLED_SIZE}x{INSTALLED_SIZE}" / "apps"


def install(env: dict[str, str] | None = None, platform: str = sys.platform) -> Path | None:
    """Write ``rltray.png`` where freedesktop icon themes look (Linux, BSD); its path.

    None on macOS and Windows (the app bundle carries its icon) and when the file
    cannot be written or drawn; a notification then goes out without a picture.
    """
    if platform in ("darwin", "win32"):
        return None
    from rltray.app.fileio import write_private_atomic
    from rltray.app.paths import make_folders

    target = icon_dir(env) / f"{NAME}.png"
    try:
        data = png()
        if target.is_file() and target.read_bytes() == data:
            return target
        make_folders(target.parent)  # never open to others' writes (umask 000)
        write_private_atomic(target, data, 0o644)  # a fresh temp name, no link followed
    except (OSError, ImportError):
        return None
    return target
