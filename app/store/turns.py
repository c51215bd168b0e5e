"""Captured turns and their ratings: the user's judgements, with exact history.

Ratings are never updated in place: re-rating withdraws the active rating and
inserts a new one, undo sets ``withdrawn_at``. Training can then say exactly
which judgement it used, and nothing a user did is lost.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from types import EllipsisType
from typing import Any

from rltray.app.hooks import sessionstate
from rltray.app.paths import Paths
from rltray.app.store import backup as dbbackup
from rltray.app.store.base import StoreBase, StoreError, _check_source, in_chunks, utc_iso

_EXPORT_PAGE = 500


@dataclass(frozen=True)
class Rating:
    id: int
    turn_id: int
    value: int
    comment: str | None
    source: str
    rated_at: str
    withdrawn_at: str | None = None
    withdrawn_by: str | None = None
    trained_run_id: str | None = None
    score: int | None = None  # 1-5 when graded (value is then its class)

    @property
    def active(self) -> bool:
        return self.withdrawn_at is None


@dataclass(frozen=True)
class Turn:
    id: int
    source_key: str
    agent: str
    session: str
    turn: str
    prompt: str
    response: str
    context: list[dict[str, Any]]
    cwd: str | None
    model: str | None
    captured_at: str
    rating: Rating | None = None
    ingested_at: str | None = None



def key_hash(source_key: str) -> str:
    """What stays of a deleted turn: a hash of its agent:session:turn key, no text."""
    return hashlib.sha256(source_key.encode("utf-8")).hexdigest()


def forget(conn: sqlite3.Connection, source_keys: list[str]) -> int:
    """Delete these turns with their ratings and tags and leave their tombstones; how many.

    The one statement of what deleting a turn removes, run on the live database,
    on each backup and on a repaired file, inside the caller's transaction.
    Tables an older file lacks are skipped.
    """
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    now, deleted = utc_iso(), 0
    for chunk, marks in in_chunks(source_keys):
        ids = f"SELECT id FROM turns WHERE source_key IN ({marks})"
        if "deleted_turns" in have:
            conn.executemany(
                "INSERT OR IGNORE INTO deleted_turns (key_hash, deleted_at) VALUES (?, ?)",
                [(key_hash(k), now) for k in chunk],
            )
        if "turn_tags" in have:
            conn.execute(f"DELETE FROM turn_tags WHERE turn_id IN ({ids})", chunk)
        if "id_marks" in have:  # the deleted ids are never given again (migration m011)
            for table, ids_of in (("turns", ids), ("ratings", f"SELECT id FROM ratings "
                                                   f"WHERE turn_id IN ({ids})")):
                conn.execute(
                    f"INSERT INTO id_marks (name, high) SELECT ?, MAX(id) FROM {table}"
                    f" WHERE id IN ({ids_of}) HAVING MAX(id) IS NOT NULL"
                    " ON CONFLICT (name) DO UPDATE SET high = MAX(high, excluded.high)",
                    (table, *chunk),
                )
        if "lessons" in have:
            # A lesson drawn from comments is keyed by its first turn's id ("c<id>"): the
            # decisions kept under a deleted turn's key (the user's edited words, pinned,
            # global) would pass to the next turn given that id, and be told to the agent.
            conn.execute(
                f"DELETE FROM lessons WHERE user_added = 0 AND key IN (SELECT 'c' || id"
                f" FROM turns WHERE source_key IN ({marks}))", chunk,
            )
        conn.execute(f"DELETE FROM ratings WHERE turn_id IN ({ids})", chunk)
        if "applied_commands" in have:
            conn.execute(
                f"UPDATE applied_commands SET turn_id = NULL WHERE turn_id IN ({ids})", chunk
            )
        deleted += conn.execute(f"DELETE FROM turns WHERE source_key IN ({marks})", chunk).rowcount
    return deleted


def raise_marks(conn: sqlite3.Connection, marks: list[tuple[str, int]]) -> None:
    """Raise ``id_marks`` to at least these (name, high) pairs, where the file has the table.

    A backup holds no row of a turn added after it was taken, so deleting that turn
    there marks nothing: the live file's marks are carried over instead.
    """
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'id_marks'").fetchone():
        return
    conn.executemany(
        "INSERT INTO id_marks (name, high) VALUES (?, ?)"
        " ON CONFLICT (name) DO UPDATE SET high = MAX(high, excluded.high)",
        marks,
    )


#: The next id of a table: above every row's and every deleted row's (``id_marks``).
_NEXT_ID = (
    "(SELECT MAX(COALESCE((SELECT MAX(id) FROM {0}), 0),"
    " COALESCE((SELECT high FROM id_marks WHERE name = '{0}'), 0)) + 1)"
)
_NEXT_TURN, _NEXT_RATING = _NEXT_ID.format("turns"), _NEXT_ID.format("ratings")


def _same_words(comment: str | None) -> str | None:
    # as a browser's text box gives a comment back: line ends as \n, the edges trimmed
    return (comment or "").replace("\r\n", "\n").replace("\r", "\n").strip() or None


class CommentChanged(StoreError):
    """``set_comment``'s refusal: the comment is no longer the one the edit started from."""

    def __init__(self, turn_id: int, current: str | None) -> None:
        self.current = current
        now = f"it now reads \u201c{current}\u201d" if current else "it was removed"
        super().__init__(
            f"The comment of turn {turn_id} was changed in another window meanwhile; {now}. "
            "Yours is not saved: save it again to replace that one."
        )


