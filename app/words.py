"""How rltray words things for people: one-line previews, local times, good/bad, versions.

The ground floor of the house (ARCHITECTURE.md): every face (CLI, tray,
notifications, web pages) formats with these, so a turn reads the same
wherever it is shown. Standard library only.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone

from rltray.app.errors import UserError

#: A turn in a terminal line or a tray menu item.
LINE_CHARS = 72
#: A turn's answer in a notification's body.
NOTIFICATION_CHARS = 200


#: A Markdown code fence's own line (```python, ~~~): markup, not what the answer says.
_FENCE_LINE = re.compile(r"^[ \t]*(?:```|~~~)[^\n`]*$", re.MULTILINE)


def preview(text: str, limit: int = LINE_CHARS) -> str:
    """``text`` on one line: code fences dropped, whitespace collapsed, at most
    ``limit`` characters (an answer that opens with code reads as its code, not
    as "```python")."""
    flat = " ".join(_FENCE_LINE.sub("", text).split())
    if len(flat) <= limit:
        return flat
    return flat[: limit - 1].rstrip() + "…"


def folder(path: str | None) -> str:
    """A turn's project folder as a person reads it: the home folder as ``~``."""
    if not path:
        return ""
    home = os.path.expanduser("~")
    if home not in ("", "~", os.sep) and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home):]
    return path


def local_time(iso: str | None) -> str:
    """A stored UTC timestamp as the user's local minute, for terminal output.

    JSON output keeps the full ISO-8601 value; people read the minute.
    """
    if not iso:
        return "—"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M")


def word(value: int) -> str:
    """A rating's value as the word the user typed: ``good`` or ``bad``."""
    return "good" if value > 0 else "bad"


#: The most digits a version number has: 18 always fit SQLite's 64-bit INTEGER, the bound
#: of the local API's ``Version`` (app/api/input.py ``VERSION_PATTERN``).
VERSION_DIGITS = 18


def parse_version(text: int | str | None) -> int | None:
    """`v3`, `3` or 3 → 3; None stays None (the default target).

    Bounded like the API's ``Version``: a bigger number names no row, and binding it
    to a query raised OverflowError ("unexpected error") instead of one sentence.
    """
    if text is None or (isinstance(text, int) and 0 <= text < 10**VERSION_DIGITS):
        return text
    digits = str(text).strip().lower().removeprefix("v")
    if not (digits.isascii() and digits.isdigit()):
        raise UserError(f"A version is written like v3 or 3, not {text!r}.")
    if len(digits.lstrip("0")) > VERSION_DIGITS:
        raise UserError(
            f"There is no version {text}: version numbers have at most {VERSION_DIGITS} "
            "digits; `rltray versions` lists them."
        )
    return int(digits)
