"""The lessons' intents: what the CLI, the web page and `/rl lesson` change, and the files.

One object per service (``Service.lessons``), taking the service as its host
through the small ``Host`` protocol below, so this package stays under the
service in the house (ARCHITECTURE.md) while following its pattern: each change
is one intent that writes the store and then tells the service's listeners. One
of those listeners is ``refresh``, which recomputes the lessons and rewrites the
files the hook program reads (``hooks/lessonfiles.py``) whenever ratings, tags,
lessons or the ``lessons.*`` settings changed, and clears them for agents whose
lessons are off. It skips the work when nothing it reads changed, since listeners
are also told of every training progress line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rltray.app import fileio
from rltray.app.errors import UserError
from rltray.app.hooks import lessonfiles, registry
from rltray.app.lessons import book, carry, grouping, render, rewrite, trend
from rltray.app.scrub import scrub
from rltray.app.store import StoreError, utc_iso

if TYPE_CHECKING:
    from filelock import BaseFileLock
    from rltray.app.config import Config
    from rltray.app.paths import Paths
    from rltray.app.store import Store

log = logging.getLogger(__name__)
POLARITIES = {"avoid": -1, "keep": 1, "note": None}
#: Beside the agents' folders in ``lessons/``: the refresh's lock, and what they were
#: last written from (``LessonIntents.refresh``).
REFRESH_LOCK = ".refresh.lock"
WRITTEN = ".written"
LOCK_WAIT_S = 10.0
SCOPES = ("project", "global")
#: The lessons' wording (``render.py``'s texts): part of what the files were written from
#: (``_fingerprint``), so an rltray with other words (an older tray beside a newer CLI)
#: rewrites files the other wrote from the same ratings instead of taking them for its own.
#: Raise it with any change to what ``render`` writes.
WORDING = 2


class Host(Protocol):
    """What the lessons need of the service."""

    paths: Paths
    store: Store

    def settings(self, strict: bool = False) -> Config: ...

    def set_setting(self, key: str, value: Any) -> Any: ...

    def changed(self, rated: Iterable[int] = ()) -> None: ...


@dataclass(frozen=True)
class Preview:
    """What a session of ``agent`` in ``folder`` would be told, and where it is read from."""

    text: str | None
    file: Path | None  # the file the hook reads it from (None: nothing to tell)
    lessons: int  # how many are told
    on: bool  # whether lessons are on for the agent


class LessonIntents:
    """The lessons of one data folder; safe to call from any thread."""

    def __init__(self, host: Host, clock: Callable[[], datetime] | None = None) -> None:
        self.host = host
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self._lock = threading.Lock()
        #: whether this process wrote the files once: until then it writes them whatever
        #: ``WRITTEN`` says, so the texts of a newer rltray (other words) replace an older's
        self._wrote = False
        #: (switches, the store's change mark, the date, ``_marks``) when the texts were last
        #: known current
        self._unchanged_since: tuple[Any, ...] | None = None
        #: why the files could not be refreshed, once said (a read-only data folder would
        #: otherwise log it at every refresh, every few seconds)
        self._trouble: str | None = None

    def record_members(self) -> None:
        """Rows decided before the store kept the turns behind each lesson record them now.

        A decision (muted, deleted, edited words) follows its group when the group's key
        moves, by the turns it recorded (app/lessons/carry.py). A file from before that
        has none: the first withdrawn rating after the upgrade (a ``/rl undo`` waiting
        in the spool, read before any refresh) moved the key and left the decision
        behind, and a lesson the user had deleted was told to the agent again. So the
        service records them when it opens, before anything can move a key.
        """
        store = self.host.store
        if not store.lessons_lack_members():
            return
        with self._lock:
            self._assess(*self._inputs())
            store.close_members()

    # -- reading -------------------------------------------------------------------

    def all(self, include_deleted: bool = False) -> list[book.Lesson]:
        """Every lesson, with its counts recomputed from the ratings behind it now."""
        lessons = self._assess(*self._inputs())
        return [lesson for lesson in lessons if include_deleted or not lesson.deleted]

    def get(self, key: str) -> book.Lesson:
        for lesson in self.all():
            if lesson.key == key:
                return lesson
        raise UserError(f"There is no lesson {key!r}; `rltray lessons list` shows their ids.")

    def listing(self) -> list[dict[str, Any]]:
        """Each lesson as the CLI and the web page show it (JSON-ready)."""
        on_since = self.host.store.lesson_agents()
        now = self.clock()
        out = []
        for lesson in self.all():
            bad, good = lesson.counts()
            happening = trend.still_happening(lesson, on_since, now)
            out.append(
                {
                    "id": lesson.key,
                    "words": lesson.words,
                    "kind": {-1: "avoid", 1: "keep", None: "note"}[lesson.polarity],
                    "bad": bad,
                    "good": good,
                    "last": lesson.last,
                    "scope": lesson.scope,
                    "folders": list(lesson.folders),
                    "suggested_global": lesson.suggested_global,
                    "status": lesson.status(),
                    "told": lesson.told,
                    "contradiction": lesson.contradiction,
                    "user_added": lesson.user_added,
                    "edited": lesson.edited,
                    "tags": list(lesson.tags),
                    "still_happening": None
                    if happening is None
                    else {
                        "before_per_week": round(happening.before, 2),
                        "after_per_week": round(happening.after, 2),
                        "since": happening.since,
                    },
                }
            )
        return out

    def texts(self) -> dict[str, str]:
        """``{project key or "global": text}``: what the files hold for an agent that is on."""
        return render.texts(self.all())

    def preview(self, folder: str | None, agent: str | None = None) -> Preview:
        """Exactly what a session in ``folder`` would be told (as ``lessonfiles.read`` picks)."""
        entry = _entry(agent or registry.lesson_agents()[0].name)
        lessons = self.all()
        texts = render.texts(lessons)
        key = lessonfiles.key(folder) if folder else None
        name = key if key in texts else lessonfiles.GLOBAL
        text = texts.get(name)
        told = render.chosen(lessons, key if name == key else None, lessonfiles.BUDGET_CHARS)
        folder_path = Path(lessonfiles.agent_folder(str(self.host.paths.home), entry.name))
        return Preview(
            text=text,
            file=folder_path / f"{name}.md" if text else None,
            lessons=len(told) if text else 0,
            on=bool(getattr(self.host.settings().lessons, entry.setting)),
        )

    def suggest(self, key: str, model: str | None = None) -> rewrite.Suggestion:
        """One sentence for lesson ``key`` by the user's local model (``ollama.model``, or
        ``model``); never saved: the user accepts it through ``edit`` or drops it."""
        ollama = self.host.settings().ollama
        return rewrite.suggest(self.get(key), ollama.host, model or ollama.model)

    # -- changing ------------------------------------------------------------------

    def add(self, text: str, folder: str | None = None, kind: str = "note") -> str:
        """A lesson in the user's words, for one project folder (None: every project)."""
        polarity = _polarity(kind)
        try:  # told to agents and written to their files: no credential (SECURITY.md)
            key = self.host.store.add_lesson(scrub(text), folder, polarity)
        except StoreError as exc:
            raise UserError(str(exc)) from None
        self._note(f"lesson {key} added" + (f" for {folder}" if folder else " for every project"))
        return key

    def edit(self, key: str, text: str | None) -> book.Lesson:
        """Tell the lesson in these words (None or "": back to the user's comment)."""
        lesson = self.get(key)
        if lesson.user_added and not (text or "").strip():
            raise UserError(f"Lesson {key} is yours: give it new words, or delete it.")
        words = scrub((text or "").strip()) or None  # told to agents: no credential
        return self._set(key, f"lesson {key} reworded", text=words)

    def mute(self, key: str, on: bool = True) -> book.Lesson:
        return self._set(key, f"lesson {key} {'muted' if on else 'unmuted'}", muted=int(on))

    def pin(self, key: str, on: bool = True) -> book.Lesson:
        """A pinned lesson never retires and comes first within the budget."""
        return self._set(key, f"lesson {key} {'pinned' if on else 'unpinned'}", pinned=int(on))

    def delete(self, key: str) -> None:
        """Never list or tell it again (its ratings stay; new ones of its group stay with it)."""
        self._set(key, f"lesson {key} deleted", deleted_at=utc_iso())

    def resolve(self, key: str, kind: str) -> book.Lesson:
        """Settle a contradiction: the user says which way the lesson goes (avoid or keep)."""
        polarity = _polarity(kind)
        if polarity is None:
            raise UserError("A lesson is resolved as avoid or keep.")
        return self._set(key, f"lesson {key} resolved as {kind}", polarity=polarity)

    def set_scope(self, key: str, scope: str) -> book.Lesson:
        """Tell it in its own project only, or in every project (accepting a suggestion)."""
        if scope not in SCOPES:
            raise UserError(f"A lesson's scope is project or global, not {scope!r}.")
        return self._set(key, f"lesson {key} now told in {scope} scope", scope=scope)

    def switch(self, agent: str, on: bool) -> Preview:
        """Turn lessons on or off for ``agent`` (the ``lessons.<agent>`` setting)."""
        entry = _entry(agent)
        self.host.set_setting(f"lessons.{entry.setting}", on)  # tells the listeners: refresh
        return self.preview(None, entry.name)

    def _set(self, key: str, said: str, **changes: Any) -> book.Lesson:
        self.get(key)
        try:
            self.host.store.set_lesson(key, **changes)
        except StoreError as exc:
            raise UserError(str(exc)) from None
        self._note(said)
        for lesson in self.all(include_deleted=True):
            if lesson.key == key:
                return lesson
        raise AssertionError(key)  # it was there a moment ago and lessons are never removed

    def _note(self, said: str) -> None:
        self.host.store.log_event("lessons", said)
        self.host.changed()

    # -- the files -----------------------------------------------------------------

    def refresh(self) -> bool:
        """Rewrite the lesson files when what they are made of changed; whether it wrote.

        The service's listener (any thread): after every rating, tag, lesson or
        settings change, and by the running rltray at its start and then every
        few seconds, so a lesson retires on its day without a change.

        Two processes share the files (the running tray and a CLI command), each
        refreshing after its own changes. So reading the store and writing the files
        is one step under a file lock in the data folder (``REFRESH_LOCK``): a refresh
        that read the store before another process's change can no longer write its
        older text after that process wrote the newer one. And what the files were last
        written from is kept beside them (``WRITTEN``), not in this process's memory: a
        process that wrote a text, saw another write a newer one, and then undid the
        change would otherwise think its own old text was still there and skip. With it
        go the agents' folders' modification times after that write (``_marks``), and the
        quick check looks at them too: files written by anything else (an older rltray
        without the lock, a hand) are noticed at the next call and written again, instead
        of staying until the next change of the store.
        """
        # Settings first, outside the lock: reading them may notice a changed or broken
        # config.toml and tell the listeners, this one among them (a second call that
        # must not wait for the lock this one holds: that deadlocked the worker).
        settings = self.host.settings()
        with self._lock:
            on = {
                e.name: bool(getattr(settings.lessons, e.setting))
                for e in registry.lesson_agents()
            }
            self._note_switches(on)
            # The running rltray calls this every few seconds: when no row changed and
            # the day did not turn, the texts cannot differ, so skip reading every
            # lesson's evidence (the store's change mark costs two integer reads; any
            # other process's commit moves it too).
            home = self.host.paths.home
            quick = (sorted(on.items()), self.host.store.change_mark(), self.clock().date(),
                     _marks(home, on))  # fmt: skip
            if quick == self._unchanged_since:
                return False
            from filelock import Timeout

            try:
                with _refresh_lock(home):
                    wrote = self._write_files(on, home)
            except Timeout:  # another process is stuck writing them: the next call retries
                log.warning("lesson files not refreshed: %s is held",
                            home / lessonfiles.FOLDER / REFRESH_LOCK)  # fmt: skip
                return False
            except OSError as exc:  # a read-only data folder, a file where the folder goes
                self._say_trouble(f"lesson files not refreshed: {exc}")
                return False
            if wrote is not None:
                self._unchanged_since = quick
                self._trouble = None
            return bool(wrote)

    def _say_trouble(self, said: str) -> None:
        """Warn that the files cannot be written, once until it changes or they are written:
        the refresh runs every few seconds, and a traceback each time buried the log."""
        if said != self._trouble:
            log.warning("%s", said)
            self._trouble = said

    def _write_files(self, on: dict[str, bool], home: Path) -> bool | None:
        """Read the store and write the files (under the refresh lock): whether it wrote,
        None when it could not (the next refresh tries again)."""
        if not any(on.values()):
            stamp = repr(on)  # no text: no wording to tell apart
            inputs = None
        else:
            inputs = self._inputs()
            stamp = _fingerprint(on, inputs, self.clock())
        if self._wrote and _read_written(home) == {"from": stamp, "folders": _marks(home, on)}:
            return False
        texts = render.texts(self._assess(*inputs)) if inputs is not None else {}
        for agent, wanted in on.items():
            try:
                if wanted:
                    lessonfiles.write_all(str(home), agent, texts)
                else:
                    lessonfiles.clear(str(home), agent)
            except OSError as exc:  # a file of the user's in the way, a full disk
                self._say_trouble(f"lesson files of {agent} not written: {exc}")
                return None
        record = {"from": stamp, "folders": _marks(home, on)}
        try:
            fileio.write_private_atomic(home / lessonfiles.FOLDER / WRITTEN,
                                        json.dumps(record).encode())  # fmt: skip
        except OSError as exc:  # written, not noted: the next refresh writes them again
            log.warning("lesson files written but not noted: %s", exc)
        self._wrote = True
        self._refresh_agent_files()
        return True

    def _refresh_agent_files(self) -> None:
        """Agents' own copies the user opted into (Claude Code's rules file,
        ``hooks/rulesfile.py``) follow the lesson files; an agent without one has none."""
        for entry in registry.AGENTS:
            try:
                agent = entry.load()()
                refresh_file = getattr(agent, "refresh_lessons_file", None)
                if refresh_file is not None:
                    refresh_file(self.host.paths)
            except Exception as exc:  # the user's config folder is theirs: never fail on it
                log.warning("%s's lessons file not refreshed: %s", entry.name, exc)

    def _note_switches(self, on: dict[str, bool]) -> None:
        """Keep since when each agent's lessons are on (whatever turned them on)."""
        known = self.host.store.lesson_agents()
        for agent, wanted in on.items():
            if wanted != (agent in known):
                self.host.store.set_lesson_agent(agent, wanted, at=utc_iso(self.clock()))

    def _inputs(self) -> tuple[list[dict[str, Any]], list[Any]]:
        """The evidence lessons are drawn from, and the decisions on them.

        Only ratings of turns of agents whose sessions are told lessons count
        (``registry.lesson_agents``): an OpenClaw turn is a chat's answer, with no
        folder and maybe other people in the chat, and a comment on it made a lesson
        for every project, told to every Claude Code and Codex session.
        """
        store = self.host.store
        told = {entry.name for entry in registry.lesson_agents()}
        evidence = [row for row in store.lesson_evidence() if row["agent"] in told]
        return evidence, store.lesson_rows()

    def _assess(self, evidence: list[dict[str, Any]], rows: list[Any]) -> list[book.Lesson]:
        groups = grouping.group(grouping.Evidence.from_row(r) for r in evidence)
        plan = carry.plan(groups, rows)
        if plan.moves or plan.copies:  # decisions follow their lesson's turns (carry.py)
            self.host.store.carry_lessons(plan.moves, plan.copies)
            rows = self.host.store.lesson_rows()
        return book.assess(groups, rows, self.clock())


