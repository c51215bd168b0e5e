"""Rotating copies of rltray.db in ``<data folder>/backups/db/``, taken with SQLite's backup API.

Why it looks like this:
- ``sqlite3.Connection.backup`` copies a consistent snapshot while other
  processes keep reading and writing (WAL), unlike copying the file.
- A copy is written to a temporary name and renamed, 0600 in a 0700 folder,
  and converted to a self-contained rollback-journal file so it opens alone.
- The source is checked (``PRAGMA quick_check``) first: a damaged database
  is reported, never rotated in over the good copies.
- Whether a copy is due is one directory listing (the newest name's
  timestamp), so checking on every open costs nothing measurable.
- Deleting a turn edits every copy (``editing``, with ``secure_delete``), so a
  backup never keeps what the user deleted for its five days.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from rltray.app.errors import DatabaseDamaged

KEEP = 5
EVERY_S = 24 * 3600.0
_STAMP = "%Y%m%dT%H%M%S%fZ"
_STALE_TEMP_S = 3600.0


def folder(db: Path) -> Path:
    """Backups of ``<home>/rltray.db`` live in ``<home>/backups/db/``."""
    return db.parent / "backups" / "db"


def _pattern(db: Path) -> re.Pattern[str]:
    return re.compile(re.escape(db.stem) + r"-(\d{8}T\d{12}Z)" + re.escape(db.suffix))


def backups(db: Path) -> list[Path]:
    """This database's backups, newest first."""
    pattern = _pattern(db)
    try:
        with os.scandir(folder(db)) as entries:
            found = [(m.group(1), e.path) for e in entries if (m := pattern.fullmatch(e.name))]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [Path(p) for _, p in sorted(found, reverse=True)]


def taken_at(backup: Path) -> datetime | None:
    """When a backup was taken, from its name (UTC), or None for a name not ours."""
    match = re.search(r"-(\d{8}T\d{12}Z)(\.[^.]*)?$", backup.name)
    if match is None:
        return None
    return datetime.strptime(match.group(1), _STAMP).replace(tzinfo=timezone.utc)


def due(db: Path, every_s: float = EVERY_S, now: datetime | None = None) -> bool:
    """Whether the newest backup is older than ``every_s`` (or there is none)."""
    found = backups(db)
    if not found:
        return True
    when = taken_at(found[0])
    now = now or datetime.now(timezone.utc)
    return when is None or (now - when).total_seconds() >= every_s


def check(conn: sqlite3.Connection) -> str:
    """``ok`` or SQLite's first complaints from ``PRAGMA quick_check``."""
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:  # too damaged to check (DatabaseDamaged is one)
        if isinstance(exc, sqlite3.OperationalError):
            raise
        return str(exc.__cause__ or exc)
    return "ok" if rows and rows[0][0] == "ok" else "; ".join(str(r[0]) for r in rows[:3])


def take(conn: sqlite3.Connection, db: Path, keep: int = KEEP) -> Path:
    """Copy the open database into a new backup, then keep only the newest ``keep``.

    Raises DatabaseDamaged (and copies nothing) when the database fails its check.
    """
    problem = check(conn)
    if problem != "ok":
        raise DatabaseDamaged(
            f"The database {db} is damaged ({problem}); run `rltray doctor --repair` to "
            "salvage what is readable into a new file (the damaged one is kept)."
        )
    target_dir = folder(db)
    target_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime(_STAMP)
    final = target_dir / f"{db.stem}-{stamp}{db.suffix}"
    temp = target_dir / f".{final.name}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    try:
        dest = sqlite3.connect(temp, isolation_level=None)
        try:
            dest.execute("PRAGMA secure_delete = ON")  # see ``editing``
            conn.backup(dest)
            dest.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
        finally:
            dest.close()
        os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    prune(db, keep)
    return final


def take_if_due(conn: sqlite3.Connection, db: Path, every_s: float = EVERY_S) -> Path | None:
    """The daily copy: taken when due; one that cannot be written never blocks the caller.

    (`rltray doctor` shows the newest copy's age.) A long-running service calls
    this now and then, as every open does. Raises DatabaseDamaged like ``take``.
    """
    if not due(db, every_s):
        return None
    try:
        return take(conn, db)
    except OSError:
        return None


def prune(db: Path, keep: int = KEEP) -> list[Path]:
    """Delete all but the newest ``keep`` backups and stale temporary copies; the deleted paths."""
    removed = []
    for old in backups(db)[keep:]:
        old.unlink(missing_ok=True)
        removed.append(old)
    now = time.time()
    try:
        with os.scandir(folder(db)) as entries:
            for e in entries:
                ours = e.name.startswith(f".{db.stem}-") and e.name.endswith(".tmp")
                if ours and now - e.stat().st_mtime > _STALE_TEMP_S:
                    Path(e.path).unlink(missing_ok=True)
                    removed.append(Path(e.path))
    except FileNotFoundError:
        pass
    return removed


@contextmanager
def editing(backup: Path) -> Iterator[sqlite3.Connection]:
    """One write transaction on a backup copy (deleting a turn removes it from every copy).

    ``secure_delete`` overwrites the freed bytes, so the copy no longer holds
    them; the rollback journal that briefly holds the old pages is deleted at
    commit. A copy that is missing, a link or damaged raises sqlite3.Error or OSError.
    """
    if backup.is_symlink() or not backup.is_file():
        raise FileNotFoundError(f"{backup} is not a backup file")
    conn = sqlite3.connect(backup, isolation_level=None, timeout=5.0)
    try:
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.close()


def newest_intact(db: Path) -> Path | None:
    """The newest backup that opens and passes its check, or None."""
    for backup in backups(db):
        try:
            conn = sqlite3.connect(backup.absolute().as_uri() + "?mode=ro", uri=True)
        except sqlite3.Error:
            continue
        try:
            if check(conn) == "ok":
                return backup
        except sqlite3.Error:
            continue
        finally:
            conn.close()
    return None
