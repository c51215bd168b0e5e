"""Private, atomic file writes and symlink-safe reads for the user-session process.

Every file rltray writes can hold captured text or secrets-adjacent state, so
it is created 0600, written to a temp file in the same folder and renamed,
so a crash leaves either the old bytes or the new ones, never half of each.
(The hook program has its own stdlib copy because it must not import rltray.)
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


class UnsafePathError(OSError):
    """A path rltray refuses to follow (a symlink or not a regular file)."""


def write_private_atomic(
    path: str | os.PathLike[str], data: bytes, mode: int | None = None
) -> None:
    """Replace ``path`` with ``data``; keep an existing file's mode, else 0600."""
    target = Path(path)
    if target.is_symlink():
        raise UnsafePathError(f"{target} is a symbolic link; rltray does not write through links.")
    if mode is None:
        try:
            mode = stat.S_IMODE(target.stat().st_mode)
        except FileNotFoundError:
            mode = 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_regular_file(
    path: str | os.PathLike[str],
    limit: int | None = None,
    check: Callable[[os.stat_result], None] | None = None,
) -> bytes:
    """Read a regular file without following a symlink at its final component.

    Opened non-blocking so a FIFO planted where a file belongs is refused at
    once instead of hanging the caller until something writes to it. ``check``
    gets the opened file's own stat before a byte is read (its owner and mode,
    with no window for a swap between looking and reading) and raises to refuse it.
    """
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_BINARY", 0)
    )
    if os.name != "posix" and Path(path).is_symlink():  # no O_NOFOLLOW there
        raise UnsafePathError(f"{path} is a symbolic link; rltray does not follow links.")
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if Path(path).is_symlink():
            raise UnsafePathError(
                f"{path} is a symbolic link; rltray does not follow links."
            ) from exc
        raise
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{path} is not a regular file.")
        if check is not None:
            check(st)
        return fh.read() if limit is None else fh.read(limit)


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes, read a MiB at a time (weights and wheels are
    large: never the whole file in memory). OSError as the file raises it."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
