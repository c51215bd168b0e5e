"""The database schema as an ordered list of named migration functions (llm-style).

Why functions with names instead of one CREATE script: a user's rltray.db
outlives the version that created it. Each function runs once, inside its own
``BEGIN IMMEDIATE`` transaction, and its name is recorded in the
``migrations`` table in the same transaction, so a crash or a second process
opening the same file at the same moment can never apply a step twice or half
of one. New schema changes are new functions appended to ``MIGRATIONS``;
shipped functions are never edited.

Statements are run one at a time with ``execute`` because
``executescript`` would commit the surrounding transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime, timezone

from rltray.app.errors import ExitCode, UserError

Migration = Callable[[sqlite3.Connection], None]


class SchemaTooNew(UserError, RuntimeError):
    """The file was migrated by a newer rltray than this one (one sentence, not a traceback)."""

    exit_code = ExitCode.DATA


def _run(conn: sqlite3.Connection, *statements: str) -> None:
    for sql in statements:
        conn.execute(sql)


def m001_turns_and_ratings(conn: sqlite3.Connection) -> None:
    """Captured turns and the ratings given to them (history kept, one active per turn)."""
    _run(
        conn,
        """
        CREATE TABLE turns (
            id          INTEGER PRIMARY KEY,
            source_key  TEXT NOT NULL UNIQUE,
            agent       TEXT NOT NULL,
            session     TEXT NOT NULL,
            turn        TEXT NOT NULL,
            prompt      TEXT NOT NULL DEFAULT '',
            response    TEXT NOT NULL DEFAULT '',
            context     TEXT NOT NULL DEFAULT '[]',
            cwd         TEXT,
            model       TEXT,
            captured_at TEXT NOT NULL,
            ingested_at TEXT NOT NULL
        )
        """,
        "CREATE INDEX turns_captured ON turns (captured_at, id)",
        "CREATE INDEX turns_agent ON turns (agent, captured_at)",
        """
        CREATE TABLE ratings (
            id           INTEGER PRIMARY KEY,
            turn_id      INTEGER NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
            value        INTEGER NOT NULL CHECK (value IN (1, -1)),
            comment      TEXT,
            source       TEXT NOT NULL,
            rated_at     TEXT NOT NULL,
            withdrawn_at TEXT,
            withdrawn_by TEXT
        )
        """,
        "CREATE INDEX ratings_turn ON ratings (turn_id, rated_at)",
        # At most one active rating per turn: the database, not only the code, keeps this true.
        "CREATE UNIQUE INDEX ratings_one_active ON ratings (turn_id) WHERE withdrawn_at IS NULL",
    )


def m002_runs_and_adapters(conn: sqlite3.Connection) -> None:
    """Training runs, the adapter versions they produce, and which ratings a run used."""
    _run(
        conn,
        """
        CREATE TABLE runs (
            id              TEXT PRIMARY KEY,
            status          TEXT NOT NULL,
            started_at      TEXT NOT NULL,
            finished_at     TEXT,
            metrics         TEXT NOT NULL DEFAULT '{}',
            error           TEXT,
            adapter_version INTEGER
        )
        """,
        """
        CREATE TABLE adapters (
            version        INTEGER PRIMARY KEY,
            base_model     TEXT NOT NULL,
            parent_version INTEGER REFERENCES adapters (version),
            status         TEXT NOT NULL,
            path           TEXT NOT NULL,
            metrics        TEXT NOT NULL DEFAULT '{}',
            ollama_tag     TEXT,
            baseline       REAL,
            created_at     TEXT NOT NULL
        )
        """,
        "CREATE UNIQUE INDEX adapters_one_active ON adapters (status) WHERE status = 'active'",
        "ALTER TABLE ratings ADD COLUMN trained_run_id TEXT REFERENCES runs (id)",
    )


def m003_events(conn: sqlite3.Connection) -> None:
    """A small append-only log of what the app did, shown on the dashboard."""
    _run(
        conn,
        """
        CREATE TABLE events (
            id      INTEGER PRIMARY KEY,
            at      TEXT NOT NULL,
            kind    TEXT NOT NULL,
            message TEXT NOT NULL,
            data    TEXT
        )
        """,
        "CREATE INDEX events_at ON events (at, id)",
    )


def m004_applied_commands(conn: sqlite3.Connection) -> None:
    """Which `/rl` command records were applied, so a replayed or raced record is a no-op.

    The key is the spool file's name (unique per hook call); it is written in the
    same transaction as the command's effect.
    """
    _run(
        conn,
        """
        CREATE TABLE applied_commands (
            record     TEXT PRIMARY KEY,
            command    TEXT NOT NULL,
            turn_id    INTEGER REFERENCES turns (id) ON DELETE SET NULL,
            applied_at TEXT NOT NULL
        )
        """,
    )


def m005_tags_and_deletion(conn: sqlite3.Connection) -> None:
    """Reasons a user tags turns with, and tombstones of deleted turns.

    Deleting a turn removes its row, ratings and tags for real; only a hash of
    its source key stays in ``deleted_turns``, so the same turn re-reported by
    an agent (Codex reports some twice) is not stored again. No text is kept.
    """
    _run(
        conn,
        """
        CREATE TABLE tags (
            id         INTEGER PRIMARY KEY,
            name       TEXT NOT NULL UNIQUE COLLATE NOCASE,
            created_at TEXT NOT NULL
        )
        """,
        """
        CREATE TABLE turn_tags (
            turn_id INTEGER NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
            tag_id  INTEGER NOT NULL REFERENCES tags (id) ON DELETE CASCADE,
            PRIMARY KEY (turn_id, tag_id)
        )
        """,
        "CREATE INDEX turn_tags_tag ON turn_tags (tag_id, turn_id)",
        """
        CREATE TABLE deleted_turns (
            key_hash   TEXT PRIMARY KEY,
            deleted_at TEXT NOT NULL
        )
        """,
        "CREATE INDEX ratings_rated_at ON ratings (rated_at)",
    )
    now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    for name in ("wrong", "verbose", "ignored instructions"):
        conn.execute("INSERT INTO tags (name, created_at) VALUES (?, ?)", (name, now))


def m006_standing_heldout(conn: sqlite3.Connection) -> None:
    """When a rating first went into a round's held-out set (the standing held-out set).

    A rating once held out stays held out, so the gate's evidence grows round
    after round instead of being drawn anew from each round's newest ratings;
    ``app/jobbuild.split_heldout`` rotates the oldest into training past a cap.
    """
    _run(conn, "ALTER TABLE ratings ADD COLUMN heldout_at TEXT")


def m007_graded_ratings(conn: sqlite3.Connection) -> None:
    """A rating's 1-5 score, where the user gave one instead of a plain good or bad.

    ``value`` stays the class (+1 for 4-5, -1 for 1-2), so everything that counts
    good and bad ratings reads on; the trainer gets ``(score - 3) / 2`` as the reward.
    A 3 says neither and is not stored (app/rating.py says why).
    """
    _run(
        conn,
        "ALTER TABLE ratings ADD COLUMN score INTEGER"
        " CHECK (score IS NULL OR score IN (1, 2, 4, 5))",
    )


def m008_lessons(conn: sqlite3.Connection) -> None:
    """What the user decided about lessons (app/lessons/): never the counts behind them.

    A lesson drawn from ratings is computed afresh from the ratings each time, so its
    counts cannot drift; a row here only holds what the user said about it (edited
    words, mute, pin, delete, scope, a contradiction resolved), keyed by the group's
    key. A lesson the user added (`/rl lesson`, `rltray lessons add`) is a row with its
    own text and folder. ``lesson_agents`` records since when lessons go to an agent,
    so "still happening" can compare bad ratings before and after.
    """
    _run(
        conn,
        """
        CREATE TABLE lessons (
            id          INTEGER PRIMARY KEY,
            key         TEXT NOT NULL UNIQUE,
            user_added  INTEGER NOT NULL DEFAULT 0,
            text        TEXT,
            project     TEXT,
            polarity    INTEGER CHECK (polarity IS NULL OR polarity IN (1, -1)),
            scope       TEXT CHECK (scope IS NULL OR scope IN ('project', 'global')),
            muted       INTEGER NOT NULL DEFAULT 0,
            pinned      INTEGER NOT NULL DEFAULT 0,
            deleted_at  TEXT,
            created_at  TEXT NOT NULL,
            updated_at  TEXT NOT NULL
        )
        """,
        """
        CREATE TABLE lesson_agents (
            agent    TEXT PRIMARY KEY,
            on_since TEXT NOT NULL
        )
        """,
    )


def m009_turn_messages(conn: sqlite3.Connection) -> None:
    """The platform message ids a turn's answer was delivered as (OpenClaw: Telegram, Slack, ...).

    A reaction in a chat names a message, not a turn; kept here, it finds its turn after
    any restart of the gateway or the tray. Deleting the turn deletes its messages.
    """
    _run(
        conn,
        """
        CREATE TABLE turn_messages (
            agent      TEXT NOT NULL,
            channel    TEXT NOT NULL DEFAULT '',
            message_id TEXT NOT NULL,
            turn_id    INTEGER NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
            sent_at    TEXT NOT NULL,
            PRIMARY KEY (agent, channel, message_id)
        )
        """,
        "CREATE INDEX turn_messages_turn ON turn_messages (turn_id)",
    )


def m010_lesson_members(conn: sqlite3.Connection) -> None:
    """Which turns were behind a lesson when the user last decided about it or it was seen.

    A lesson drawn from comments is keyed by its first turn (``c<id>``); when that rating
    is withdrawn the group lives on under its next turn's key, and the user's decision
    (muted, deleted, edited words) must follow it there (app/lessons/carry.py). A JSON
    list of the turns' source-key hashes: never reused, unlike a turn id, and no text.
    """
    _run(conn, "ALTER TABLE lessons ADD COLUMN members TEXT")


def m011_id_marks(conn: sqlite3.Connection) -> None:
    """The highest turn and rating id ever given, so a deleted one's id is never given again.

    ``turns.id`` and ``ratings.id`` are INTEGER PRIMARY KEYs without AUTOINCREMENT:
    SQLite gives the newest deleted row's id to the next row. An id held anywhere (a
    browser tab, an API client, a notification, `rltray rate 42` copied from a listing,
    a lesson's key) then named another turn: a rating by it landed there. Rebuilding the
    tables with AUTOINCREMENT would move every row of a user's file; this one table,
    written when turns are deleted (``turns.forget``) and read when one is added, does
    the same for new ids.
    """
    _run(conn, "CREATE TABLE id_marks (name TEXT PRIMARY KEY, high INTEGER NOT NULL)")


def m012_forget_orphan_lessons(conn: sqlite3.Connection) -> None:
    """Drop the lesson decisions a file kept under deleted turns' keys, and mark their ids.

    Before ``turns.forget`` deleted them, deleting a turn left its ``c<id>`` row behind
    (the user's edited words, pinned, global), and ``m011``'s marks start empty: the next
    turn was given that id again, and its new lesson took the old words and was told to
    the agent. A ``c<id>`` row whose turn is gone can only be such a leftover. Ids
    deleted before ``m011`` left no other trace, so only these are marked as given.
    """
    orphans = [
        int(key[1:])
        for (key,) in conn.execute("SELECT key FROM lessons WHERE user_added = 0")
        if key[:1] == "c" and key[1:].isascii() and key[1:].isdigit()
        and conn.execute("SELECT 1 FROM turns WHERE id = ?", (int(key[1:]),)).fetchone() is None
    ]
    if not orphans:
        return
    conn.executemany("DELETE FROM lessons WHERE user_added = 0 AND key = ?",
                     [(f"c{i}",) for i in orphans])
    conn.execute(
        "INSERT INTO id_marks (name, high) VALUES ('turns', ?)"
        " ON CONFLICT (name) DO UPDATE SET high = MAX(high, excluded.high)",
        (max(orphans),),
    )


def m013_turn_message_chats(conn: sqlite3.Connection) -> None:
    """The chat a delivered message is in, part of its key (``turn_messages.chat``).

    A platform numbers messages per chat (Telegram counts each chat's from 1): keyed by
    channel and id alone, the second chat's message 42 was dropped as a duplicate of the
    first's, and a rating of it went to the first chat's turn. SQLite cannot change a
    primary key in place, so the table is rebuilt; a row from before keeps chat '' (not
    known), which a lookup in any chat still finds when nothing in that chat matches.
    """
    _run(
        conn,
        """
        CREATE TABLE turn_messages_m013 (
            agent      TEXT NOT NULL,
            channel    TEXT NOT NULL DEFAULT '',
            chat       TEXT NOT NULL DEFAULT '',
            message_id TEXT NOT NULL,
            turn_id    INTEGER NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
            sent_at    TEXT NOT NULL,
            PRIMARY KEY (agent, channel, chat, message_id)
        )
        """,
        "INSERT INTO turn_messages_m013 (agent, channel, chat, message_id, turn_id, sent_at)"
        " SELECT agent, channel, '', message_id, turn_id, sent_at FROM turn_messages",
        "DROP TABLE turn_messages",
        "ALTER TABLE turn_messages_m013 RENAME TO turn_messages",
        "CREATE INDEX turn_messages_turn ON turn_messages (turn_id)",
    )


def m014_adapter_files(conn: sqlite3.Connection) -> None:
    """The sha256 of each version's weights and config when its result was applied
    (``adapters.files``: JSON ``{file name: hex digest}``; NULL for a version from before).

    Why: a rollback checked only that the folder existed, so a version whose weights were
    deleted or replaced since was made active and published under its old number
    (review 3 r7). ``versions.rollback`` compares the files with these digests first.
    """
    _run(conn, "ALTER TABLE adapters ADD COLUMN files TEXT")


def m015_openclaw_turns_have_no_folder(conn: sqlite3.Connection) -> None:
    """An OpenClaw turn's folder (``turns.cwd``) is NULL: its channel name was stored there.

    Why: the hook wrote the channel ("telegram") as an OpenClaw turn's folder, and lessons
    key a folder by its absolute path, so "telegram" became a folder of whatever directory
    the tray or CLI ran in, and the lessons of those chats went to a real project there
    (review 3, r12). A chat is no folder; the hook stores none since. Only rows whose
    value cannot be a folder the hook saw (no path separator) change.
    """
    _run(
        conn,
        "UPDATE turns SET cwd = NULL WHERE agent = 'openclaw' AND cwd IS NOT NULL"
        " AND instr(cwd, '/') = 0 AND instr(cwd, char(92)) = 0",
    )


MIGRATIONS: tuple[Migration, ...] = (
    m001_turns_and_ratings,
    m002_runs_and_adapters,
    m003_events,
    m004_applied_commands,
    m005_tags_and_deletion,
    m006_standing_heldout,
    m007_graded_ratings,
    m008_lessons,
    m009_turn_messages,
    m010_lesson_members,
    m011_id_marks,
    m012_forget_orphan_lessons,
    m013_turn_message_chats,
    m014_adapter_files,
    m015_openclaw_turns_have_no_folder,
)


def _ensure_table(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
    )


def applied(conn: sqlite3.Connection) -> list[str]:
    """Names of the migrations already applied to this database, in order applied."""
    _ensure_table(conn)
    return [row[0] for row in conn.execute("SELECT name FROM migrations ORDER BY rowid")]


def migrate(conn: sqlite3.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[str]:
    """Apply every missing migration; return the names applied now.

    The connection must be in autocommit mode (``isolation_level=None``).
    A database that is already current is only read: no write lock, no
    write, so opening it never waits for (or fails on) another writer.
    Each missing step re-checks the table after taking the write lock, so two
    processes racing to open a new file both end up with one schema.
    """
    names = _applied_names(conn)
    todo = _missing(names, migrations)
    done_now: list[str] = []
    for fn in todo:
        conn.execute("BEGIN IMMEDIATE")
        try:
            _ensure_table(conn)
            row = conn.execute("SELECT 1 FROM migrations WHERE name = ?", (fn.__name__,)).fetchone()
            if row is None:
                fn(conn)
                conn.execute(
                    "INSERT INTO migrations (name, applied_at) VALUES (?, ?)",
                    (fn.__name__, datetime.now(timezone.utc).isoformat(timespec="microseconds")),
                )
                done_now.append(fn.__name__)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    count = len(applied(conn)) if todo else len(names)
    if _user_version(conn) != count:  # a write: only when the number really changed
        conn.execute(f"PRAGMA user_version = {int(count)}")
    return done_now


def pending(
    conn: sqlite3.Connection, migrations: tuple[Migration, ...] = MIGRATIONS
) -> list[Migration]:
    """The migrations this database still lacks, read without taking the write lock.

    Raises SchemaTooNew when a newer rltray applied steps this one does not know.
    """
    return _missing(_applied_names(conn), migrations)


def _missing(names: list[str], migrations: tuple[Migration, ...]) -> list[Migration]:
    known = {fn.__name__ for fn in MIGRATIONS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SchemaTooNew(
            "The database was updated by a newer rltray "
            f"(unknown migrations: {', '.join(unknown)}); upgrade rltray to open it."
        )
    done = set(names)
    return [fn for fn in migrations if fn.__name__ not in done]


def _applied_names(conn: sqlite3.Connection) -> list[str]:
    """Like ``applied`` but never creates the table (a write) when it is missing."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'migrations'"
    ).fetchone()
    if exists is None:
        return []
    return [row[0] for row in conn.execute("SELECT name FROM migrations ORDER BY rowid")]


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])
