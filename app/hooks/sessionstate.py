"""Clearing a deleted turn's text from the hook's per-session state (``spool/sessions/``).

Why: between its calls the hook keeps, per agent session, the pending prompt
and a preview of the last answer and of the last rated one (see "per-session
state" in ``hooks/capture_core.py``; a file lives until it is idle for 14
days). Deleting a turn must take its text out of there too, so for each
deleted turn this rewrites its session's file without

- ``prompt`` (and ``prompt_scrubbed``) when it is that turn's prompt, or the
  prompt the hook paired with that turn (asked before the turn was recorded);
- ``last_turn`` / ``last_turn_preview`` and ``last_rated_turn`` /
  ``last_rated_preview`` when they name that turn (so `/rl good` no longer
  targets a turn that is gone), and ``undone_at`` likewise; in an OpenClaw
  session, in each chat's part of the state (``chats``) too.

The file name comes from the hook's own rule
(``capture_core.state_file_name``). Files are read without following a symlink
and rewritten atomically, 0600; a file that cannot be read or rewritten safely
is removed instead (the hook starts that session afresh), because keeping the
text is the one outcome a delete must not have. A hook writing the same file
at that moment could put the old text back, so the file is read again after
the write and cleaned again if it was.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rltray.app.fileio import read_regular_file, write_private_atomic
from rltray.app.hooks.capture_core import state_file_name

MAX_STATE = 4 * 1024 * 1024  # the hook writes no more than this
_TRIES = 3


@dataclass(frozen=True)
class SessionTurn:
    """What names a deleted turn in its session's state."""

    agent: str
    session: str
    turn: str
    prompt: str


def state_file(folder: Path, agent: str, session: str) -> Path:
    """The hook's state file for this agent's session (the hook's own naming rule)."""
    return folder / state_file_name(agent, session)


def _same_text(a: Any, b: str) -> bool:
    return isinstance(a, str) and bool(b.strip()) and " ".join(a.split()) == " ".join(b.split())


def clean(state: dict[str, Any], turn: SessionTurn) -> bool:
    """Remove ``turn``'s text and id from one session's state; whether anything changed.

    An OpenClaw session keeps each chat's newest turn and preview apart
    (``state["chats"][<channel>:<chat>]``, ``events_openclaw._InChat``): each is cleaned
    the same way, or a deleted answer's preview stayed for `/rl` to show."""
    changed = False
    chats = state.get("chats")
    for part in chats.values() if isinstance(chats, dict) else ():
        if isinstance(part, dict):
            changed = clean(part, turn) or changed
    was_last = state.get("last_turn") == turn.turn
    written = state.get("written")
    was_written = isinstance(written, dict) and written.get("turn") == turn.turn
    if "prompt" in state:
        asked, answered = state.get("prompt_at"), state.get("last_turn_at")
        paired = (was_last or was_written) and (
            not isinstance(asked, (int, float))
            or not isinstance(answered, (int, float))
            or asked <= answered
        )
        if paired or _same_text(state["prompt"], turn.prompt):
            state.pop("prompt", None)
            state.pop("prompt_scrubbed", None)
            changed = True
    for name, keys in (
        ("last_turn", ("last_turn", "last_turn_preview")),
        ("last_rated_turn", ("last_rated_turn", "last_rated_preview")),
        ("undone_at", ("undone_at",)),
    ):
        if state.get(name) == turn.turn:
            for key in keys:
                state.pop(key, None)
            changed = True
    return changed


def _load(path: Path) -> dict[str, Any] | None:
    """The state in ``path``, None when there is none; OSError or ValueError when unusable."""
    try:
        data = read_regular_file(path, MAX_STATE + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_STATE:
        raise ValueError("state file too large")
    state = json.loads(data.decode("utf-8", "replace"))
    if not isinstance(state, dict):
        raise ValueError("state file is not a JSON object")
    return state


def _forget_in(path: Path, turns: list[SessionTurn]) -> None:
    for _ in range(_TRIES):
        state = _load(path)
        if state is None:
            return
        changed = False
        for turn in turns:
            changed = clean(state, turn) or changed
        if not changed:
            return
        text = json.dumps(state, ensure_ascii=True, separators=(",", ":"))
        write_private_atomic(path, text.encode("ascii"), mode=0o600)
    raise ValueError("the hook kept rewriting the file")


def forget(folder: Path, turns: Iterable[SessionTurn]) -> list[Path]:
    """Clear these turns from their sessions' state files in ``folder``; the files removed.

    A file removed is one that could not be cleaned in place (unreadable,
    a symlink, not JSON, or rewritten by the hook each time).
    """
    if folder.is_symlink() or not folder.is_dir():
        return []  # the hook never writes through a linked folder, so nothing of ours is there
    by_file: dict[Path, list[SessionTurn]] = {}
    for turn in turns:
        by_file.setdefault(state_file(folder, turn.agent, turn.session), []).append(turn)
    removed = []
    for path, these in by_file.items():
        try:
            _forget_in(path, these)
        except (OSError, UnicodeError, ValueError):  # UnsafePathError is an OSError
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # unlinks a symlink itself, never its target
                removed.append(path)
    return removed
