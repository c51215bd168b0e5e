"""fileio: the one no-follow, regular-files-only reader every app module uses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rltray.app.fileio import UnsafePathError, read_regular_file

posix_only = pytest.mark.skipif(os.name != "posix", reason="uses POSIX symlinks and FIFOs")


def test_reads_a_regular_file_up_to_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"0123456789")
    assert read_regular_file(path) == b"0123456789"
    assert read_regular_file(path, limit=4) == b"0123"


@posix_only
def test_a_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "real.toml"
    target.write_text("x = 1\n")
    link = tmp_path / "config.toml"
    link.symlink_to(target)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        read_regular_file(link)


@posix_only
@pytest.mark.timeout(10)
def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    # Regression: opening a FIFO blocking hung `rltray doctor` on a FIFO config.toml.
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    with pytest.raises(UnsafePathError, match="not a regular file"):
        read_regular_file(fifo)
