"""One exit-code enum and one error base for every command-line surface.

Each failure a user can cause or fix is a ``UserError`` with one sentence;
the CLI prints that sentence and exits with its code. Anything else is a bug
and only shows a traceback with ``--debug``.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # unexpected failure (a bug): traceback with --debug
    USAGE = 2  # bad arguments or input the user can correct
    NOTHING_TO_DO = 3  # e.g. no unrated turn to rate
    NOT_AVAILABLE = 4  # a needed system part (keyring, display, agent) is missing
    ALREADY_RUNNING = 5


class UserError(Exception):
    """A failure explained in one sentence; never shown with a traceback."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class NothingToDo(UserError):
    exit_code = ExitCode.NOTHING_TO_DO