_RATING_COLS = (
    "id, turn_id, value, comment, source, rated_at, withdrawn_at, withdrawn_by, trained_run_id, "
    "score"
)
_TURN_COLS = (
    "t.id, t.source_key, t.agent, t.session, t.turn, t.prompt, t.response, t.context, t.cwd, "
    "t.model, t.captured_at, t.ingested_at"
)
_TURN_SELECT = (
    f"SELECT {_TURN_COLS}, "
    + ", ".join(f"r.{c.strip()}" for c in _RATING_COLS.split(","))
    + " FROM turns t LEFT JOIN ratings r ON r.turn_id = t.id AND r.withdrawn_at IS NULL"
)



def _rating(row: sqlite3.Row | tuple[Any, ...]) -> Rating:
    return Rating(*row)


def _turn(row: sqlite3.Row | tuple[Any, ...]) -> Turn:
    rating = _rating(row[12:]) if row[12] is not None else None
    return Turn(
        id=row[0],
        source_key=row[1],
        agent=row[2],
        session=row[3],
        turn=row[4],
        prompt=row[5],
        response=row[6],
        context=json.loads(row[7] or "[]"),
        cwd=row[8],
        model=row[9],
        captured_at=row[10],
        ingested_at=row[11],
        rating=rating,
    )


