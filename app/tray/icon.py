"""The tray icon's pictures, drawn with Pillow for each state.

Drawn rather than shipped as files so the training state can show its
percent as a filling ring; the shapes follow packaging/icons/rltray.svg (a
speech bubble with a check mark, app/desktop/appicon.py) so the tray matches the
launcher icon.

macOS draws menu-bar icons as template images: only the alpha channel counts,
and the system paints it to suit a light or dark bar and the highlight, so a
coloured picture there is wrong twice (it ignores dark mode, and in template
mode, which pystray's next release switches on, it is one black blob). There the
states are told apart by shape alone: holes cut out of a black bubble, at twice
the bar's 22 points so a Retina screen shows every pixel (tray/menubar.py shows
them unscaled).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from rltray.app.desktop import appicon
from rltray.app.tray.state import ATTENTION, TRAINING

if TYPE_CHECKING:
    from PIL.Image import Image

SIZE = 64
GREY = (120, 128, 140, 255)
ORANGE = (230, 126, 34, 255)
WHITE = appicon.WHITE
MENU_BAR_POINTS = 22  # NSStatusBar.systemStatusBar().thickness()
TEMPLATE_SIZE = 2 * MENU_BAR_POINTS  # pixels: Retina's 2x
INK = (0, 0, 0, 255)  # a template's opaque part
FAINT = (0, 0, 0, 96)  # the training ring's track: half-cut
HOLE = (0, 0, 0, 0)  # cut out: the menu bar shows through


def draw(mode: str, percent: int | None = None, platform: str = sys.platform) -> Image:
    """The icon for a tray mode; ``percent`` (0–100) draws a progress ring while training.

    On macOS an alpha-only template glyph at 2x; elsewhere the coloured icon.
    """
    if platform == "darwin":
        return glyph(mode, percent)
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (SIZE, SIZE), (0, 0, 0, 0))
    pen = ImageDraw.Draw(image)
    appicon.bubble(pen, SIZE, ORANGE if mode == ATTENTION else appicon.BLUE)
    if mode == ATTENTION:
        _exclamation(pen, SIZE, WHITE)
    elif mode == TRAINING:
        _ring(pen, SIZE, percent, track=GREY, done=WHITE)
    else:
        appicon.check(pen, SIZE)
    return image


def glyph(mode: str, percent: int | None = None) -> Image:
    """The macOS template image: a black bubble with the state's mark cut out of it."""
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (TEMPLATE_SIZE, TEMPLATE_SIZE), HOLE)
    pen = ImageDraw.Draw(image)  # no blending: a HOLE drawn over INK replaces it
    appicon.bubble(pen, TEMPLATE_SIZE, INK)
    if mode == ATTENTION:
        _exclamation(pen, TEMPLATE_SIZE, HOLE)
    elif mode == TRAINING:
        _ring(pen, TEMPLATE_SIZE, percent, track=FAINT, done=HOLE)
    else:
        appicon.check(pen, TEMPLATE_SIZE, HOLE)
    return image


def _exclamation(pen: Any, size: int, colour: tuple[int, ...]) -> None:
    k = size / 64
    pen.rounded_rectangle((29 * k, 13 * k, 35 * k, 33 * k), radius=3 * k, fill=colour)
    pen.ellipse((28 * k, 36 * k, 36 * k, 44 * k), fill=colour)


def _ring(
    pen: Any, size: int, percent: int | None, *, track: tuple[int, ...], done: tuple[int, ...]
) -> None:
    k = size / 64
    box = (18 * k, 11 * k, 46 * k, 39 * k)
    width = max(1, round(5 * k))
    pen.ellipse(box, outline=track, width=width)
    part = max(0, min(100, percent or 0))
    if part:
        pen.arc(box, start=-90, end=-90 + 360 * part / 100, fill=done, width=width)
