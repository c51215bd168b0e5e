"""A path the user typed, as a Path, or one sentence saying why it is not one.

Its own module below everything that reads a path from a form, the CLI or config.toml
(the model to train, a folder of models, an SSH key file): a typed path is the user's
input, and bad input gets a sentence, never a 500.
"""

from __future__ import annotations

from pathlib import Path

from rltray.app.errors import UserError


def user_path(text: str) -> Path:
    """A path the user typed, ``~`` expanded; one sentence for what cannot be a path.

    ``Path.expanduser`` raises RuntimeError for ``~someone`` with no such user, and a NUL
    byte fails every later call on the path: both came back from forms as a 500.
    """
    if "\0" in text:
        raise UserError(f"{text!r} is not a path: it holds a NUL character.")
    try:
        return Path(text).expanduser()
    except RuntimeError:
        user = text[1:].split("/", 1)[0].split("\\", 1)[0]
        raise UserError(f"{text}: there is no user {user!r} on this machine whose home "
                        "folder ~ could mean.") from None
