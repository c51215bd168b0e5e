"""The tray's pictures per platform, and the macOS menu-bar icon class (issue 23 item 6).

macOS shows menu-bar icons as templates (alpha only); the glyphs drawn for it
are checked here on any OS. Showing them (template mode, 2x pixels in 22
points) needs AppKit: that test runs on a Mac and is skipped elsewhere.
"""

from __future__ import annotations

import pytest
from rltray.app.desktop import appicon
from rltray.app.tray.icon import TEMPLATE_SIZE, draw
from rltray.app.tray.menubar import icon_class
from rltray.app.tray.state import ATTENTION, IDLE, TRAINING

STATES = ((IDLE, None), (ATTENTION, None), (TRAINING, 0), (TRAINING, 60))


def test_macos_glyphs_are_alpha_only_at_2x_and_each_state_has_its_own_shape() -> None:
    shapes = []
    for mode, percent in STATES:
        image = draw(mode, percent, platform="darwin")
        assert image.mode == "RGBA" and image.size == (2 * 22, 2 * 22) == (TEMPLATE_SIZE,) * 2
        for band in "RGB":
            assert image.getchannel(band).getextrema() == (0, 0), (mode, band)
        alpha = image.getchannel("A")
        assert alpha.getextrema() == (0, 255)  # a black shape with holes, on nothing
        shapes.append(alpha.tobytes())
    assert len(set(shapes)) == len(STATES)  # in template mode only the alpha tells them apart


def test_other_platforms_keep_the_coloured_icon() -> None:
    for platform in ("linux", "win32"):
        image = draw(IDLE, platform=platform)
        assert image.size == (64, 64) and image.getpixel((10, 20)) == appicon.BLUE


def test_only_pystrays_macos_backend_gets_the_template_icon_class() -> None:
    dummy = type("Icon", (), {"__module__": "pystray._dummy"})  # PYSTRAY_BACKEND=dummy
    assert icon_class(dummy, "darwin") is dummy
    darwin = type("Icon", (), {"__module__": "pystray._darwin"})
    assert icon_class(darwin, "linux") is darwin


def test_the_macos_icon_is_a_template_with_the_glyphs_own_pixels() -> None:
    pytest.importorskip("AppKit", reason="needs pyobjc's AppKit (macOS only)")
    import pystray._darwin

    cls = icon_class(pystray._darwin.Icon, "darwin")
    assert cls is not pystray._darwin.Icon
    icon = cls("rltray-test", draw(IDLE, platform="darwin"))
    try:
        icon._assert_image()
        image = icon._icon_image
        assert image.isTemplate()
        assert image.size().width == int(icon._status_bar.thickness())  # points
        assert image.representations()[0].pixelsWide() == TEMPLATE_SIZE
    finally:
        icon._status_bar.removeStatusItem_(icon._status_item)


def test_pystray_stays_below_the_release_that_changes_the_overridden_method() -> None:
    """menubar.py overrides pystray's private _assert_image: lift the bound after checking it."""
    from pathlib import Path

    import tomllib
    from packaging.requirements import Requirement

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    (pystray,) = [Requirement(d) for d in deps if Requirement(d).name == "pystray"]
    assert "0.19.5" in pystray.specifier and "0.19.6" not in pystray.specifier
    assert "0.20" not in pystray.specifier
