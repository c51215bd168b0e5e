"""Hook records → database: validate, scrub, store, then delete; refuse loudly, never drop.

The hook program (``hooks/capture.py``, stdlib only) writes one JSON file per
event into ``spool/incoming/``; this module is the tray's side of that contract.
Files are taken in name order (names start with the capture time in ns), so a
``/rl good`` typed after a turn is always applied after that turn is stored; one
whose file sorts first anyway (the clock stepped back between the two hooks) waits
for its turn instead of being refused (``WAIT_FOR_TURN_S``).
A record that fails validation, or that cannot be stored for any reason of its
own, moves to ``spool/rejected/`` (scrubbed) with a ``<name>.reason.txt``
beside it, so nothing is ever silently dropped and one bad record never stops
capture; an error of the database itself leaves the file for the next pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.app import rating
from rltray.app.hooks.capture_core import (
    MAX_CONTEXT,
    MAX_CONTEXT_CHARS,
    MAX_TEXT,
    record_name,
    rl_command,
)
from rltray.app.scrub import scrub
from rltray.app.store.base import StoreError, parse_iso

if TYPE_CHECKING:
    from rltray.app.paths import Paths
    from rltray.app.store import Store, Turn

__all__ = ["IngestReport", "SpoolError", "ingest", "scrub", "validate"]

# MAX_TEXT, MAX_CONTEXT, MAX_CONTEXT_CHARS: the hook's own caps (imported above), so a
# record the hook wrote always passes and one the hook would never write does not.
MAX_COMMENT = 2_000
MAX_FILE = 16 * 1024 * 1024
BATCH = 256  # records per transaction: one fsync each instead of one per record
STALE_TEMP_S = 3600  # a hook's temp file this old belongs to a hook that died mid-write
AGENT = re.compile(r"[a-z0-9][a-z0-9\-]{0,39}")
# 1-5: graded (app/rating.py); lesson: the user's own words become a lesson (app/lessons/)
COMMANDS = ("good", "bad", "undo", "status", "1", "2", "4", "5", "lesson")
ROLES = ("user", "assistant", "system")


#: The ``event`` of a command record that is a notification's Good / Bad the database could
#: not take when it was pressed (the runtime's ``spool_press``): applied as that press, with
#: the notification's rules (it never overrides a rating given elsewhere), not as a `/rl`.
PRESS_EVENT = "rltray-notification"

#: How long a command naming a turn not stored yet waits for it before it is refused: its
#: file can sort before the turn's when the clock stepped back between the two hooks.
WAIT_FOR_TURN_S = 600


class NotYet(Exception):
    """A record that can only be applied once another one is stored: left for a later pass."""


class SpoolError(ValueError):
    """A spool record that does not follow the contract; ``reason`` is one sentence."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class IngestReport:
    turns: int = 0
    duplicates: int = 0  # turns seen before and commands already applied (replays)
    commands: int = 0
    rejected: int = 0
    messages: list[str] = field(default_factory=list)
    new_turns: list[int] = field(default_factory=list)  # ids stored by this pass (to ask about)
    rated: list[int] = field(default_factory=list)  # turns whose rating a /rl command changed
    # of those, the turns a notification's kept press (PRESS_EVENT) rated: the service says
    # a Bad's reply to the session's next prompt, as for a press it stored itself
    pressed: list[int] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)  # agent -> records of an agent turned off
    durations: dict[int, float] = field(default_factory=dict)  # seconds each new turn took

    def merge(self, other: IngestReport) -> None:
        self.new_turns.extend(other.new_turns)
        self.rated.extend(other.rated)
        self.pressed.extend(other.pressed)
        for agent, count in other.ignored.items():
            self.ignored[agent] = self.ignored.get(agent, 0) + count
        self.durations.update(other.durations)
        self.turns += other.turns
        self.duplicates += other.duplicates
        self.commands += other.commands
        self.rejected += other.rejected
        self.messages.extend(other.messages)


# -- validation -------------------------------------------------------------------


