"""Opening rltray.db: refuse to start over silently, read-only when current, errors in one sentence.

Why it looks like this:
- A missing or 0-byte database is only a new one when the data folder was
  never used: ``backups/db/`` holds a marker written when the database was
  created, and the rotating backups. With either present, a lost file is an
  error that points at ``rltray doctor --repair``, never an empty start.
- Opening a current database performs no write and takes no write lock
  (journal mode, schema and user_version are read first and written only when
  they differ), so `rltray status` never waits for the tray's write.
- Every statement on the connection turns SQLite's "locked" and "damaged"
  errors into DatabaseBusy / DatabaseDamaged naming the file. Both are also
  sqlite3 errors, so code telling a database failure from a record's keeps working.
- Backups (``store/backup.py``) are taken before migrating a used database, and at
  most once a day otherwise.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rltray.app.errors import DatabaseBusy, DatabaseDamaged, DatabaseMissing, ExitCode, UserError
from rltray.app.store import backup as dbbackup
from rltray.app.store import migrations

REPAIR = "run `rltray doctor --repair`"
_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def translate(exc: BaseException, path: Path) -> BaseException:
    """SQLite's lock and corruption errors as one sentence naming the file; others unchanged."""
    if isinstance(exc, (DatabaseBusy, DatabaseDamaged)) or not isinstance(
        exc, sqlite3.DatabaseError
    ):
        return exc
    if isinstance(exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError)):
        return exc
    name = getattr(exc, "sqlite_errorname", "")  # Python 3.11+; the text is the fallback
    text = str(exc)
    if name in _BUSY or "database is locked" in text or "database table is locked" in text:
        return DatabaseBusy(
            f"The database {path} is locked by another process writing to it; try again "
            "in a moment (if it stays locked, stop other rltray processes)."
        )
    if name in _DAMAGED or "malformed" in text or "not a database" in text:
        return DatabaseDamaged(
            f"The database {path} is damaged ({text}); {REPAIR} to salvage what is "
            "readable into a new file (the damaged one is kept)."
        )
    return exc


class _Cursor(sqlite3.Cursor):
    """A cursor whose lock and corruption errors arrive translated, while executing or fetching."""

    def _fail(self, exc: sqlite3.Error) -> BaseException:
        return translate(exc, getattr(self.connection, "path", Path("?")))

    def execute(self, sql: str, parameters: Any = ()) -> _Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any]) -> _Cursor:
        try:
            return super().executemany(sql, seq_of_parameters)
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc

    def executescript(self, sql_script: str) -> _Cursor:
        try:
            return super().executescript(sql_script)
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc

    def fetchmany(self, size: int | None = None) -> list[Any]:
        try:
            return super().fetchmany(self.arraysize if size is None else size)
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc


class Connection(sqlite3.Connection):
    """sqlite3.Connection whose statements raise DatabaseBusy / DatabaseDamaged (see translate)."""

    path: Path

    def cursor(self, factory: Any = _Cursor) -> Any:  # type: ignore[override]
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = ()) -> Any:  # type: ignore[override]
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any]) -> Any:  # type: ignore[override]
        return self.cursor().executemany(sql, parameters)

    def executescript(self, sql_script: str) -> Any:  # type: ignore[override]
        return self.cursor().executescript(sql_script)


# -- the file and the marker ---------------------------------------------------


def marker(path: Path) -> Path:
    """Written once the database exists; its presence means "this folder had a database"."""
    return dbbackup.folder(path) / f"{path.name}.created"


def used_before(path: Path) -> bool:
    """The marker, a backup, or (for folders older than the marker) a trained adapter or run."""
    if marker(path).exists() or dbbackup.backups(path):
        return True
    return any(_has_entries(path.parent / name) for name in ("adapters", "runs"))