class TurnsAndRatings(StoreBase):
    """Turns as the hooks captured them and every rating given to them."""

    # -- turns ---------------------------------------------------------------

    def add_turn(self, rec: dict[str, Any]) -> tuple[int, bool]:
        """Store a validated spool turn; on a duplicate source key fill only the empty fields.

        Codex can report one turn twice (notify, then Stop with more context);
        whichever arrives first wins each field, and an empty field never
        overwrites a full one, so no captured text is lost.
        """
        try:
            agent, session, turn = str(rec["agent"]), str(rec["session"]), str(rec["turn"])
        except KeyError as exc:
            raise StoreError(
                f"A turn record needs agent, session and turn; {exc} is missing."
            ) from None
        key = f"{agent}:{session}:{turn}"
        context = json.dumps(rec.get("context") or [], ensure_ascii=False)
        values = (
            rec.get("prompt") or "",
            rec.get("response") or "",
            context,
            rec.get("cwd") or None,
            rec.get("model") or None,
        )
        with self._write() as conn:
            if conn.execute(
                "SELECT 1 FROM deleted_turns WHERE key_hash = ?", (key_hash(key),)
            ).fetchone():
                return 0, False  # the user deleted this turn: a re-report must not revive it
            cur = conn.execute(
                "INSERT INTO turns (id, source_key, agent, session, turn, prompt, response,"
                f" context, cwd, model, captured_at, ingested_at) VALUES ({_NEXT_TURN},"
                " ?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (source_key) DO NOTHING",
                (key, agent, session, turn, *values, utc_iso(rec.get("captured_at")), utc_iso()),
            )
            if cur.rowcount == 1:
                return int(cur.lastrowid or 0), True
            conn.execute(
                "UPDATE turns SET"
                " prompt = CASE WHEN prompt = '' THEN ? ELSE prompt END,"
                " response = CASE WHEN response = '' THEN ? ELSE response END,"
                " context = CASE WHEN context IN ('', '[]') THEN ? ELSE context END,"
                " cwd = COALESCE(NULLIF(cwd, ''), ?),"
                " model = COALESCE(NULLIF(model, ''), ?)"
                " WHERE source_key = ?",
                (*values, key),
            )
            (turn_id,) = conn.execute(
                "SELECT id FROM turns WHERE source_key = ?", (key,)
            ).fetchone()
            return int(turn_id), False

    def get_turn(self, turn_id: int) -> Turn | None:
        rows = self._read(f"{_TURN_SELECT} WHERE t.id = ?", (turn_id,))
        return _turn(rows[0]) if rows else None

    def turn_by_source_key(self, key: str) -> Turn | None:
        rows = self._read(f"{_TURN_SELECT} WHERE t.source_key = ?", (key,))
        return _turn(rows[0]) if rows else None

    def turn_ids_after(self, after: int | None) -> list[int]:
        """Ids of turns stored after id ``after`` (ids only grow: migration m011), oldest
        first; ``None``: none, only the mark to start from (``[max id]``, or ``[]``)."""
        if after is None:
            rows = self._read("SELECT MAX(id) FROM turns")
            return [int(rows[0][0])] if rows and rows[0][0] is not None else []
        return [int(r[0]) for r in self._read("SELECT id FROM turns WHERE id > ? ORDER BY id",
                                              (int(after),))]  # fmt: skip

    def newest_turn(self, agent: str | None = None) -> Turn | None:
        """The turn captured last (rated or not): the answer the user just read."""
        turns = self.list_turns(limit=1, agent=agent)
        return turns[0] if turns else None

    def list_turns(
        self, limit: int = 20, offset: int = 0, rated: bool | None = None, agent: str | None = None
    ) -> list[Turn]:
        """Newest captured first, each with its active rating (or None)."""
        where, params = [], []
        if rated is not None:
            where.append("r.id IS NOT NULL" if rated else "r.id IS NULL")
        if agent is not None:
            where.append("t.agent = ?")
            params.append(agent)
        sql = _TURN_SELECT + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY t.captured_at DESC, t.id DESC LIMIT ? OFFSET ?"
        return [_turn(r) for r in self._read(sql, (*params, int(limit), int(offset)))]

    def delete_turns(self, turn_ids: Iterable[int]) -> int:
        """Delete turns for real: the row, every rating and tag of it; returns how many.

        Only a hash of each source key stays (``deleted_turns``) so a re-reported
        turn is not stored again. Jobs and exports read the tables, so a deleted
        turn is in no later export or training job. Its text also leaves every
        other place rltray kept it (``_forget_elsewhere``): the backups, the
        hook's session state and the write-ahead log; ``secure_delete`` (on for
        every connection) overwrites the freed bytes in the file itself. The
        rounds' job files are the service's to clean (``Service.delete_turns``,
        with :meth:`rating_ids_of` read first).
        """
        ids = sorted({int(i) for i in turn_ids})
        keys: list[str] = []
        turns: list[sessionstate.SessionTurn] = []
        with self._write() as conn:
            for chunk, marks in in_chunks(ids):
                rows = conn.execute(
                    "SELECT source_key, agent, session, turn, prompt FROM turns"
                    f" WHERE id IN ({marks})",
                    chunk,
                ).fetchall()
                forget(conn, [r[0] for r in rows])
                keys += [r[0] for r in rows]
                turns += [sessionstate.SessionTurn(*r[1:]) for r in rows]
        if keys:
            self._forget_elsewhere(keys, turns)
        return len(keys)

    def _forget_elsewhere(self, keys: list[str], turns: list[sessionstate.SessionTurn]) -> None:
        """Remove deleted turns from the backups, the hook's session state and the WAL.

        A backup that cannot be cleaned is removed: a copy must not keep what
        the user deleted. The checkpoint is best effort (a reader may hold the
        log); SQLite overwrites the log from its start at the next write after one.
        """
        marks = self._read("SELECT name, high FROM id_marks")
        for copy in dbbackup.backups(self.path):
            try:
                with dbbackup.editing(copy) as conn:
                    forget(conn, keys)
                    raise_marks(conn, marks)  # a copy restored later gives no deleted id again
            except (sqlite3.Error, OSError):
                copy.unlink(missing_ok=True)
        sessionstate.forget(Paths(self.path.parent).hook_state, turns)
        with self._lock:
            if not self._depth:
                with contextlib.suppress(sqlite3.Error):
                    self.checkpoint(wait_s=1.0)

    def set_comment(
        self, turn_id: int, comment: str | None, was: str | EllipsisType | None = ...
    ) -> Rating:
        """Change the comment of a turn's active rating in place.

        A comment explains a judgement, it is not one: editing it neither adds a
        rating to the history nor makes a trained rating count as new again.
        ``was``: the comment the edit started from; when given and the rating's
        comment is no longer it (another window saved one meanwhile), nothing is
        written and ``CommentChanged`` says what it is now.
        """
        with self._write() as conn:
            if was is not ...:
                row = conn.execute(
                    "SELECT comment FROM ratings WHERE turn_id = ? AND withdrawn_at IS NULL",
                    (turn_id,),
                ).fetchone()
                if row is not None and _same_words(row[0]) != _same_words(was):
                    raise CommentChanged(turn_id, row[0])
            cur = conn.execute(
                "UPDATE ratings SET comment = ? WHERE turn_id = ? AND withdrawn_at IS NULL",
                ((comment or "").strip() or None, turn_id),
            )
            if cur.rowcount == 0:
                raise StoreError(f"Turn {turn_id} has no rating to comment on; rate it first.")
            row = conn.execute(
                f"SELECT {_RATING_COLS} FROM ratings WHERE turn_id = ? AND withdrawn_at IS NULL",
                (turn_id,),
            ).fetchone()
            return _rating(row)

    # -- ratings -------------------------------------------------------------

    def was_deleted(self, source_key: str) -> bool:
        """Whether the user deleted the turn of this agent:session:turn key (its tombstone)."""
        return bool(self._read("SELECT 1 FROM deleted_turns WHERE key_hash = ?",
                               (key_hash(source_key),)))

    def rate(
        self,
        turn_id: int,
        value: int,
        source: str,
        comment: str | None = None,
        at: datetime | None = None,
        score: int | None = None,
    ) -> Rating:
        """Give a turn a rating; an earlier active rating is withdrawn, not overwritten.

        ``score`` (1, 2, 4 or 5) grades it; ``value`` must then be its class.
        """
        if value not in (1, -1) or isinstance(value, bool):
            raise StoreError(f"A rating is +1 (good) or -1 (bad), not {value!r}.")
        if score is not None and (score not in (1, 2, 4, 5) or (score > 3) != (value > 0)):
            raise StoreError(f"A score of {score!r} does not go with the rating {value!r}.")
        _check_source(source)
        when = utc_iso(at)
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM turns WHERE id = ?", (turn_id,)).fetchone() is None:
                raise StoreError(f"There is no turn {turn_id} to rate.")
            conn.execute(
                "UPDATE ratings SET withdrawn_at = ?, withdrawn_by = ?"
                " WHERE turn_id = ? AND withdrawn_at IS NULL",
                (when, source, turn_id),
            )
            cur = conn.execute(
                "INSERT INTO ratings (id, turn_id, value, comment, source, rated_at, score)"
                f" VALUES ({_NEXT_RATING}, ?,?,?,?,?,?)",
                (turn_id, value, comment or None, source, when, score),
            )
            row = conn.execute(f"SELECT {_RATING_COLS} FROM ratings WHERE id = ?", (cur.lastrowid,))
            return _rating(row.fetchone())

    def undo(
        self, source: str, turn_id: int | None = None, at: datetime | None = None
    ) -> Rating | None:
        """Withdraw the newest active rating (or that turn's); returns it, or None if none.

        ``at``: when the user said so (a `/rl undo` read from the spool), as ``rate`` takes
        it: a withdrawal stamped when it was read would look later than a rating the user
        gave after it (app/rating.py ``said_since``) and refuse it. None: now.
        """
        _check_source(source)
        with self._write() as conn:
            sql = f"SELECT {_RATING_COLS} FROM ratings WHERE withdrawn_at IS NULL"
            params: tuple[Any, ...] = ()
            if turn_id is not None:
                sql, params = sql + " AND turn_id = ?", (turn_id,)
            row = conn.execute(sql + " ORDER BY id DESC LIMIT 1", params).fetchone()
            if row is None:
                return None
            when = utc_iso(at)
            conn.execute(
                "UPDATE ratings SET withdrawn_at = ?, withdrawn_by = ? WHERE id = ?",
                (when, source, row[0]),
            )
            fresh = conn.execute(f"SELECT {_RATING_COLS} FROM ratings WHERE id = ?", (row[0],))
            return _rating(fresh.fetchone())

    def latest_rating(self) -> Rating | None:
        """The rating stored last, withdrawn or not: what `undo` means by "my last rating".

        In the order ratings were stored (ids only grow), not by ``rated_at``: a press or
        a `/rl` that waited in the spool carries the older time it was given, and by that
        time a rating given while it waited came "last", so `rltray undo` reached past the
        rating that had just taken effect (or said there was nothing to undo).
        """
        rows = self._read(f"SELECT {_RATING_COLS} FROM ratings ORDER BY id DESC LIMIT 1")
        return _rating(rows[0]) if rows else None

    def rating_changes(self, mark: tuple[int, str] | None) -> tuple[list[int], tuple[int, str]]:
        """Turns whose rating changed since ``mark``, and the mark to pass next time.

        For a process that did not make the change (the running rltray when the
        CLI or another window rated): a new rating row has a higher id, and a
        withdrawal without a new rating (undo) a later ``withdrawn_at``. ``None``
        takes today's mark and reports nothing. (A `/rl undo` read from the spool carries
        the time it was typed, seconds earlier: it is missed here only if a withdrawal with
        a later time was stored before this mark was taken.)
        """
        rows = self._read(
            "SELECT COALESCE(MAX(id), 0), COALESCE(MAX(withdrawn_at), '') FROM ratings"
        )
        now: tuple[int, str] = (int(rows[0][0]), str(rows[0][1]))
        if mark is None or now == mark:
            return [], now
        changed = self._read(
            "SELECT DISTINCT turn_id FROM ratings WHERE id > ? OR withdrawn_at > ?", mark
        )
        return [int(r[0]) for r in changed], now

    def command_applied(self, record: str) -> bool:
        """Whether the `/rl` command record of this name was already applied."""
        return bool(self._read("SELECT 1 FROM applied_commands WHERE record = ?", (record,)))

    def mark_command_applied(self, record: str, command: str, turn_id: int | None) -> None:
        """Call inside the command's own transaction, so its effect and this key commit together."""
        with self._write() as conn:
            conn.execute(
                "INSERT INTO applied_commands (record, command, turn_id, applied_at)"
                " VALUES (?,?,?,?)",
                (record, command, turn_id, utc_iso()),
            )

    def active_rating(self, turn_id: int) -> Rating | None:
        rows = self._read(
            f"SELECT {_RATING_COLS} FROM ratings WHERE turn_id = ? AND withdrawn_at IS NULL",
            (turn_id,),
        )
        return _rating(rows[0]) if rows else None

    def rating_history(self, turn_id: int) -> list[Rating]:
        """Every rating the turn ever had, oldest first (withdrawn ones included)."""
        rows = self._read(
            f"SELECT {_RATING_COLS} FROM ratings WHERE turn_id = ? ORDER BY id", (turn_id,)
        )
        return [_rating(r) for r in rows]

    def active_of(self, rating_ids: Iterable[int]) -> set[int]:
        """Which of these ratings are still active (not withdrawn, turn not deleted)."""
        return set(self._rating_ids("withdrawn_at IS NULL AND id", rating_ids))

    def trained_of(self, rating_ids: Iterable[int]) -> set[int]:
        """Which of these ratings a round has trained on (``trained_run_id`` set)."""
        return set(self._rating_ids("trained_run_id IS NOT NULL AND id", rating_ids))

    def rating_ids_of(self, turn_ids: Iterable[int]) -> list[int]:
        """Every rating these turns ever had (withdrawn ones too): what a job file names."""
        return sorted(self._rating_ids("turn_id", turn_ids))

    def _rating_ids(self, column: str, values: Iterable[int]) -> list[int]:
        """Ids of the ratings whose ``column`` (a fixed SQL fragment) is one of ``values``."""
        ids = sorted({int(i) for i in values})
        found: list[int] = []
        for chunk, marks in in_chunks(ids):
            rows = self._read(f"SELECT id FROM ratings WHERE {column} IN ({marks})", chunk)
            found += [int(r[0]) for r in rows]
        return found

    def mark_trained(self, rating_ids: Iterable[int], run_id: str) -> int:
        """Record that a run trained on these ratings; returns how many rows changed."""
        ids = [int(i) for i in rating_ids]
        changed = 0
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise StoreError(f"There is no training run {run_id!r}.")
            for chunk, marks in in_chunks(ids):
                cur = conn.execute(
                    f"UPDATE ratings SET trained_run_id = ? WHERE id IN ({marks})", (run_id, *chunk)
                )
                changed += cur.rowcount
        return changed

    def mark_heldout(self, rating_ids: Iterable[int]) -> int:
        """Put ratings in the standing held-out set (once: an earlier time is kept)."""
        ids = [int(i) for i in rating_ids]
        now = utc_iso()
        changed = 0
        with self._write() as conn:
            for chunk, marks in in_chunks(ids):
                cur = conn.execute(
                    "UPDATE ratings SET heldout_at = ? WHERE heldout_at IS NULL"
                    f" AND id IN ({marks})", (now, *chunk),
                )
                changed += cur.rowcount
        return changed

    def training_examples(self, *, untrained_only: bool = False) -> list[dict[str, Any]]:
        """Active ratings joined with their turns, oldest rating first (for building a job)."""
        sql = (
            "SELECT r.id, r.value, r.rated_at, r.trained_run_id, t.id, t.source_key, t.agent,"
            " t.prompt, t.response, t.context, r.heldout_at, r.score"
            " FROM ratings r JOIN turns t ON t.id = r.turn_id"
            " WHERE r.withdrawn_at IS NULL"
            + (" AND r.trained_run_id IS NULL" if untrained_only else "")
            + " ORDER BY r.rated_at, r.id"
        )
        return [
            {
                "rating_id": r[0],
                "rating": r[1],
                "rated_at": r[2],
                "trained_run_id": r[3],
                "turn_id": r[4],
                "source_key": r[5],
                "agent": r[6],
                "prompt": r[7],
                "response": r[8],
                "context": json.loads(r[9] or "[]"),
                "heldout_at": r[10],
                "score": r[11],
            }
            for r in self._read(sql)
        ]

    # -- reporting -----------------------------------------------------------

    def counts(self) -> dict[str, Any]:
        with self._lock:
            (turns,) = self.conn.execute("SELECT COUNT(*) FROM turns").fetchone()
            # "untrained" counts new ratings only: the standing held-out set (heldout_at)
            # waits untrained by design and must not start rounds on its own.
            good, bad, untrained, heldout = self.conn.execute(
                "SELECT COALESCE(SUM(value = 1), 0), COALESCE(SUM(value = -1), 0),"
                " COALESCE(SUM(trained_run_id IS NULL AND heldout_at IS NULL), 0),"
                " COALESCE(SUM(trained_run_id IS NULL AND heldout_at IS NOT NULL), 0)"
                " FROM ratings WHERE withdrawn_at IS NULL"
            ).fetchone()
            agents = self.conn.execute(
                "SELECT agent, COUNT(*), MAX(captured_at) FROM turns GROUP BY agent ORDER BY agent"
            ).fetchall()
        return {
            "turns": turns,
            "good": good,
            "bad": bad,
            "unrated": turns - good - bad,
            "untrained": untrained,
            "heldout": heldout,
            "by_agent": {a: {"turns": n, "last_captured_at": last} for a, n, last in agents},
        }

    def iter_export(self) -> Iterator[dict[str, Any]]:
        """Every turn, oldest first, with its active rating; read in pages so memory stays flat."""
        last = 0
        while True:
            rows = self._read(
                f"{_TURN_SELECT} WHERE t.id > ? ORDER BY t.id LIMIT ?", (last, _EXPORT_PAGE)
            )
            if not rows:
                return
            for row in rows:
                t = _turn(row)
                last = t.id
                yield {
                    "id": t.id,
                    "source_key": t.source_key,
                    "agent": t.agent,
                    "session": t.session,
                    "turn": t.turn,
                    "prompt": t.prompt,
                    "response": t.response,
                    "context": t.context,
                    "cwd": t.cwd,
                    "model": t.model,
                    "captured_at": t.captured_at,
                    "rating": None
                    if t.rating is None
                    else {
                        "value": t.rating.value,
                        "score": t.rating.score,
                        "comment": t.rating.comment,
                        "source": t.rating.source,
                        "rated_at": t.rating.rated_at,
                    },
                }

