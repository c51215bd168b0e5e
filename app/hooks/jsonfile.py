"""Read and re-write a user's JSON file without disturbing how it looks.

Agent settings files belong to the user: when rltray adds an entry, the rest
of the file should come back the way they wrote it — same key order, same
indentation, same line endings, same byte-order mark — so that a diff of
their dotfiles shows only our lines. Parse errors become one sentence naming
the file, because the installer refuses to touch a file it cannot read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_BOM = "\ufeff"
_INDENT = re.compile(r"^[\[{][^\n]*\n([ \t]+)\S", re.MULTILINE)


class JSONFileError(ValueError):
    """A JSON file rltray cannot read; the message is one sentence for the user."""


def parse(data: bytes, path: Path | str) -> Any:
    """Decode ``data`` (UTF-8, optional BOM); raise JSONFileError naming ``path``.

    Blank files count as an empty object: an agent that finds an empty
    settings file treats it as "no settings", and so do we.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise JSONFileError(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})."
        ) from exc
    if not text.strip():
        return {}
    try:
        return json.loads(text, object_pairs_hook=_no_twice, parse_constant=_no_constant,
                          parse_float=_finite)  # fmt: skip
    except json.JSONDecodeError as exc:
        raise JSONFileError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})."
        ) from exc
    except _Unfaithful as exc:  # written back, it would say something else
        raise JSONFileError(f"{path} {exc}; rltray would not write it back the same.") from exc


class _Unfaithful(ValueError):
    """A file json.loads reads but json.dumps would not write back with the same meaning."""


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object; a key given twice is refused (all but the last would be dropped)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Unfaithful(f"has the key {key!r} twice in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise _Unfaithful(f"holds {name}, which JSON does not allow")


def _finite(text: str) -> float:
    """A number; one too large for a float (read as infinity, written as Infinity) is refused."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Unfaithful(f"holds the number {text}, too large to write back")
    return value


def parse_object(data: bytes, path: Path | str) -> dict[str, Any]:
    """Like :func:`parse`, but the top level must be a JSON object."""
    value = parse(data, path)
    if not isinstance(value, dict):
        raise JSONFileError(f"{path} must hold a JSON object at the top level, not {_kind(value)}.")
    return value


def detect_indent(text: str, default: str = "  ") -> str:
    """The indentation the user's file uses for its first nested line, else ``default``."""
    match = _INDENT.search(text.lstrip(_BOM).lstrip())
    return match.group(1) if match else default


def dumps_like(value: Any, original: bytes | None) -> bytes:
    """Serialise ``value`` in the style of ``original`` (a new file gets 2 spaces, LF, no BOM)."""
    text = original.decode("utf-8-sig") if original else ""
    out = json.dumps(value, indent=detect_indent(text), ensure_ascii=False)
    if not original or original.endswith(b"\n"):
        out += "\n"
    if original and b"\r\n" in original:
        out = out.replace("\n", "\r\n")
    if original and original.startswith(_BOM.encode()):
        out = _BOM + out
    return out.encode("utf-8")


def _kind(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
