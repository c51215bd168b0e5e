"""The installed icon: a PNG where freedesktop icon themes look, written once."""

from __future__ import annotations

import io
from pathlib import Path

from rltray.app.desktop import appicon


def test_install_writes_the_png_into_the_users_hicolor_theme(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    path = appicon.install(env, "linux")
    assert path == tmp_path / "data/icons/hicolor/256x256/apps/rltray.png"
    from PIL import Image

    image = Image.open(io.BytesIO(path.read_bytes()))
    assert image.size == (256, 256) and image.getpixel((128, 60))[:3] == appicon.BLUE[:3]
    stamp = path.stat().st_mtime_ns
    assert appicon.install(env, "linux") == path and path.stat().st_mtime_ns == stamp


def test_no_icon_file_on_macos_and_windows(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    assert appicon.install(env, "darwin") is None and appicon.install(env, "win32") is None
    assert not (tmp_path / ".local").exists()
