"""The tray icon's pictures, drawn with Pillow for each state.

Drawn rather than shipped as files so the training state can show its
percent as a filling ring; the shapes follow packaging/icons/rltray.svg (a
speech bubble with a check mark, app/desktop/appicon.py) so the tray matches the
launcher icon.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltray.app.desktop import appicon
from rltray.app.tray.state import ATTENTION, TRAINING

if TYPE_CHECKING:
    from PIL.Image import Image

SIZE = 64
GREY = (120, 128, 140, 255)
ORANGE = (230, 126, 34, 255)
WHITE = appicon.WHITE


def draw(mode: str, percent: int | None = None) -> Image:
    """The icon for a tray mode; ``percent`` (0–100) draws a progress ring while training."""
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (SIZE, SIZE), (0, 0, 0, 0))
    pen = ImageDraw.Draw(image)
    appicon.bubble(pen, SIZE, ORANGE if mode == ATTENTION else appicon.BLUE)
    if mode == ATTENTION:
        pen.rounded_rectangle((29, 13, 35, 33), radius=3, fill=WHITE)
        pen.ellipse((28, 36, 36, 44), fill=WHITE)
    elif mode == TRAINING:
        done = max(0, min(100, percent or 0))
        pen.ellipse((18, 11, 46, 39), outline=GREY, width=5)
        if done:
            pen.arc((18, 11, 46, 39), start=-90, end=-90 + 360 * done / 100, fill=WHITE, width=5)
    else:
        appicon.check(pen, SIZE)
    return image