def _has_entries(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(True for _ in entries)
    except OSError:
        return False


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _holds_data(path: Path, size: int | None) -> bool:
    """The file (of ``size`` bytes) or its write-ahead log has bytes: a database is there
    (data still only in the log is read by SQLite)."""
    return bool(size) or bool(_size(path.with_name(path.name + "-wal")))


def lost(path: Path) -> str | None:
    """``missing`` or ``empty`` when the file holds nothing although the folder had a database."""
    size = _size(path)
    if _holds_data(path, size) or not used_before(path):
        return None
    return "missing" if size is None else "empty"


def _is_new(path: Path) -> bool:
    """Whether opening ``path`` creates a database; DatabaseMissing when one was lost."""
    size = _size(path)
    if _holds_data(path, size):
        return False
    if not used_before(path):
        return True
    state = "missing" if size is None else "empty (0 bytes)"
    raise DatabaseMissing(
        f"The database {path} is {state}, but this data folder held one before (see "
        f"{dbbackup.folder(path)}); {REPAIR} to restore the newest backup instead of "
        "starting over."
    )


def create_private(path: Path) -> None:
    """Create the database file 0600 before SQLite does (SQLite would honour the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    if os.name == "posix":
        os.chmod(path, 0o600)


def mark_created(path: Path) -> None:
    """Write the marker (the backups folder, 0700, holds it) unless it is already there."""
    target = marker(path)
    if target.exists():
        return
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(
            f"{path} was in use by {stamp}. While this file exists, rltray reports a missing\n"
            "or empty database instead of silently starting a new one; `rltray doctor\n"
            "--repair` restores the newest backup from this folder.\n"
        )


# -- opening -------------------------------------------------------------------


def connect(path: Path, busy_timeout_s: float) -> Connection:
    """A configured connection (busy timeout, foreign keys, FULL sync, secure delete); no schema."""
    conn = sqlite3.connect(
        path,
        timeout=busy_timeout_s,
        isolation_level=None,
        check_same_thread=False,
        factory=Connection,
    )
    conn.path = path
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    # Deleted text is overwritten with zeros, not left in free space (macOS's and
    # python.org's SQLite default to off; Debian's to on).
    conn.execute("PRAGMA secure_delete = ON")
    return conn


def open_database(
    path: Path, busy_timeout_s: float, *, backup_every_s: float = dbbackup.EVERY_S
) -> Connection:
    """Open (or create) rltray's database, migrated and in WAL mode, writing only when needed.

    Raises DatabaseMissing for a lost file, DatabaseDamaged for an unreadable
    one, DatabaseBusy when a needed write waited out the busy timeout, and
    migrations.SchemaTooNew for a file from a newer rltray.
    """
    if _holds_data(path, _size(path)):  # the usual case: a database with data
        return _open(path, busy_timeout_s, False, backup_every_s)
    with _creating(path, busy_timeout_s):
        return _open(path, busy_timeout_s, _is_new(path), backup_every_s)


@contextlib.contextmanager
def _creating(path: Path, busy_timeout_s: float) -> Iterator[None]:
    """Hold the lock that makes creating the file one opener's job at a time.

    Why: an opener that found the file empty while another was creating it, after the
    creator had written the marker but before any page reached the file or its WAL, took
    it for a lost database and refused to start (DatabaseMissing); a CI run of four
    openers met it once in 150. Under the lock the second opener looks only once the
    first has finished, when the file or its write-ahead log holds the schema.
    """
    from filelock import FileLock, Timeout

    folder = dbbackup.folder(path)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = FileLock(str(folder / f"{path.name}.creating.lock"), mode=0o600, is_singleton=False)
    try:
        lock.acquire(timeout=busy_timeout_s)
    except Timeout:
        raise DatabaseBusy(
            f"The database {path} is being created by another rltray process, which has "
            f"not finished in {busy_timeout_s:g} s; try again in a moment."
        ) from None
    try:
        yield
    finally:
        lock.release()


def _open(path: Path, busy_timeout_s: float, new: bool, backup_every_s: float) -> Connection:
    """The opening itself, once :func:`open_database` knows whether the file is new."""
    if new:
        create_private(path)
    try:
        conn = connect(path, busy_timeout_s)
    except sqlite3.Error as exc:
        raise translate(exc, path) from exc
    try:
        _use_wal(conn, busy_timeout_s)
        todo = migrations.pending(conn)
        if not new and todo and len(todo) < len(migrations.MIGRATIONS):
            _backup_before_upgrade(conn, path)
        elif not new:
            dbbackup.take_if_due(conn, path, backup_every_s)
        if todo:
            migrations.migrate(conn)
        with contextlib.suppress(OSError):  # like a daily copy: never blocks a command
            mark_created(path)
    except BaseException:
        conn.close()
        raise
    return conn


def _use_wal(conn: Connection, busy_timeout_s: float) -> None:
    """Switch a database to WAL (a write, once per database), waiting out other openers.

    Why the loop: SQLite answers the switch with "database is locked" at once, without
    its busy handler, while another connection is opening the same new file; two
    processes starting on a fresh data folder (the tray and a CLI) met it, one in
    forty at four openers (tests/app/test_dbopen.py).
    """
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except DatabaseBusy:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def _backup_before_upgrade(conn: Connection, path: Path) -> None:
    try:
        dbbackup.take(conn, path)
    except OSError as exc:
        raise UserError(
            f"Could not back up {path} before upgrading its schema "
            f"({exc.strerror or type(exc).__name__}); free disk space or fix "
            f"{dbbackup.folder(path)}, then try again.",
            ExitCode.DATA,
        ) from None