def _clean(text: str, limit: int) -> str:
    """Cap and make storable: lone surrogates (from JSON escapes) cannot be written as UTF-8."""
    text = text[:limit]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _text(obj: dict[str, Any], key: str, *, limit: int, required: bool = True) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise SpoolError(f"`{key}` must be a string, not {type(value).__name__}.")
    value = _clean(value, limit)
    if required and not value.strip():
        raise SpoolError(f"`{key}` is empty.")
    return value


def _optional(obj: dict[str, Any], key: str, limit: int) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise SpoolError(f"`{key}` must be a string or null, not {type(value).__name__}.")
    return _clean(value, limit) or None


def _timestamp(obj: dict[str, Any]) -> str:
    value = obj.get("captured_at")
    if not isinstance(value, str):
        raise SpoolError("`captured_at` must be an ISO-8601 time string.")
    text = value.strip()
    try:
        when = parse_iso(text)
    except ValueError:
        raise SpoolError(f"`captured_at` is not an ISO-8601 time: {text[:40]!r}.") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    try:
        return when.astimezone(timezone.utc).isoformat(timespec="microseconds")
    except OverflowError:
        raise SpoolError(
            f"`captured_at` is outside the years a clock can show: {text[:40]!r}."
        ) from None


def _context(value: object) -> list[dict[str, str]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpoolError("`context` must be a list of messages.")
    messages = []
    for i, item in enumerate(value[-MAX_CONTEXT:]):
        if not isinstance(item, dict):
            raise SpoolError(f"context[{i}] must be an object with role and content.")
        role, content = item.get("role"), item.get("content")
        if role not in ROLES:
            raise SpoolError(f"context[{i}].role must be one of {', '.join(ROLES)}.")
        if not isinstance(content, str):
            raise SpoolError(f"context[{i}].content must be a string.")
        messages.append({"role": role, "content": _clean(content, MAX_CONTEXT_CHARS)})
    return messages


def _duration(value: object) -> float | None:
    """Seconds the turn took (prompt hook to stop hook), or None when unknown or implausible."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    seconds = float(value)
    return seconds if 0 <= seconds < 7 * 24 * 3600 else None


def validate(obj: object) -> dict[str, Any]:
    """The record normalised (known fields only, capped, UTC time) or SpoolError(reason)."""
    if not isinstance(obj, dict):
        raise SpoolError(f"A spool record is a JSON object, not {type(obj).__name__}.")
    if obj.get("v") != 1 or isinstance(obj.get("v"), bool):
        raise SpoolError(f"Unsupported record version {obj.get('v')!r} (this rltray reads v1).")
    agent = obj.get("agent")
    if not isinstance(agent, str) or not AGENT.fullmatch(agent):
        raise SpoolError(f"`agent` must be an agent name like 'claude-code', not {agent!r:.60}.")
    base = {
        "v": 1,
        "kind": obj.get("kind"),
        "agent": agent,
        "session": _text(obj, "session", limit=500),
        "captured_at": _timestamp(obj),
    }
    if obj.get("kind") == "turn":
        return {
            **base,
            "turn": _text(obj, "turn", limit=200),
            "prompt": _text(obj, "prompt", limit=MAX_TEXT, required=False),
            "response": _text(obj, "response", limit=MAX_TEXT),
            "context": _context(obj.get("context")),
            "cwd": _optional(obj, "cwd", 4096),
            "model": _optional(obj, "model", 200),
            "event": _optional(obj, "event", 40),
            "transcript": _optional(obj, "transcript", 4096),
            "duration_s": _duration(obj.get("duration_s")),
        }
    if obj.get("kind") == "command":
        command = obj.get("command")
        if command not in COMMANDS:
            raise SpoolError(
                f"`command` must be one of {', '.join(COMMANDS)}, not {command!r:.40}."
            )
        return {
            **base,
            "command": command,
            "target_turn": _optional(obj, "target_turn", 200),
            # OpenClaw: a reaction names "<channel>:<message id>" where the hook knew no turn
            "target_message": _optional(obj, "target_message", 400),
            # ...and the run a piece of a split reply is taken for, where the store has no
            # record of that message id itself (events_openclaw._turn_of_reaction)
            "guess_turn": _optional(obj, "guess_turn", 200),
            "comment": _optional(obj, "comment", MAX_COMMENT),
            "event": _optional(obj, "event", 40),
            # `/rl lesson`: the folder it was typed in (absent from older hooks' records)
            "cwd": _optional(obj, "cwd", 4096),
        }
    if obj.get("kind") == "message":  # OpenClaw: the platform message a turn's answer went as
        return {**base, "turn": _text(obj, "turn", limit=200),
                "channel": _optional(obj, "channel", 100),
                "message_id": _text(obj, "message_id", limit=200)}
    raise SpoolError(
        f"`kind` must be 'turn', 'command' or 'message', not {obj.get('kind')!r:.40}."
    )


def scrub_record(rec: dict[str, Any]) -> dict[str, Any]:
    """The record with credentials redacted from every free-text field."""
    out = dict(rec)
    for key in ("prompt", "response", "comment"):
        if isinstance(out.get(key), str):
            out[key] = scrub(out[key])
    if "context" in out:
        out["context"] = [{**m, "content": scrub(m["content"])} for m in out["context"]]
    return out


# -- ingest -------------------------------------------------------------------------


def _read(path: Path) -> bytes:
    """A spool file's bytes; refuses links and anything not a regular file."""
    from rltray.app.fileio import UnsafePathError, read_regular_file

    try:
        data = read_regular_file(path, limit=MAX_FILE + 1)
    except UnsafePathError:
        if path.is_symlink():
            raise SpoolError(
                "The spool entry is a symbolic link; rltray never follows links."
            ) from None
        raise SpoolError("The spool entry is not a regular file.") from None
    if len(data) > MAX_FILE:
        raise SpoolError(f"The record is larger than {MAX_FILE // (1024 * 1024)} MB.")
    return data


def _scrubbed_copy(path: Path) -> bytes | None:
    """The entry's text with credentials redacted, or None when it is no readable small file.

    Rejected records are kept for the user to read, so they must not keep the
    secrets the database would never have held.
    """
    try:
        data = _read(path)
    except (SpoolError, OSError):
        return None
    return scrub(data.decode("utf-8", "replace")).encode("utf-8")


def _reject(paths: Paths, name: str, reason: str, report: IngestReport, store: Store) -> None:
    from rltray.app.fileio import write_private_atomic

    rejected = paths.spool_rejected
    rejected.mkdir(mode=0o700, parents=True, exist_ok=True)
    source = paths.spool_incoming / name
    copy = _scrubbed_copy(source)
    if copy is None:
        os.replace(source, rejected / name)  # moves a link itself, not its target
    else:
        write_private_atomic(rejected / name, copy)
        os.unlink(source)
    write_private_atomic(rejected / f"{name}.reason.txt", (reason + "\n").encode("utf-8"))
    report.rejected += 1
    report.messages.append(f"Hook record {name} was rejected: {reason} (kept in {rejected}).")
    store.log_event("spool", f"rejected {name}: {reason}", {"file": name})


def _apply_command(rec: dict[str, Any], name: str, store: Store, report: IngestReport) -> None:
    """Rate, undo or note exactly the turn the command names; SpoolError when it cannot.

    The record's name is written in the same transaction as its effect, so a
    record replayed after a crash, or taken by two ingesters at once, does nothing.
    """
    if store.command_applied(name):
        report.duplicates += 1
        return
    report.commands += 1
    command, target = rec["command"], rec["target_turn"]
    where = f"{rec['agent']} session {rec['session']}"
    turn = None
    changed = False
    if command == "lesson":
        _add_lesson(rec, store)
    elif command != "status" and target is None and not rec.get("target_message"):
        store.log_event("command", f"/rl {command} with no captured turn in {where}; nothing done")
    elif command != "status":
        turn = store.turn_by_source_key(f"{rec['agent']}:{rec['session']}:{target}")
        guess = rec.get("guess_turn")
        if turn is None and rec.get("target_message"):  # a reaction the hook could not place
            channel, _, message = rec["target_message"].rpartition(":")
            found = store.turn_by_message(rec["agent"], channel or None, message, rec["session"])
            turn = store.get_turn(found) if found is not None else None
            if turn is None and guess is not None:
                # no record of the id itself: a piece of a split reply, taken for the reply
                # the hook saw next in that chat (the store's exact record always wins)
                target = guess
                turn = store.turn_by_source_key(f"{rec['agent']}:{rec['session']}:{target}")
        if turn is None:
            key = f"{rec['agent']}:{rec['session']}:{target}"
            if store.was_deleted(key):
                raise SpoolError(f"/rl {command} names turn {target!r} of {where}, which the "
                                 "user deleted.")
            if target is not None and _age_s(rec) < WAIT_FOR_TURN_S:
                raise NotYet(name)
            if target is None:  # a reaction or button on a message no stored answer went as
                raise SpoolError(f"{command} on message {rec['target_message']} of {where} "
                                 "names no answer rltray stored.")
            raise SpoolError(
                f"/rl {command} names turn {target!r} of {where}, which was never stored."
            )
        when = datetime.fromisoformat(rec["captured_at"])
        current = store.active_rating(turn.id)
        if command == "undo" and current is not None and rating.given_after(current, when):
            store.log_event("command", f"/rl undo typed in {where} was read after turn "
                            f"{turn.id} was rated again in the {current.source}; kept that")
        elif command == "undo":
            changed = store.undo("agent", turn_id=turn.id, at=when) is not None
            if not changed:
                store.log_event("command", f"/rl undo: turn {turn.id} had no active rating")
        else:
            value, score = rating.parse(command)
            press = rec.get("event") == PRESS_EVENT
            applied = rating.apply(store, turn.id, value, rating.NOTIFICATION if press else "agent",
                                   rec["comment"], at=when, score=score)  # fmt: skip
            changed = applied.changed
            if applied.stale:
                kept = applied.rating
                said = f"{command} pressed on a notification" if press else f"/rl {command} typed"
                since = "rated" if kept.active else "rated and that rating withdrawn"
                store.log_event("command", f"{said} in {where} was read after turn "
                                f"{turn.id} was {since} {rating.label(kept.value, kept.score)} "
                                f"in the {kept.source}; kept that")
    store.mark_command_applied(name, command, None if turn is None else turn.id)
    if changed and turn is not None:
        report.rated.append(turn.id)
        if rec.get("event") == PRESS_EVENT:
            report.pressed.append(turn.id)
    if turn is not None and rec.get("event") == "codex-notify":
        # The prompt hook did not take it (Codex's hooks not trusted yet): tell the user
        # that the `$rl` that went to the model still rated the answer before it.
        said = f"/rl {command} typed in Codex (seen by notify) applied to turn {turn.id}"
        report.messages.append(said + ".")
        store.log_event("command", said, {"file": name})


def _age_s(rec: dict[str, Any]) -> float:
    """Seconds since the record was captured (0 for one from the future)."""
    return max(0.0, (datetime.now(timezone.utc) - parse_iso(rec["captured_at"])).total_seconds())


def _add_lesson(rec: dict[str, Any], store: Store) -> None:
    """`/rl lesson <text>`: a lesson in the user's words for the project it was typed in.

    The project is the folder the hook recorded with it (``cwd``); a record from an
    older hook has none, and then it is the folder of the turn the command names, else
    the newest known folder of that session's turns, else none: a lesson for every
    project. (Before the hook recorded it, `/rl lesson` as a session's first prompt fell
    through to that last case, and a project's note was told in every project.)
    """
    text = (rec.get("comment") or "").strip()
    if not text:
        raise SpoolError("/rl lesson needs the lesson's words after it (/rl lesson <text>).")
    folder = _absolute(rec.get("cwd"))
    if not folder and rec["target_turn"] is not None:
        turn = store.turn_by_source_key(f"{rec['agent']}:{rec['session']}:{rec['target_turn']}")
        folder = _absolute(turn.cwd) if turn is not None else None
    folder = folder or _absolute(store.session_folder(rec["agent"], rec["session"]))
    try:
        key = store.add_lesson(text, folder)
    except StoreError as exc:  # too long: the user reads why in spool/rejected/
        raise SpoolError(str(exc)) from None
    where = folder or "every project"
    store.log_event("lessons", f"lesson {key} added by /rl lesson in {rec['agent']} for {where}")


def _absolute(folder: str | None) -> str | None:
    """``folder`` when it is an absolute path, else None.

    A lesson's project is keyed by its folder's absolute path (``lessonfiles.key``), which
    makes a relative one absolute against the directory the tray happens to run in: a
    lesson from a record naming "shop" or "." was told in whatever project sat there.
    """
    return folder if folder and os.path.isabs(folder) else None


def _store_record(
    paths: Paths, store: Store, name: str, report: IngestReport, ignore: frozenset[str]
) -> None:
    """Validate, scrub and store one record inside the caller's transaction.

    A record of an agent in ``ignore`` (its ``agents.<name>`` setting is off) is
    dropped unread beyond validation: the user asked rltray not to capture it. Not a
    notification's kept press (``PRESS_EVENT``): that is the user's rating of a turn
    already stored, given in rltray itself, which only waited for the database.
    """
    try:
        obj = json.loads(_read(paths.spool_incoming / name).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpoolError(f"The file is not valid UTF-8 JSON ({exc}).") from None
    rec = validate(obj)
    if rec["agent"] in ignore and not (rec["kind"] == "command" and rec["event"] == PRESS_EVENT):
        report.ignored[rec["agent"]] = report.ignored.get(rec["agent"], 0) + 1
        return
    rec = scrub_record(rec)
    if rec["kind"] == "turn" and rl_command(rec["prompt"]) is not None:
        # Never a turn to train on, whichever path captured it (an older hook, another agent):
        # the answer to `/rl bad` is the model's reply to a rating, not to a task.
        said = f"not stored: the prompt of {rec['agent']} turn {rec['turn']!r} is an rltray command"
        report.messages.append(said + ".")
        store.log_event("spool", said, {"file": name})
        return
    if rec["kind"] == "message":
        if store.add_message(rec["agent"], rec["session"], rec["turn"], rec["channel"],
                             rec["message_id"]) is None:
            store.log_event("spool", f"message {rec['message_id']} of {rec['agent']} turn "
                            f"{rec['turn']!r}, which was never stored; not kept", {"file": name})
        return
    if rec["kind"] == "turn":
        turn_id, inserted = store.add_turn(rec)
        if inserted:
            report.turns += 1
            report.new_turns.append(turn_id)
            if rec.get("duration_s") is not None:
                report.durations[turn_id] = rec["duration_s"]
        else:
            report.duplicates += 1
    else:
        _apply_command(rec, name, store, report)


def _is_environmental(exc: BaseException) -> bool:
    """Errors of the database or machine (locked, disk full, damaged file), not of the record.

    These stop ingest and leave the record in place for the next pass; any other
    failure belongs to the one record, which is rejected with the reason.
    """
    return isinstance(exc, (sqlite3.OperationalError, sqlite3.DatabaseError, MemoryError)) and (
        not isinstance(exc, sqlite3.IntegrityError)
    )


def _ingest_batch(
    paths: Paths, store: Store, names: list[str], report: IngestReport, ignore: frozenset[str],
    later: list[str] | None = None,
) -> list[str]:
    """Store a batch in one transaction; the names whose files may now be deleted.

    ``later`` collects the names left for a later pass (:class:`NotYet`).
    """
    done: list[str] = []
    with store.batch():
        for name in names:
            try:
                with store.savepoint():
                    _store_record(paths, store, name, report, ignore)
            except FileNotFoundError:
                continue  # another ingester (the CLI beside the service) took it first
            except NotYet:
                report.commands -= 1  # counted when it is applied or refused
                if later is not None:
                    later.append(name)
                continue
            except SpoolError as exc:
                _safely(paths, store, name, exc.reason, report)
                continue
            except Exception as exc:
                if _is_environmental(exc):
                    raise
                reason = f"It could not be stored ({type(exc).__name__}: {exc})."
                _safely(paths, store, name, reason, report)
                continue
            done.append(name)
    return done


def ingest(
    paths: Paths,
    store: Store,
    progress: Callable[[int, int], None] | None = None,
    ignore: Callable[[], frozenset[str]] = frozenset,
) -> IngestReport:
    """Move every waiting hook record into the database, oldest first, a batch per transaction.

    A record that cannot be stored is rejected with its reason and the rest go
    on. An error of the database itself (locked, disk full) stops ingest and
    leaves that batch and the ones after it in place, so order is kept and the
    next pass retries them. ``progress(done, total)`` is called after each batch.
    ``ignore()``: agents whose capture is turned off (asked only when there is something
    to store: it reads the settings); their records are dropped and counted.
    """
    report = IngestReport()
    incoming = paths.spool_incoming
    if incoming.is_symlink() or (incoming.exists() and not incoming.is_dir()):
        report.messages.append(f"{incoming} is not a plain folder; hook records were not read.")
        return report
    try:
        names = sorted(os.listdir(incoming))
    except FileNotFoundError:
        return report
    now = time.time()
    records: list[str] = []
    for name in names:
        if name.startswith("."):
            if name.endswith(".tmp") and _older_than(incoming / name, now - STALE_TEMP_S):
                _safely(
                    paths, store, name, "An unfinished write left by a hook that stopped.", report
                )
        elif not name.endswith(".json"):
            _safely(
                paths, store, name, "Not a hook record (the name does not end in .json).", report
            )
        else:
            records.append(name)
    skip = ignore() if records else frozenset()
    later: list[str] = []
    batches = [records[start : start + BATCH] for start in range(0, len(records), BATCH)]
    for number, chunk in enumerate(batches):
        tally = IngestReport()
        try:
            stored = _ingest_batch(paths, store, chunk, tally, skip, later)
        except Exception as exc:
            report.messages.append(
                f"Hook records from {chunk[0]} on could not be stored yet "
                f"({type(exc).__name__}: {exc}); each stays in the spool and is retried next time."
            )
            break
        report.merge(tally)
        for name in stored:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(incoming / name)
        if progress is not None:
            progress(min(len(records), (number + 1) * BATCH), len(records))
    else:
        if later and report.turns:  # their turns may have come after them in this pass
            again = IngestReport()
            try:
                stored = _ingest_batch(paths, store, later, again, skip)
            except Exception as exc:  # the database's trouble: they wait for the next pass
                report.messages.append(f"Hook commands could not be applied yet ({exc}).")
                stored = []
            for name in stored:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(incoming / name)
            report.merge(again)
    return report


def _older_than(path: Path, cutoff: float) -> bool:
    try:
        return path.lstat().st_mtime < cutoff
    except OSError:
        return False


def _safely(paths: Paths, store: Store, name: str, reason: str, report: IngestReport) -> None:
    with contextlib.suppress(FileNotFoundError):  # another ingester took it first
        _reject(paths, name, reason, report, store)


def spool_press(
    paths: Paths, turn: Turn, value: int, comment: str | None, pressed: datetime
) -> str:
    """Keep a notification's press as a command record (``PRESS_EVENT``); its file's name.

    For a press the database could not take (held by another process past the busy
    timeout): the record names the turn as a `/rl` does, carries the press's time so
    the rating rules weigh it as given then, and is applied by the next ingest like
    any hook record, so the press survives a busy database and a restart.
    """
    from rltray.app.fileio import write_private_atomic

    record = {
        "v": 1, "kind": "command", "agent": turn.agent, "session": turn.session,
        "command": "good" if value > 0 else "bad", "target_turn": turn.turn,
        "comment": comment[:MAX_COMMENT] if comment else None, "event": PRESS_EVENT,
        "captured_at": pressed.astimezone(timezone.utc).isoformat(timespec="microseconds"),
    }  # fmt: skip
    validate(record)  # what ingest would refuse is refused here, where the caller can say so
    incoming = paths.spool_incoming
    incoming.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = record_name()
    write_private_atomic(incoming / name, json.dumps(record).encode("utf-8"))
    return name
