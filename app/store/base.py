"""The database connection every part of the store shares: one file, short write transactions.

Why it looks like this:
- One SQLite file in WAL mode with a busy timeout, because the tray, the CLI,
  the web server and tests open it at the same time from different processes.
  Every write is a short ``BEGIN IMMEDIATE`` transaction, so writers queue on
  the busy timeout instead of failing halfway with "database is locked".
- One connection per Store, shared by the tray's threads behind a lock
  (``check_same_thread=False``), so one Store object can be handed around.
- Timestamps are ISO-8601 UTC text in one fixed format so text order is time order.

The tables live in their own modules (store_turns, store_runs, store_adapters,
store_events); ``store.Store`` joins them into the one object callers use.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rltray.app.store import migrations
from rltray.app.store import opening as dbopen

BUSY_TIMEOUT_S = 10.0
SOURCES = ("cli", "agent", "notification", "tray", "web", "api")


class StoreError(Exception):
    """A request the database cannot satisfy (unknown turn, bad value), in one sentence."""


def parse_iso(text: str) -> datetime:
    """An ISO-8601 time as hooks and agents write it (a trailing ``Z``/``z`` means UTC).

    Python 3.10's ``fromisoformat`` rejects the ``Z``; raises ValueError for
    anything else that is not a time.
    """
    text = text.strip()
    return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)


def utc_iso(value: datetime | str | None = None) -> str:
    """Normalise a time to ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00`` (now when None).

    Strings from hooks may end in ``Z`` or carry another offset; text that does
    not parse is kept as given rather than dropped.
    """
    if value is None:
        value = datetime.now(timezone.utc)
    if isinstance(value, str):
        try:
            value = parse_iso(value)
        except ValueError:
            return value.strip()
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds")



#: Most ``?`` placeholders in one statement: SQLite builds before 3.32 allow 999.
IN_CHUNK = 500


def in_chunks(values: Sequence[Any]) -> Iterator[tuple[list[Any], str]]:
    """``values`` in slices small enough for one ``IN (...)``, each with its placeholders."""
    for start in range(0, len(values), IN_CHUNK):
        chunk = list(values[start : start + IN_CHUNK])
        yield chunk, ",".join("?" * len(chunk))


def _check_choice(what: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise StoreError(f"Unknown {what} {value!r}; use one of {', '.join(allowed)}.")


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise StoreError(f"Unknown rating source {source!r}; use one of {', '.join(SOURCES)}.")


class StoreBase:
    """The connection and its transactions; thread-safe; several processes may share the file."""

    def __init__(
        self, path: str | os.PathLike[str], *, busy_timeout_s: float | None = None
    ) -> None:
        """Open (or create) the file; see ``dbopen.open_database`` for what can go wrong.

        Opening a current database writes nothing and takes no lock. Lock and
        damage errors from any statement arrive as DatabaseBusy / DatabaseDamaged.
        """
        self.path = Path(path)
        self._lock = threading.RLock()
        self._depth = 0  # open write transactions on this connection (0 or 1)
        self._savepoints = 0  # a counter that names savepoints uniquely
        timeout = BUSY_TIMEOUT_S if busy_timeout_s is None else busy_timeout_s
        self._conn: sqlite3.Connection | None = dbopen.open_database(self.path, timeout)


    def backup_if_due(self, take: Callable[[sqlite3.Connection, Path], object]) -> None:
        """Run ``take(conn, path)`` (``dbbackup.take_if_due``) holding this store's lock:
        the backup reads through the store's own connection, which no other thread
        may use meanwhile."""
        with self._lock:
            take(self.conn, self.path)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> StoreBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("The database is closed.")
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction holding the file's write lock from its first statement.

        Inside ``batch()`` it becomes a savepoint of the batch's transaction, so
        every store method can take part in a batch without knowing it.
        """
        with self._lock:
            conn = self.conn
            if self._depth:
                with self.savepoint():
                    yield conn
                return
            conn.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            finally:
                self._depth -= 1
            conn.execute("COMMIT")

    @contextmanager
    def batch(self) -> Iterator[StoreBase]:
        """Many writes in one transaction (one fsync): ingest stores hundreds of records this way.

        Holds the write lock for the whole block; keep blocks short.
        """
        with self._write():
            yield self

    @contextmanager
    def savepoint(self) -> Iterator[sqlite3.Connection]:
        """A nested part of the current transaction that rolls back alone on error.

        Ingest wraps each record in one, so a record that fails halfway leaves
        nothing behind while the rest of its batch is kept.
        """
        with self._lock:
            conn = self.conn
            if not self._depth:
                raise StoreError("A savepoint needs an open batch.")
            self._savepoints += 1
            name = f"sp{self._savepoints}"
            conn.execute(f"SAVEPOINT {name}")
            try:
                yield conn
            except BaseException:
                conn.execute(f"ROLLBACK TO {name}")
                conn.execute(f"RELEASE {name}")
                raise
            conn.execute(f"RELEASE {name}")

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self.conn.execute(sql, tuple(params)).fetchall()

    def change_mark(self) -> tuple[int, int]:
        """A value that moves whenever anything in the file changes: SQLite's
        ``data_version`` (commits by any other connection, other processes included)
        and this connection's own ``total_changes``. Two equal marks mean the same
        data, so a reader polling for changes can skip its full read."""
        with self._lock:
            version = int(self.conn.execute("PRAGMA data_version").fetchone()[0])
            return version, int(self.conn.total_changes)

    def checkpoint(self, wait_s: float = 1.0) -> bool:
        """Copy the write-ahead log into the file and empty it; whether that completed.

        Waits at most ``wait_s`` for other connections (a reader can hold the
        log); deleting a turn calls this so its old pages leave the log too.
        """
        with self._lock:
            conn = self.conn
            (before,) = conn.execute("PRAGMA busy_timeout").fetchone()
            conn.execute(f"PRAGMA busy_timeout = {int(wait_s * 1000)}")
            try:
                busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                conn.execute(f"PRAGMA busy_timeout = {int(before)}")
            return not busy

    def schema_version(self) -> int:
        with self._lock:
            return len(migrations.applied(self.conn))

    def integrity_check(self) -> str:
        """``ok`` or SQLite's first complaints (used by `rltray doctor`); never raises for damage.

        A file too damaged to check answers with the reason instead of an exception.
        """
        try:
            rows = self._read("PRAGMA integrity_check")
        except sqlite3.DatabaseError as exc:  # DatabaseDamaged is one
            if isinstance(exc, sqlite3.OperationalError):
                raise
            return str(exc.__cause__ or exc)
        return "ok" if rows and rows[0][0] == "ok" else "; ".join(str(r[0]) for r in rows[:5])

