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
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rltray.app.errors import UserError
from rltray.app.hooks import lessonfiles, registry
from rltray.app.lessons import book, carry, grouping, render, rewrite, trend
from rltray.app.store import StoreError, utc_iso

if TYPE_CHECKING:
    from rltray.app.config import Config
    from rltray.app.paths import Paths
    from rltray.app.store import Store

log = logging.getLogger(__name__)
POLARITIES = {"avoid": -1, "keep": 1, "note": None}
SCOPES = ("project", "global")


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
        self._written: str | None = None  # what the files were last written from
        #: (switches, the store's change mark, the date) when the texts were last known current
        self._unchanged_since: tuple[Any, ...] | None = None

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
        try:
            key = self.host.store.add_lesson(text, folder, polarity)
        except StoreError as exc:
            raise UserError(str(exc)) from None
        self._note(f"lesson {key} added" + (f" for {folder}" if folder else " for every project"))
        return key

    def edit(self, key: str, text: str | None) -> book.Lesson:
        """Tell the lesson in these words (None or "": back to the user's comment)."""
        lesson = self.get(key)
        if lesson.user_added and not (text or "").strip():
            raise UserError(f"Lesson {key} is yours: give it new words, or delete it.")
        return self._set(key, f"lesson {key} reworded", text=(text or "").strip() or None)

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
            # lesson's evidence (the store's change mark costs two integer reads).
            quick = (sorted(on.items()), self.host.store.change_mark(), self.clock().date())
            if quick == self._unchanged_since:
                return False
            if not any(on.values()):
                stamp = repr(on)
                inputs = None
            else:
                inputs = self._inputs()
                stamp = _fingerprint(on, inputs, self.clock())
            if stamp == self._written:
                self._unchanged_since = quick
                return False
            texts = render.texts(self._assess(*inputs)) if inputs is not None else {}
            home = str(self.host.paths.home)
            for agent, wanted in on.items():
                try:
                    if wanted:
                        lessonfiles.write_all(home, agent, texts)
                    else:
                        lessonfiles.clear(home, agent)
                except OSError as exc:  # another process rewrote them at the same moment
                    log.warning("lesson files of %s not written: %s", agent, exc)
                    return False
            self._written = stamp
            self._unchanged_since = quick
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
        store = self.host.store
        return store.lesson_evidence(), store.lesson_rows()

    def _assess(self, evidence: list[dict[str, Any]], rows: list[Any]) -> list[book.Lesson]:
        groups = grouping.group(grouping.Evidence.from_row(r) for r in evidence)
        moves = carry.moves(groups, rows)
        if moves:  # decisions follow their lesson's group (and record the turns behind it)
            self.host.store.carry_lessons(moves)
            rows = self.host.store.lesson_rows()
        return book.assess(groups, rows, self.clock())


def _fingerprint(on: dict[str, bool], inputs: tuple[list[Any], list[Any]], now: datetime) -> str:
    """What the texts depend on: switches, ratings behind lessons, decisions, today's date."""
    digest = hashlib.sha256(repr((sorted(on.items()), inputs, now.date())).encode("utf-8"))
    return digest.hexdigest()


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