def _refresh_lock(home: Path) -> BaseFileLock:
    """The data folder's lock around reading the store and writing the lesson files.

    A fresh object per call and ``thread_local=False``, as ``training.served``'s: the OS
    lock is per open file, so two services in one process exclude each other as two
    processes do. The timeout bounds a wait on a process stuck mid-write.
    """
    from filelock import FileLock

    folder = home / lessonfiles.FOLDER
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return FileLock(str(folder / REFRESH_LOCK), timeout=LOCK_WAIT_S, mode=0o600,
                    is_singleton=False, thread_local=False)  # fmt: skip


def _read_written(home: Path) -> Any:
    """What the files were last written from (``_fingerprint``) by whichever process, and
    ``_marks`` right after; None when unknown."""
    try:
        return json.loads(fileio.read_regular_file(home / lessonfiles.FOLDER / WRITTEN, 4096))
    except (OSError, ValueError):
        return None


def _marks(home: Path, on: dict[str, bool]) -> list[int | None]:
    """Each agent's lesson folder's modification time (None: no folder): replacing or
    removing a file in it moves it, whoever did (one stat per agent)."""
    marks: list[int | None] = []
    for agent in sorted(on):
        try:
            marks.append(os.stat(lessonfiles.agent_folder(str(home), agent)).st_mtime_ns)
        except OSError:
            marks.append(None)
    return marks


def _fingerprint(on: dict[str, bool], inputs: tuple[list[Any], list[Any]], now: datetime) -> str:
    """What the texts depend on: the wording, switches, ratings behind lessons, decisions,
    today's date."""
    what = (WORDING, sorted(on.items()), inputs, now.date())
    return hashlib.sha256(repr(what).encode("utf-8")).hexdigest()


def _entry(agent: str) -> registry.Entry:
    for entry in registry.lesson_agents():
        if entry.name == agent:
            return entry
    if agent in registry.names():
        raise UserError(f"{registry.display_names()[agent]} cannot be told lessons yet.")
    raise UserError(f"Unknown agent {agent!r}; rltray knows: {', '.join(registry.names())}.")


def _polarity(kind: str) -> int | None:
    if kind not in POLARITIES:
        raise UserError(f"A lesson is one of {', '.join(POLARITIES)}, not {kind!r}.")
    return POLARITIES[kind]
