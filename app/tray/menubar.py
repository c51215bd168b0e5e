"""The macOS menu-bar icon: rltray's glyphs shown as template images, at Retina resolution.

Why: pystray 0.19.5 scales every icon down to the status bar's thickness in
pixels (22) and hands that to AppKit at 1x, so a Retina screen upscales it
(blurry); and it never marks the image as a template, so macOS cannot paint it
for a dark bar or the highlight. Its next release marks it a template and sizes
it in points (upstream 2f3a573) but still scales it to 22 pixels first.
tray/icon.py draws alpha-only glyphs at 2x for macOS, and the subclass here shows
them as drawn: the PNG at its own pixels, sized to the bar's thickness in
points, marked as a template. It overrides pystray's private ``_assert_image``,
so pyproject.toml keeps pystray below its next release until this is checked
against it (and dropped if that release keeps the pixels).
"""

from __future__ import annotations

import sys
from typing import Any

DARWIN_BACKEND = "pystray._darwin"


def icon_class(base: type, platform: str = sys.platform) -> type:
    """The Icon class to build: pystray's own, or on macOS the template-image one."""
    if platform != "darwin" or base.__module__ != DARWIN_BACKEND:
        return base
    return _template_icon(base)


def _template_icon(base: type) -> type:
    import io

    import AppKit  # pyobjc, a pystray dependency on macOS
    import Foundation

    class MenuBarIcon(base):  # type: ignore[misc, valid-type]
        """pystray's macOS Icon, showing the image unscaled as a template."""

        def _assert_image(self) -> None:
            thickness = int(self._status_bar.thickness())
            size = (thickness, thickness)  # points
            if self._icon_image and self._icon_image.size() == size:
                return
            png = io.BytesIO()
            self._icon.save(png, "png")
            image: Any = AppKit.NSImage.alloc().initWithData_(Foundation.NSData(png.getvalue()))
            image.setSize_(size)  # 44 pixels in 22 points: Retina's 2x
            image.setTemplate_(True)
            self._icon_image = image
            self._status_item.button().setImage_(image)

    return MenuBarIcon
