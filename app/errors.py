"""One exit-code enum and one error base for every command-line surface.

Each failure a user can cause or fix is a ``UserError`` with one sentence;
the CLI prints that sentence and exits with its code. Anything else is a bug
and only shows a traceback with ``--debug``.
"""

from __future__ import annotations

import sqlite3
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # unexpected failure (a bug): traceback with --debug
    USAGE = 2  # bad arguments or input the user can correct
    NOTHING_TO_DO = 3  # e.g. no unrated turn to rate
    NOT_AVAILABLE = 4  # a needed system part (keyring, display, agent) is missing
    ALREADY_RUNNING = 5
    BUSY = 6  # another process holds the database's write lock: try again
    DATA = 7  # the data folder or database needs the user: damaged, missing, not writable


class UserError(Exception):
    """A failure explained in one sentence; never shown with a traceback."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class NothingToDo(UserError):
    exit_code = ExitCode.NOTHING_TO_DO


class DataFolderNotWritable(UserError):
    """The data folder (or one of its folders) cannot be created or written."""

    exit_code = ExitCode.DATA


# The two database errors are also the sqlite3 errors they replace, so code that
# tells a failing database from a failing record (spool ingest) keeps working.


class DatabaseBusy(UserError, sqlite3.OperationalError):
    """Another process held the database's write lock for the whole busy timeout."""

    exit_code = ExitCode.BUSY


class DatabaseDamaged(UserError, sqlite3.DatabaseError):
    """The database file cannot be read; `rltray doctor --repair` salvages it."""

    exit_code = ExitCode.DATA


class DatabaseMissing(DatabaseDamaged):
    """rltray.db is missing or empty although this data folder held one before."""
