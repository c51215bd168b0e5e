"""rltray's database: captured turns, ratings with exact history, training runs, adapters, events.

Why it looks like this:
- One SQLite file in WAL mode with a busy timeout, because the tray, the CLI,
  the web server and tests open it at the same time from different processes.
  Every write is a short ``BEGIN IMMEDIATE`` transaction, so writers queue on
  the busy timeout instead of failing halfway with "database is locked".
- One connection per Store, shared by the tray's threads behind a lock
  (``check_same_thread=False``), so one Store object can be handed around.
- Ratings are never updated in place: re-rating withdraws the active rating and
  inserts a new one, undo sets ``withdrawn_at``. Training can then say exactly
  which judgement it used, and nothing a user did is lost.
- Timestamps are ISO-8601 UTC text in one fixed format so text order is time order.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.app import dbopen, migrations

if TYPE_CHECKING:
    from rltray.app.paths import Paths

BUSY_TIMEOUT_S = 10.0
SOURCES = ("cli", "agent", "notification", "tray", "web")
RUN_STATUSES = ("queued", "running", "paused", "done", "failed", "cancelled")
ADAPTER_STATUSES = ("candidate", "active", "rejected", "rolled-back", "superseded")
_EXPORT_PAGE = 500


class StoreError(Exception):
    """A request the database cannot satisfy (unknown turn, bad value), in one sentence."""


def utc_iso(value: datetime | str | None = None) -> str:
    """Normalise a time to ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00`` (now when None).

    Strings from hooks may end in ``Z`` or carry another offset; text that does
    not parse is kept as given rather than dropped.
    """
    if value is None:
        value = datetime.now(timezone.utc)
    if isinstance(value, str):
        text = value.strip()
        try:
            value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            return text
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds")


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


@dataclass(frozen=True)
class Run:
    id: str
    status: str
    started_at: str
    finished_at: str | None
    metrics: dict[str, Any]
    error: str | None
    adapter_version: int | None


@dataclass(frozen=True)
class Adapter:
    version: int
    base_model: str
    parent_version: int | None
    status: str
    path: str
    metrics: dict[str, Any]
    ollama_tag: str | None
    baseline: float | None
    created_at: str


_RATING_COLS = (
    "id, turn_id, value, comment, source, rated_at, withdrawn_at, withdrawn_by, trained_run_id"
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


_RUN_COLS = "id, status, started_at, finished_at, metrics, error, adapter_version"
_ADAPTER_COLS = (
    "version, base_model, parent_version, status, path, metrics, ollama_tag, baseline, created_at"
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


def _run(row: tuple[Any, ...]) -> Run:
    return Run(row[0], row[1], row[2], row[3], json.loads(row[4] or "{}"), row[5], row[6])


def _adapter(row: tuple[Any, ...]) -> Adapter:
    return Adapter(
        row[0], row[1], row[2], row[3], row[4], json.loads(row[5] or "{}"), row[6], row[7], row[8]
    )


class Store:
    """All queries over one database file. Thread-safe; several processes may share the file."""

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

    @classmethod
    def open(cls, paths: Paths) -> Store:
        return cls(paths.ensure().db)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Store:
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
    def batch(self) -> Iterator[Store]:
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
            cur = conn.execute(
                "INSERT INTO turns (source_key, agent, session, turn, prompt, response, context,"
                " cwd, model, captured_at, ingested_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT (source_key) DO NOTHING",
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

    # -- ratings -------------------------------------------------------------

    def rate(
        self,
        turn_id: int,
        value: int,
        source: str,
        comment: str | None = None,
        at: datetime | None = None,
    ) -> Rating:
        """Give a turn a rating; an earlier active rating is withdrawn, not overwritten."""
        if value not in (1, -1) or isinstance(value, bool):
            raise StoreError(f"A rating is +1 (good) or -1 (bad), not {value!r}.")
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
                "INSERT INTO ratings (turn_id, value, comment, source, rated_at)"
                " VALUES (?,?,?,?,?)",
                (turn_id, value, comment or None, source, when),
            )
            row = conn.execute(f"SELECT {_RATING_COLS} FROM ratings WHERE id = ?", (cur.lastrowid,))
            return _rating(row.fetchone())

    def undo(self, source: str, turn_id: int | None = None) -> Rating | None:
        """Withdraw the newest active rating (or that turn's); returns it, or None if none."""
        _check_source(source)
        with self._write() as conn:
            sql = f"SELECT {_RATING_COLS} FROM ratings WHERE withdrawn_at IS NULL"
            params: tuple[Any, ...] = ()
            if turn_id is not None:
                sql, params = sql + " AND turn_id = ?", (turn_id,)
            row = conn.execute(sql + " ORDER BY rated_at DESC, id DESC LIMIT 1", params).fetchone()
            if row is None:
                return None
            when = utc_iso()
            conn.execute(
                "UPDATE ratings SET withdrawn_at = ?, withdrawn_by = ? WHERE id = ?",
                (when, source, row[0]),
            )
            fresh = conn.execute(f"SELECT {_RATING_COLS} FROM ratings WHERE id = ?", (row[0],))
            return _rating(fresh.fetchone())

    def latest_rating(self) -> Rating | None:
        """The rating given last, withdrawn or not: what `undo` means by "my last rating"."""
        rows = self._read(
            f"SELECT {_RATING_COLS} FROM ratings ORDER BY rated_at DESC, id DESC LIMIT 1"
        )
        return _rating(rows[0]) if rows else None

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

    def mark_trained(self, rating_ids: Iterable[int], run_id: str) -> int:
        """Record that a run trained on these ratings; returns how many rows changed."""
        ids = [int(i) for i in rating_ids]
        changed = 0
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise StoreError(f"There is no training run {run_id!r}.")
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                cur = conn.execute(
                    f"UPDATE ratings SET trained_run_id = ? WHERE id IN ({marks})", (run_id, *chunk)
                )
                changed += cur.rowcount
        return changed

    def training_examples(self, *, untrained_only: bool = False) -> list[dict[str, Any]]:
        """Active ratings joined with their turns, oldest rating first (for building a job)."""
        sql = (
            "SELECT r.id, r.value, r.rated_at, r.trained_run_id, t.id, t.source_key, t.agent,"
            " t.prompt, t.response, t.context FROM ratings r JOIN turns t ON t.id = r.turn_id"
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
            }
            for r in self._read(sql)
        ]

    # -- reporting -----------------------------------------------------------

    def counts(self) -> dict[str, Any]:
        with self._lock:
            (turns,) = self.conn.execute("SELECT COUNT(*) FROM turns").fetchone()
            good, bad, untrained = self.conn.execute(
                "SELECT COALESCE(SUM(value = 1), 0), COALESCE(SUM(value = -1), 0),"
                " COALESCE(SUM(trained_run_id IS NULL), 0) FROM ratings WHERE withdrawn_at IS NULL"
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
                        "comment": t.rating.comment,
                        "source": t.rating.source,
                        "rated_at": t.rating.rated_at,
                    },
                }

    # -- events --------------------------------------------------------------

    def log_event(self, kind: str, message: str, data: dict[str, Any] | None = None) -> None:
        blob = None if data is None else json.dumps(data, ensure_ascii=False, default=str)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO events (at, kind, message, data) VALUES (?,?,?,?)",
                (utc_iso(), kind, message, blob),
            )

    def events(self, limit: int = 50) -> list[dict[str, Any]]:
        """Newest first."""
        rows = self._read(
            "SELECT id, at, kind, message, data FROM events ORDER BY at DESC, id DESC LIMIT ?",
            (limit,),
        )
        return [
            {
                "id": i,
                "at": at,
                "kind": k,
                "message": m,
                "data": None if d is None else json.loads(d),
            }
            for i, at, k, m, d in rows
        ]

    # -- training runs -------------------------------------------------------

    def add_run(self, run_id: str, *, status: str = "running", at: datetime | None = None) -> Run:
        _check_choice("run status", status, RUN_STATUSES)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO runs (id, status, started_at) VALUES (?,?,?)",
                (run_id, status, utc_iso(at)),
            )
        return self._get_run(run_id)

    def set_run_status(self, run_id: str, status: str) -> Run:
        """Move a run between queued / running / paused without finishing it."""
        _check_choice("run status", status, RUN_STATUSES)
        with self._write() as conn:
            if (
                conn.execute("UPDATE runs SET status = ? WHERE id = ?", (status, run_id)).rowcount
                == 0
            ):
                raise StoreError(f"There is no training run {run_id!r}.")
        return self._get_run(run_id)

    def finish_run(
        self,
        run_id: str,
        status: str,
        *,
        metrics: dict[str, Any] | None = None,
        error: str | None = None,
        adapter_version: int | None = None,
        at: datetime | None = None,
    ) -> Run:
        _check_choice("run status", status, RUN_STATUSES)
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, metrics = ?, error = ?,"
                " adapter_version = COALESCE(?, adapter_version) WHERE id = ?",
                (
                    status,
                    utc_iso(at),
                    json.dumps(metrics or {}, default=float),
                    error,
                    adapter_version,
                    run_id,
                ),
            )
            if cur.rowcount == 0:
                raise StoreError(f"There is no training run {run_id!r}.")
        return self._get_run(run_id)

    def get_run(self, run_id: str) -> Run | None:
        rows = self._read(f"SELECT {_RUN_COLS} FROM runs WHERE id = ?", (run_id,))
        return _run(rows[0]) if rows else None

    def _get_run(self, run_id: str) -> Run:
        run = self.get_run(run_id)
        assert run is not None
        return run

    def list_runs(self, limit: int = 20) -> list[Run]:
        """Newest first."""
        rows = self._read(
            f"SELECT {_RUN_COLS} FROM runs ORDER BY started_at DESC, id DESC LIMIT ?", (limit,)
        )
        return [_run(r) for r in rows]

    # -- adapters ------------------------------------------------------------

    def add_adapter(
        self,
        base_model: str,
        path: str | os.PathLike[str],
        *,
        parent_version: int | None = None,
        status: str = "candidate",
        metrics: dict[str, Any] | None = None,
        ollama_tag: str | None = None,
        baseline: float | None = None,
        version: int | None = None,
    ) -> Adapter:
        """Register an adapter folder; the version is the next integer unless given."""
        _check_choice("adapter status", status, ADAPTER_STATUSES)
        if status == "active":
            raise StoreError(
                "Register an adapter as a candidate, then activate it with set_adapter_status."
            )
        with self._write() as conn:
            if version is None:
                (version,) = conn.execute(
                    "SELECT COALESCE(MAX(version), 0) + 1 FROM adapters"
                ).fetchone()
            conn.execute(
                "INSERT INTO adapters (version, base_model, parent_version, status, path, metrics,"
                " ollama_tag, baseline, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    version,
                    base_model,
                    parent_version,
                    status,
                    str(path),
                    json.dumps(metrics or {}, default=float),
                    ollama_tag,
                    baseline,
                    utc_iso(),
                ),
            )
        return self._get_adapter(int(version))

    def set_adapter_status(self, version: int, status: str) -> Adapter:
        """Change an adapter's status; activating one marks the previous active one superseded.

        (Rolling back is two calls: the current version to ``rolled-back``, then
        the older one to ``active``.)
        """
        _check_choice("adapter status", status, ADAPTER_STATUSES)
        with self._write() as conn:
            if (
                conn.execute("SELECT 1 FROM adapters WHERE version = ?", (version,)).fetchone()
                is None
            ):
                raise StoreError(f"There is no adapter version {version}.")
            if status == "active":
                conn.execute(
                    "UPDATE adapters SET status = 'superseded'"
                    " WHERE status = 'active' AND version != ?",
                    (version,),
                )
            conn.execute("UPDATE adapters SET status = ? WHERE version = ?", (status, version))
        return self._get_adapter(version)

    def set_adapter_ollama_tag(self, version: int, tag: str | None) -> Adapter:
        with self._write() as conn:
            if (
                conn.execute(
                    "UPDATE adapters SET ollama_tag = ? WHERE version = ?", (tag, version)
                ).rowcount
                == 0
            ):
                raise StoreError(f"There is no adapter version {version}.")
        return self._get_adapter(version)

    def get_adapter(self, version: int) -> Adapter | None:
        rows = self._read(f"SELECT {_ADAPTER_COLS} FROM adapters WHERE version = ?", (version,))
        return _adapter(rows[0]) if rows else None

    def _get_adapter(self, version: int) -> Adapter:
        adapter = self.get_adapter(version)
        assert adapter is not None
        return adapter

    def active_adapter(self) -> Adapter | None:
        rows = self._read(f"SELECT {_ADAPTER_COLS} FROM adapters WHERE status = 'active'")
        return _adapter(rows[0]) if rows else None

    def list_adapters(self) -> list[Adapter]:
        """Newest version first."""
        return [
            _adapter(r)
            for r in self._read(f"SELECT {_ADAPTER_COLS} FROM adapters ORDER BY version DESC")
        ]

    def set_run_metrics(self, run_id: str, metrics: dict[str, Any]) -> Run:
        """Replace a going run's metrics (its progress) without finishing it."""
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE runs SET metrics = ? WHERE id = ?",
                (json.dumps(metrics, default=float), run_id),
            )
            if cur.rowcount == 0:
                raise StoreError(f"There is no training run {run_id!r}.")
        return self._get_run(run_id)


def _check_choice(what: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise StoreError(f"Unknown {what} {value!r}; use one of {', '.join(allowed)}.")


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise StoreError(f"Unknown rating source {source!r}; use one of {', '.join(SOURCES)}.")
