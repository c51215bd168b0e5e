"""The service: rltray's intents over one data folder, shared by every face.

It owns the paths, the store and the training runner, and turns user intents
("rate the last answer good", "train now") into their calls. It knows nothing
of threads, servers or windows: what a running rltray owns around it lives in
``runtime.py``, which builds on this and never the other way round (the house,
ARCHITECTURE.md). No module-level state: two services over two data folders
can run in one test.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rltray.app import fileio, instance, spool
from rltray.app.errors import NothingToDo, UserError
from rltray.app.lessons.intents import LessonIntents
from rltray.app.paths import Paths
from rltray.app.settings import Settings
from rltray.app.words import parse_version, word

log = logging.getLogger(__name__)
SETUP_DONE = "setup-done"  # in the data folder once the setup wizard was finished

if TYPE_CHECKING:
    from datetime import datetime

    from rltray.app.config import Config
    from rltray.app.store import Rating, Store, Turn
    from rltray.app.training.publisher import Publisher
    from rltray.app.training.runner import TrainingRunner

@dataclass(frozen=True)
class RateOutcome:
    turn: Turn
    rating: Rating
    changed: bool = True  # False when the turn already had exactly this rating
    # a notification's click refused: the turn was rated elsewhere after it was shown
    stale: bool = False


class AlreadyRated(NothingToDo):
    """The newest turn has a different rating; changing it must be asked for."""


def _check_value(value: int) -> None:
    if value not in (1, -1) or isinstance(value, bool):
        raise UserError(f"A rating is +1 (good) or -1 (bad), not {value!r}.")


class Service:
    """rltray's operations over one data folder."""

    def __init__(self, paths: Paths, store: Store | None = None) -> None:
        from rltray.app.store import Store

        self.paths = paths.ensure()
        self.store = store if store is not None else Store.open(self.paths)
        self.publisher: Publisher | None = None  # set before the runner is first used
        self.runner_options: dict[str, Any] = {}  # extra TrainingRunner arguments (tests)
        self._runner: TrainingRunner | None = None
        # Called (from any thread) when what a window shows may have changed: a new
        # turn, a rating, training progress. The tray's refresh() is one.
        self._settings = Settings(self.paths, on_problem=self._settings_broke)
        self.listeners: list[Callable[[], None]] = []
        # Called with the ids of turns whose rating changed, wherever it changed.
        self.rating_listeners: list[Callable[[list[int]], None]] = []
        # The lessons' intents; their files follow every change of ratings, tags,
        # lessons and settings (app/lessons/intents.py).
        self.lessons = LessonIntents(self)
        self.lessons.record_members()  # before anything moves a lesson's key (m010)
        self.listeners.append(self.lessons.refresh)

    @classmethod
    def open(cls, env: dict[str, str] | None = None) -> Service:
        return cls(Paths.from_env(env))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- capture -------------------------------------------------------------

    def ingest(self, progress: Callable[[int, int], None] | None = None) -> spool.IngestReport:
        """Move every waiting hook record into the database (safe to call any time).

        ``/rl`` commands among them rate by app/rating.py's rules inside the spool's
        transaction; their turns are told to the rating listeners here. A notification's
        press that waited in the spool (the database was busy) leaves or takes back the
        note for the next prompt as a press stored at once does (``rate``); a `/rl`'s
        note is the hook's own.
        """
        from rltray.app.hooks import registry

        def agents_off() -> frozenset[str]:
            switches = self.settings().agents
            return frozenset(e.name for e in registry.AGENTS if not getattr(switches, e.setting))

        report = spool.ingest(self.paths, self.store, progress=progress, ignore=agents_off)
        settings_of = {e.name: e.setting for e in registry.AGENTS}
        for agent, count in report.ignored.items():
            self.note(
                "spool",
                f"dropped {count} {agent} record(s): capture from {agent} is off "
                f"(agents.{settings_of[agent]})",
            )
        for turn_id in dict.fromkeys(report.pressed):
            turn = self.store.get_turn(turn_id)
            if turn is not None:
                self._note_for_next_prompt(turn, turn.rating)  # its active rating
        if report.turns or report.commands:
            self.changed(rated=report.rated)
        return report

    def pending_spool(self) -> int:
        return instance.count_records(self.paths.spool_incoming)

    def rejected_spool(self) -> int:
        return instance.count_records(self.paths.spool_rejected)

    # -- rating: every face's intents (the rules: app/rating.py) -------------------

    def rate_newest(
        self,
        value: int,
        *,
        comment: str | None = None,
        source: str = "cli",
        change: bool = False,
    ) -> RateOutcome:
        """Rate the turn captured last: the answer the user just read.

        Never an older one: when the newest turn is already rated otherwise, say
        so and change it only when asked (``change``), so a `rltray good` after a
        `/rl bad` cannot quietly flip another project's answer.
        """
        _check_value(value)
        turn = self.store.newest_turn()
        if turn is None:
            raise NothingToDo(
                "No turn has been captured yet: finish a turn in Claude Code or Codex first "
                "(run `rltray hooks status` to check that capture works)."
            )
        if turn.rating is not None and turn.rating.value != value and not change:
            raise AlreadyRated(
                f"The newest turn ({turn.id}) is already rated {word(turn.rating.value)}. "
                f"To change it, run `rltray {word(value)} --last`"
                + (" with your comment" if comment else "")
                + f", or `rltray rate {turn.id} {word(value)}`."
            )
        return self.rate(turn.id, value, comment=comment, source=source)

    def rate(
        self,
        turn_id: int,
        value: int,
        *,
        comment: str | None = None,
        source: str = "cli",
        score: int | None = None,
        at: datetime | None = None,
    ) -> RateOutcome:
        """Rate or re-rate one turn; no ``comment`` keeps the one it has (app/rating.py).

        ``score``: a graded rating (1, 2, 4 or 5); ``value`` is then its class.
        ``at``: when the user gave it (a press or a click that waited in the runtime's
        queue), so a ``/rl`` typed after it, but stored first, stays the last word;
        None: now.
        """
        from rltray.app import rating

        _check_value(value)
        turn = self._turn(turn_id)
        applied = rating.apply(self.store, turn.id, value, source, comment, at=at, score=score)
        if applied.stale:
            kept = applied.rating
            said = "rated" if kept.active else "rated and that rating withdrawn"
            self.store.log_event(
                "rating",
                f"a click on an older notification for turn {turn.id} was ignored: it was "
                f"{said} {word(kept.value)} in the {kept.source} since",
            )
        if applied.changed:
            self._note_for_next_prompt(turn, applied.rating)
            self.changed(rated=[turn.id])
        return RateOutcome(turn, applied.rating, applied.changed, applied.stale)

    def _note_for_next_prompt(self, turn: Any, rating: Any) -> None:
        """A bad rating with a comment given outside the agent (a notification's reply, the
        CLI, the window) is said to that session's next prompt, once, as `/rl bad why`
        typed in the agent is (issue 24); a rating taken back or turned good says nothing.

        A note is written only for the session's newest captured turn: the note tells the
        agent "your previous answer", and a rating of an older answer (`rltray rate 12 bad
        -c …`, the ratings window) is about another one, maybe one the agent no longer has
        in its context; the comment still reaches it as a lesson at the next session start.
        (A note already written about this turn is rewritten with its new words.)

        Taking one back is not limited so: the note names the turn it is about
        (``lessonfiles.note_after_rating``), and a rating of that turn withdrawn, turned
        good or deleted takes it back even after the session captured a later turn (the
        prompt was on its way when the user rated), or the agent would be told of a bad
        rating the user no longer gives. A rating of an older turn leaves a note about
        another turn alone; one of the newest turn takes back any note."""
        from rltray.app.hooks import lessonfiles

        home = str(self.paths.home)
        newest = not self.store.session_turn_after(
            turn.agent, turn.session, turn.captured_at, turn.id
        )
        try:
            if rating is not None and rating.value < 0 and rating.comment:
                if newest or lessonfiles.note_names(home, turn.agent, turn.session, turn.turn):
                    from rltray.app.scrub import scrub  # the note waits in a file: no credential

                    lessonfiles.note_after_rating(home, turn.agent, turn.session,
                                                  scrub(rating.comment), rating.score, turn.turn)
            else:
                lessonfiles.drop_note(home, turn.agent, turn.session,
                                      None if newest else turn.turn)  # fmt: skip
        except OSError as exc:  # a note is a courtesy: the rating itself is stored
            self.store.log_event("lessons", f"no note for the next prompt: {exc}")

    def unrate(self, turn_id: int, source: str = "cli") -> RateOutcome | None:
        """Withdraw one turn's rating (the history keeps it); None when it had none."""
        turn = self._turn(turn_id)
        withdrawn = self.store.undo(source, turn_id=turn.id)
        if withdrawn is None:
            return None
        self._note_for_next_prompt(turn, None)
        self.changed(rated=[turn.id])
        return RateOutcome(turn, withdrawn)

    def undo(self, source: str = "cli") -> RateOutcome:
        """Withdraw the rating given last; the history keeps it.

        Only the last one: a second undo says there is nothing to undo instead
        of reaching back to withdraw an older, unrelated rating.
        """
        latest = self.store.latest_rating()
        if latest is None:
            raise NothingToDo("There is no rating to undo.")
        if not latest.active:
            raise NothingToDo(
                f"Your last rating (turn {latest.turn_id}, {word(latest.value)}) was already "
                "withdrawn; there is nothing else to undo."
            )
        outcome = self.unrate(latest.turn_id, source)
        assert outcome is not None  # the rating is active: it was just read
        return outcome

    def rate_many(self, turn_ids: Iterable[int], value: int, source: str = "web") -> int:
        """Rate (1, -1) or unrate (0) many turns in one transaction; returns how many changed.

        Ids of turns deleted meanwhile are skipped: a selection made a minute ago
        must not fail as a whole for one of them. A turn already rated that way stays
        as it is: a graded 4/5 in a selection marked good keeps its grade, and a trained
        rating is not made fresh to be trained a second time.
        """
        from rltray.app import rating

        if value != 0:
            _check_value(value)
        changed: list[Turn] = []
        with self.store.batch():
            for turn_id in turn_ids:
                turn = self.store.get_turn(turn_id)
                if turn is None:
                    continue
                if value == 0:
                    done = self.store.undo(source, turn_id=turn_id) is not None
                elif _same_class(self.store.active_rating(turn_id), value):
                    done = False  # a selection marked good keeps a 4/5 among it as it was
                else:
                    done = rating.apply(self.store, turn_id, value, source).changed
                if done:
                    changed.append(turn)
        for turn in changed:  # a note a withdrawn bad rating left must not reach the agent
            self._note_for_next_prompt(turn, self.store.active_rating(turn.id))
        self.changed(rated=[t.id for t in changed])
        return len(changed)

    def comment(self, turn_id: int, text: str | None, was: Any = ...) -> Rating:
        """Change the comment of a turn's rating ("" or None removes it); not a new rating.

        ``was``: the comment the edit started from; the store refuses the change
        (``CommentChanged``) when the comment is no longer it. The words are scrubbed of
        credentials first, as every rating's comment is (app/rating.py): they are told
        to the agent (note, lessons, Claude Code's rules file).
        """
        from rltray.app.hooks import lessonfiles
        from rltray.app.scrub import scrub

        turn = self._turn(turn_id)
        words = scrub(text) if text else text
        rating = self.store.set_comment(turn_id, words, was=was)  # StoreError: no rating
        if os.path.exists(lessonfiles.note_path(str(self.paths.home), turn.agent, turn.session)):
            self._note_for_next_prompt(turn, rating)  # the waiting note says the words now
        self.changed()
        return rating

    # -- turns: tags and deletion ------------------------------------------------------

    def set_tags(self, turn_id: int, tags: Iterable[str]) -> list[str]:
        """Make a turn carry exactly these tags (new names join the tag list)."""
        self._turn(turn_id)
        names = self.store.set_turn_tags(turn_id, tags)
        self.changed()
        return names

    def tag_turns(self, turn_ids: Iterable[int], tag: str, on: bool = True) -> int:
        """Add (or remove) one tag on many turns; returns how many changed."""
        count = self.store.tag_turns(turn_ids, tag, on=on)
        self.changed()
        return count

    def tag_turn(self, turn_id: int, tag: str, on: bool = True) -> list[str]:
        """Add (or remove) one tag on one turn, its other tags untouched; returns its tags."""
        self._turn(turn_id)
        self.store.tag_turns([turn_id], tag, on=on)
        self.changed()
        return self.store.tags_of([turn_id]).get(turn_id, [])

    def add_tag(self, name: str) -> str:
        stored = self.store.add_tag(name)
        self.changed()
        return stored

    def remove_tag(self, name: str) -> None:
        """Delete a tag from the list and from every turn."""
        if not self.store.remove_tag(name):
            raise UserError(f"There is no tag {name!r}.")
        self.changed()

    def delete_turns(self, turn_ids: Iterable[int], where: str) -> int:
        """Delete turns for real (app/store/turns.py says what stays); ``where``: for the log."""
        import shutil

        from rltray.app.training import jobbuild, versions

        ids = list(turn_ids)
        ratings = self.store.rating_ids_of(ids)
        turns = [t for t in map(self.store.get_turn, ids) if t is not None]
        count = self.store.delete_turns(ids)
        # The rounds' copies of their text: job files, a paused round's checkpoint, and the
        # base model's kept answers (to prompts that may be theirs; a cache, so all of it).
        jobbuild.forget_ratings(self.paths.runs, ratings)
        versions.cancel_paused_holding(self.store, self.paths, ratings)
        shutil.rmtree(self.paths.answer_cache, ignore_errors=True)
        for turn in turns:  # nor may a waiting note say its comment to the agent
            self._note_for_next_prompt(turn, None)
        self.store.log_event("ratings", f"deleted {count} turns in {where}")
        self.changed(rated=ids)
        return count

    def _turn(self, turn_id: int) -> Turn:
        turn = self.store.get_turn(turn_id)
        if turn is None:
            raise UserError(f"There is no turn {turn_id}; it may have been deleted.")
        return turn

    # -- reporting -----------------------------------------------------------

    def status(
        self, *, service_running: bool = False, next_training: str | None = None
    ) -> dict[str, Any]:
        """Counts, agents and training; a running runtime adds what only it knows."""
        counts = self.store.counts()
        by_agent = counts.get("by_agent", {})
        return {
            "turns": counts["turns"],
            "good": counts["good"],
            "bad": counts["bad"],
            "unrated": counts["unrated"],
            "untrained": counts["untrained"],
            # the standing held-out set: untrained on purpose, every round is judged on it
            "held_out": counts["heldout"],
            "pending_spool": self.pending_spool(),
            "rejected_spool": self.rejected_spool(),
            "agents": {
                name: {
                    "turns": info.get("turns", 0),
                    "last_event_at": info.get("last_captured_at"),
                }
                for name, info in sorted(by_agent.items())
            },
            "data_folder": str(self.paths.home),
            "settings_problem": self.settings_problem(),
            "service_running": service_running,
            "training": self.training_status(next_training),
        }

    def turns(self, limit: int = 20, rated: bool | None = None) -> list[Turn]:
        return self.store.list_turns(limit=limit, rated=rated)

    def export(self) -> Iterator[dict[str, Any]]:
        return self.store.iter_export()


    def changed(self, rated: Iterable[int] = ()) -> None:
        """Tell every listener that the state may have changed; a failing one is skipped.

        ``rated``: turns whose rating changed (given, changed, withdrawn, deleted),
        for the rating listeners (the runtime withdraws their open notifications).
        """
        turns = list(rated)
        calls: list[Callable[[], None]] = list(self.listeners)
        if turns:
            calls += [functools.partial(listener, turns) for listener in self.rating_listeners]
        for call in calls:
            try:
                call()
            except Exception:  # a window's problem must not break ingest or training
                log.exception("a state listener failed")

    # -- setup and the event log ------------------------------------------------

    def needs_setup(self) -> bool:
        """True until the setup wizard was finished once here (the first run opens it)."""
        return not (self.paths.home / SETUP_DONE).exists()

    def finish_setup(self) -> None:
        fileio.write_private_atomic(self.paths.home / SETUP_DONE, b"done\n", mode=0o600)
        self.note("setup", "setup wizard finished")
        self.changed()

    def note(self, kind: str, message: str, data: dict[str, Any] | None = None) -> None:
        """Record what the user did or should know in the event log (the dashboard lists it)."""
        self.store.log_event(kind, message, data)

    # -- settings ------------------------------------------------------------

    def settings(self, strict: bool = False) -> Config:
        """The settings in effect: config.toml, or its last valid copy while it is broken.

        ``strict``: a broken file raises its ConfigError instead (a one-shot command
        that acts on a setting, like `rltray use`, must not act on an old copy).
        """
        current = self._settings.current()
        if strict and self._settings.problem is not None:
            from rltray.app.config import ConfigError

            raise ConfigError(self._settings.problem)
        return current

    def settings_changed_on_disk(self) -> bool:
        """Re-read config.toml if another process changed it; whether it did."""
        return self._settings.refresh()

    def settings_problem(self) -> str | None:
        """Why config.toml is not in effect now (its sentence, with the line), or None."""
        return self._settings.problem

    def set_setting(self, key: str, value: Any) -> Any:
        """Change one setting (validated as `rltray config set` does); returns the new value."""
        errors, _changed = self.save_settings({key: value})
        if errors:
            from rltray.app.config import ConfigError

            raise ConfigError(errors[key])
        return self.settings().get(key)

    def save_settings(
        self,
        values: dict[str, Any],
        *,
        all_or_nothing: bool = False,
        refuse: Callable[[str, Any], str | None] | None = None,
    ) -> tuple[dict[str, str], list[str]]:
        """Set many keys (``Settings.save_many``); logs and tells the listeners what changed."""
        errors, changed = self._settings.save_many(
            values, all_or_nothing=all_or_nothing, refuse=refuse
        )
        if changed:
            self.store.log_event("settings", "changed " + ", ".join(changed))
            self.changed()
        return errors, changed

    def _settings_broke(self, problem: str) -> None:
        self.store.log_event("settings", f"config.toml is not in effect: {problem}")
        self.changed()

    # -- training ------------------------------------------------------------

    def runner(self) -> TrainingRunner:
        """The one training runner of this data folder's service (created on first use)."""
        if self._runner is None:
            from rltray.app.training.runner import TrainingRunner

            load = self.settings
            if self.publisher is None:
                # reads ollama.model at each publish: a no-op while it is empty, and a
                # model set later in the settings takes effect without a restart
                from rltray.app.training.publisher import OllamaPublisher

                self.publisher = OllamaPublisher(self.store, self.paths, load)
            self._runner = TrainingRunner(
                self.store,
                self.paths,
                load,
                self.publisher,
                lambda _progress: self.changed(),
                **self.runner_options,
            )
        return self._runner

    def runner_if_started(self) -> TrainingRunner | None:
        """The runner when something has used it, without creating one (shutdown paths)."""
        return self._runner

    def train_now(self, wait: bool = False) -> dict[str, Any]:
        """Start (or resume) a round now, whatever the schedule says."""
        run_id = self.runner().start(reason="manual")
        self.store.log_event("training", f"started run {run_id} by request")
        if wait:
            self.runner().wait()
        return {"run": run_id, **self.runner().progress}

    def set_automatic(self, on: bool) -> dict[str, Any]:
        """Pause or resume automatic training (kept in config.toml, so it survives restarts)."""
        self.set_setting("training.automatic", on)
        self.store.log_event("training", "automatic training " + ("resumed" if on else "paused"))
        return {"automatic": on}

    def rollback(self, version: int | str | None = None) -> dict[str, Any]:
        """Make an older version active (default: the active one's parent; 0: the base model).

        ``ollama``: what Ollama serves now, or why it does not (None: no publisher line).
        """
        lines: list[str] = []
        target = self.runner().rollback(parse_version(version), said=lines.append)
        return {"active": None if target is None else target.version,
                "ollama": lines[0] if lines else None}

    def publish(self) -> dict[str, Any]:
        """Send the active version to Ollama again, after Ollama was down or moved."""
        active = self.store.active_adapter()
        line = self.runner().publish_active()
        return {"active": None if active is None else active.version, "ollama": line}

    def delete_version(self, version: int) -> None:
        """Delete an old version's files and row (never the active one's)."""
        import shutil
        from pathlib import Path

        gone = self.store.delete_adapter(version)
        folder = Path(gone.path)
        if folder.is_dir() and folder.resolve().parent == self.paths.adapters.resolve():
            shutil.rmtree(folder, ignore_errors=True)
            # an empty folder of the same name stays, so the number is never given to a new
            # version (runs name their version by number; adapterversions.next_version)
            folder.mkdir(mode=0o700)
            fileio.write_private_atomic(
                folder / "DELETED.txt",
                f"v{version} was deleted in the settings window; its files are gone.\n".encode(),
                mode=0o600,
            )
        self.note("adapters", f"deleted v{version}", {"version": version})
        self.changed()

    def versions(self) -> list[dict[str, Any]]:
        """Every version, newest first; ``published``: Ollama tag, path taken, quant, size."""
        from rltray.app.training.publisher import describe as describe_publication

        return [
            {
                "version": a.version,
                "status": a.status,
                "active": a.status == "active",
                "parent": a.parent_version,
                "base_model": a.base_model,
                "created_at": a.created_at,
                "path": a.path,
                "ollama_tag": a.ollama_tag,
                "published": describe_publication(a.metrics.get("publication")),
                "baseline": a.baseline,
                "metrics": a.metrics,
            }
            for a in self.store.list_adapters()
        ]

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        return [
            {
                "id": r.id,
                "status": r.status,
                "started_at": r.started_at,
                "finished_at": r.finished_at,
                "adapter_version": r.adapter_version,
                "metrics": r.metrics,
                "error": r.error,
            }
            for r in self.store.list_runs(limit=limit)
        ]

    def training_status(self, next_training: str | None = None) -> dict[str, Any]:
        """Automatic or not, the running round, the active version, why training stopped.

        ``next_training``: the running gate's reason; None when no rltray runs one.
        """
        from rltray.app.training.outcome import budget_stop

        active = self.store.active_adapter()
        return {
            "automatic": self.settings().training.automatic,
            "next_training": next_training
            or "rltray is not running, so nothing trains on its own (start it: `rltray run`)",
            "running": self._runner is not None and self._runner.running(),
            "progress": self._runner.progress if self._runner is not None else None,
            "active_version": None if active is None else active.version,
            # why automatic training gave up (failure budget used up), with the log tail
            "stopped": budget_stop(self.runs(limit=50), self.paths.runs),
        }

    def ingest_now(self) -> dict[str, Any]:
        report = self.ingest()
        return {"turns": report.turns, "commands": report.commands, "rejected": report.rejected}


def _same_class(current: Rating | None, value: int) -> bool:
    """Whether a turn's active rating is already ``value``'s class (good or bad, any grade)."""
    return current is not None and current.value == value
