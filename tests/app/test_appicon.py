"""The installed icon: a PNG where freedesktop icon themes look, written once."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
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


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits and links")
def test_the_icon_goes_in_through_folders_others_cannot_write_and_no_planted_link(
    tmp_path: Path,
) -> None:
    """Regression (review2-sec): under umask 000 the icon's folders were made 0777, and the
    icon was written to the predictable ``.rltray.<pid>.tmp`` with ``write_bytes``, which
    follows a link another user planted there (overwriting a file of the victim's)."""
    env = {"HOME": str(tmp_path)}
    folder = appicon.icon_dir(env)
    folder.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me")
    (folder / f".{appicon.NAME}.{os.getpid()}.tmp").symlink_to(victim)
    assert appicon.install(env, "linux") == folder / "rltray.png"
    assert victim.read_bytes() == b"keep me"
    assert not (folder / "rltray.png").is_symlink()
    fresh = tmp_path / "fresh"
    old = os.umask(0)
    try:
        path = appicon.install({"HOME": str(fresh)}, "linux")
    finally:
        os.umask(old)
    assert path is not None and path.stat().st_mode & 0o777 == 0o644
    made = [fresh / ".local", *path.parents]
    for folder in {p for p in made if p.is_relative_to(fresh / ".local")}:
        assert folder.stat().st_mode & 0o777 == 0o755, folder
