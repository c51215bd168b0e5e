"""The training runner: one trainer child process at a time, and what its result means.

Why it looks like this (STYLE habit 6, ActivityWatch's manager): the tray must
stay light and responsive, so training runs as ``python -m rltray.trainer
runs/<id>/job.json`` in a separate, killable process. :class:`TrainingRunner`
owns that one ``Popen``; a reader thread drains its JSON lines into a progress
dict (percent for the tray) and the run's metrics; stderr goes to
``runs/<id>/trainer.log``. The trainer lowers its own CPU and IO priority first
thing (trainer/priority.py) and pauses when its parent dies, so the runner adds
no ``nice`` of its own.

Outcomes: ``done`` (accepted: ``adapters/vNNNN`` active, fresh ratings marked
trained, then ``publisher.published``; rejected: the gate's reasons in the run,
nothing registered — see app/training/versions.py); ``paused`` after
``stop(pause=True)`` (the runner writes ``runs/<id>/stop`` and closes the trainer's
stdin: it checkpoints and exits 3; :meth:`resume` runs the same job folder, which
continues from ``runs/<id>/checkpoint``);
``cancelled`` after ``stop(pause=False)``, and when a rating the round holds changes
while it runs (:meth:`ratings_changed`: the runtime calls it for every rating change, and
the reader asks the store again as progress comes in, for changes made in another
process); ``failed`` for anything else, with the trainer's error line and the last
lines of trainer.log. Ratings change only on accept. The trainer's ``skipped`` lines
(examples it cannot fit) are kept in the run's metrics as ``skipped``.

Threads: public methods may be called from any thread; ``on_change`` and
``publisher.published`` run on the reader thread. Crash retries are the
scheduler's decision (it sees failed runs, and stops after
``outcome.FAILURE_BUDGET`` failed or rejected ones in a row); the runner never
retries alone. A run's metrics record ``by_hand`` (the user started or resumed it
with Train now, which resets that count) and ``resumes``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from rltray.app import childpython
from rltray.app.errors import ExitCode, NothingToDo, UserError
from rltray.app.training import jobbuild, leftovers, outcome, remote
from rltray.app.training import versions as adapterversions
from rltray.app.training.publisher import Publisher, failure_line

if TYPE_CHECKING:
    from rltray.app.paths import Paths
    from rltray.app.store import Adapter, Run, Store

EXIT_PAUSED = 3  # trainer/__main__.py's exit-code table
STOP_FILE = "stop"  # trainer/stopchannel.py: the job folder's stop file
STDIN_ENV = "RLTRAY_TRAINER_STDIN"  # trainer/stopchannel.py: "stop" = stdin EOF stops it
PARENT_PID_ENV = "RLTRAY_TRAINER_PARENT_PID"  # trainer/priority.py: the pid it watches
ANSWER_CACHE_ENV = "RLTRAY_ANSWER_CACHE"  # trainer/base_answers.py: where base answers are kept
CREATE_NO_WINDOW = 0x08000000  # Windows process creation flag (winbase.h)
LOG_TAIL_LINES = 40
PROGRESS_SAVE_S = 2.0  # write progress into the run row at most this often


TrainingNotSetUp = jobbuild.TrainingNotSetUp  # raised by start()/resume(); defined with the check


class TrainingBusy(UserError):
    exit_code = ExitCode.ALREADY_RUNNING


@dataclass
class _Child:
    """The one running trainer and what its lines said so far."""

    run_id: str
    built: jobbuild.BuiltJob
    proc: subprocess.Popen[bytes]
    progress: dict[str, Any]
    stop_mode: str | None = None  # "pause", "cancel" or "detach" once asked to stop
    stop_reason: str = "stopped by the user"  # a cancelled run's error
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    paused: bool = False
    saved_at: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    finished: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None
    remote: bool = False  # a remote stand-in (app/training/remote), not the trainer
    user_away: bool = False  # the scheduler started (or resumed) it while the user was away
    # the trainer exited and its result is recorded: only the publish to Ollama runs now
    # (it may take tens of minutes), which a rollback does not wait for (review 3 r5)
    publishing: bool = False


def failure_text(error: Mapping[str, Any] | None, code: int, tail: str) -> str:
    """A failed run's ``error``: the cause on the first line, then the log tail.

    The cause is the trainer's ``error`` line; a trainer that died without one
    (an import error, a segfault, a kill) gets its exit code and the last line it
    wrote to stderr, usually the exception. Our own ``--- <time> <reason>`` header
    lines are never the cause (`rltray runs` once showed one as the error).
    """
    said = str((error or {}).get("message") or "").strip()
    if not said:
        said = f"the trainer exited with code {code}"
        written = [ln.strip() for ln in tail.splitlines() if ln.strip()]
        written = [ln for ln in written if not ln.startswith("--- ")]
        if written:
            said += f": {written[-1]}"
    return said + ("\n--- trainer.log (last lines) ---\n" + tail if tail else "")


class TrainingRunner:
    """Starts, stops, resumes and finishes training rounds over one data folder."""

    def __init__(
        self,
        store: Store,
        paths: Paths,
        settings_provider: Callable[[], Any],
        publisher: Publisher | None = None,
        on_change: Callable[[dict[str, Any]], None] | None = None,
        *,
        hyper: Mapping[str, Any] | None = None,
        device: str = "auto",
        env: Mapping[str, str] | None = None,
        replay_share: float | None = None,  # None: the preset's (jobbuild.DATA_SHARES)
        stop_timeout_s: float = 60.0,
    ) -> None:
        """``settings_provider`` returns the current ``config.Config`` (or its ``training``).

        ``hyper`` / ``device`` go into every job (tests use them for tiny models);
        ``env`` is added to the trainer's environment.
        """
        self.store = store
        self.paths = paths
        self.settings_provider = settings_provider
        self.publisher = publisher or Publisher()
        self.on_change = on_change
        self.hyper = dict(hyper or {})
        self.device = device
        self.env = dict(env or {})
        self.replay_share = replay_share
        self.stop_timeout_s = stop_timeout_s
        self._lock = threading.RLock()
        self._child: _Child | None = None
        self._last: dict[str, Any] = {"run_id": None, "status": "idle", "percent": 0.0}
        self._trainer_said: str | None = None  # the last warning about an old trainer

    # -- public API ----------------------------------------------------------

    def start(self, reason: str = "manual") -> str:
        """Start a round (or resume the paused one) and return its run id.

        A ``manual`` round trains on any fresh rating; other reasons (the
        scheduler's) need ``training.min_ratings`` of them. A paused round of
        the same base model is resumed instead of building a new one.
        """
        self._update_trainer(by_hand=reason == "manual")  # pip, if any, before the lock
        with self._lock:
            self._refuse_if_running()
            self._refuse_if_elsewhere()
            training = self._training()
            paused = adapterversions.resumable_run(self.store, self.paths, training.base_model)
            away = reason == "scheduled"  # the scheduler starts rounds only while idle
            by_hand = reason == "manual"  # Train now: resets the failure budget
            if paused is not None:
                return self._launch(paused, reason="resume", user_away=away, by_hand=by_hand)
            python = None if remote.enabled(training) else self._trainer_python(training)
            run_id = jobbuild.new_run_id()
            built = jobbuild.build_job(
                self.store,
                self.paths,
                training,
                run_id,
                replay_share=self.replay_share,
                hyper=self.hyper,
                device=self.device,
                min_fresh=1 if reason == "manual" else training.min_ratings,
            )
            self.store.add_run(run_id, status="running")
            return self._launch(
                run_id, reason=reason, built=built, python=python, user_away=away, by_hand=by_hand
            )

    def resume(self, run_id: str | None = None) -> str:
        """Run a paused round's job folder again; the trainer continues from its checkpoint.

        A paused run that must not resume (its ratings changed, another model or version
        is set up now: ``adapterversions.cancel_if_stale``, what ``start`` asks too) is
        cancelled instead, and this says why.
        """
        self._update_trainer(by_hand=True)  # pip, if any, before the lock
        with self._lock:
            self._refuse_if_running()
            self._refuse_if_elsewhere()
            paused = [r.id for r in self._paused_runs()]
            run_id = run_id or (paused[0] if paused else None)
            if run_id is None or run_id not in paused:
                raise NothingToDo("there is no paused training run to resume")
            base_model = self._training().base_model
            why = adapterversions.cancel_if_stale(self.store, self.paths, run_id, base_model)
            if why is not None:
                raise NothingToDo(
                    f"training run {run_id} cannot resume, so it was cancelled: {why}; "
                    "`rltray train` starts a new round"
                )
            return self._launch(run_id, reason="resume", by_hand=True)

    def stop(self, pause: bool = True, timeout: float | None = None) -> bool:
        """Ask the trainer to stop (it checkpoints), kill it after ``timeout``; False if idle.

        Also False once the trainer has exited and its result is being recorded (the
        publish to Ollama runs then): there is nothing left to pause, and waiting for the
        publish blocked the gate and left a stop file behind for a round that was done.
        """
        with self._lock:
            child = self._child
            if child is None or child.proc.returncode is not None:
                return False
            if child.stop_mode != "cancel":  # a round cancelled for its ratings stays so
                child.stop_mode = "pause" if pause else "cancel"
            _terminate(child.proc, child.built.folder, cancel=child.stop_mode == "cancel")
        if threading.current_thread() is child.reader:
            return True  # called from on_change: the reader records the outcome itself
        self._see_stopped(child, timeout)
        return True

    def ratings_changed(self, turn_ids: Iterable[int] = ()) -> str | None:
        """Cancel the running round when a rating it holds is no longer the user's verdict.

        For ``Service.rating_listeners`` (the runtime adds it; ``turn_ids``: turns whose
        rating changed, or that were deleted): a round trained on a verdict the user
        reversed or withdrew, or on a deleted turn's text, must not become a version
        (``adapterversions.stale_ratings``), so it is stopped now rather than at its end
        (review 2 r2). It is cancelled, not paused: its job files are stale. Returns the
        reason, or None when the round (if any) holds none of them. Never waits: the
        trainer is told to stop here and a helper thread escalates if it does not.
        """
        del turn_ids  # a deleted turn's ratings can no longer be looked up: ask the store
        with self._lock:
            child = self._child
        if child is None or child.stop_mode in ("cancel", "detach"):
            return None
        why = adapterversions.changed_while_training(self.store, child.built)
        if why is not None:
            self._cancel(child, why)
        return why

    def _cancel(self, child: _Child, why: str) -> None:
        """Stop ``child`` as cancelled with ``why`` as its error, without waiting for it."""
        with self._lock:
            if child.finished.is_set() or child.stop_mode in ("cancel", "detach"):
                return
            child.stop_mode, child.stop_reason = "cancel", why
            _terminate(child.proc, child.built.folder, cancel=True)
        threading.Thread(
            target=self._see_stopped, args=(child, None), name=f"trainer-cancel-{child.run_id}",
            daemon=True,
        ).start()  # fmt: skip

    def _see_stopped(self, child: _Child, timeout: float | None) -> None:
        """Wait for a trainer asked to stop; SIGTERM, then kill, when it does not."""
        limit = self.stop_timeout_s if timeout is None else timeout
        grace = min(SIGTERM_AFTER_S, limit)
        if not child.finished.wait(grace) and sys.platform != "win32":
            # a trainer environment built before the stop file knows only SIGTERM, which
            # every trainer takes as the same request: checkpoint and exit 3
            with contextlib.suppress(OSError):
                child.proc.terminate()
        if not child.finished.wait(max(0.0, limit - grace)):
            with contextlib.suppress(OSError):
                child.proc.kill()
            child.finished.wait(30)

    def close(self) -> None:
        """Pause a running round (the tray is quitting); a remote round runs on there and
        the next start re-attaches to it (``reconcile``), so only its stand-in ends."""
        with self._lock:
            child = self._child
            if child is not None and child.remote:
                child.stop_mode = "detach"  # SIGKILL: its SIGTERM would stop the Ray job
                with contextlib.suppress(OSError):
                    child.proc.kill()
        if child is not None and child.remote:
            child.finished.wait(30)
            return
        self.stop(pause=True)

    def running(self) -> bool:
        with self._lock:
            return self._child is not None

    def running_for_the_user(self) -> bool:
        """A round runs that the user asked for, not one the scheduler started (or resumed)
        because the user was away: only those may go on on battery or while they work."""
        with self._lock:
            return self._child is not None and not self._child.user_away

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the current round is finished and recorded; True when idle."""
        with self._lock:
            child = self._child
        return child is None or child.finished.wait(timeout)

    @property
    def progress(self) -> dict[str, Any]:
        """A copy of the latest progress: run_id, status, percent, step, total, message …"""
        with self._lock:
            return dict(self._child.progress if self._child else self._last)

    def rollback(
        self, version: int | None = None, said: Callable[[str], None] | None = None
    ) -> Adapter | None:
        """Make ``version`` active: default the active one's parent (which may be the base
        model), ``0`` the plain base model. Returns the active adapter, None for the base.

        See ``adapterversions.rollback``; refused while a round trains, because that
        round's parent would silently stop being the active version (not once it is
        recorded and only its publish to Ollama runs: ``_refuse_if_running``). ``said`` gets
        the publisher's line (what Ollama serves now, or why it does not). The store
        changes first and never waits for Ollama; the publisher points ``latest`` at
        whatever is active when it holds the data folder's publish lock.
        """
        with self._lock:
            self._refuse_if_running("roll back", publishing_ok=True)
            target = adapterversions.rollback(
                self.store, self.paths, version, base_model=self._training().base_model
            )
        line = self._publish("rolled_back", target.version if target is not None else None)
        if line is not None and said is not None:
            said(line)
        self._notify()
        return target

    def publish_active(self) -> str | None:
        """Make Ollama serve the active version (it was down, or an export was cut short):
        the publisher's line.

        A version never published (or whose publish failed) is published; otherwise
        ``latest`` is pointed at the active version (or the base model). Unlike a
        rollback, this waits for a publish in flight rather than leaving the job to it.
        """
        active = self.store.active_adapter()
        if active is not None and not active.ollama_tag:
            return self._publish("published", active.version)
        return self._publish("serve_active", active.version if active is not None else None)

    def reconcile(self) -> list[str]:
        """Settle runs a killed tray left ``running``; returns their ids. Call once at start.

        A run whose owner (the process that runs its trainer) is alive is left to it: a
        `rltray train` in a terminal, or a tray. A leftover trainer still alive is stopped
        first. A run whose adapter was fully written is applied from its ``rltray.json``;
        one with a checkpoint becomes ``paused`` (resumable); any other is ``failed``.
        Output that failed or cancelled runs left in ``adapters/`` is removed.
        """
        settled = []
        with self._lock:
            current = self._child.run_id if self._child else None
            for run in reversed(self.store.list_runs(limit=100)):  # oldest first
                if run.status != "running" or run.id == current:
                    continue
                if leftovers.live_owner(self.paths.runs / run.id) is not None:
                    continue
                if current is None and remote.attachable(self.paths.runs / run.id):
                    # a remote round runs on without the tray: follow it again
                    current = self._launch(run.id, reason="reattach")
                    settled.append(run.id)
                    continue
                version = leftovers.settle_leftover(
                    self.store, self.paths, run, self.stop_timeout_s, self._training().base_model
                )
                if version is not None:
                    self._publish_round(run.id, version)
                settled.append(run.id)
            adapterversions.sweep_outputs(self.store, self.paths)
        return settled

    # -- launching -----------------------------------------------------------

    def _update_trainer(self, by_hand: bool) -> None:
        """Bring the trainer environment up to this rltray's trainer before a round, holding
        no lock: pip may take minutes, and ``running()`` (the tray, `/api/status`, the gate)
        waited for it all (review 4, item 1). Not while a round of this data folder runs,
        here or in another process: pip would replace the trainer under it. ``by_hand``
        (Train now, resume) tries again an update that failed before."""
        if self.running():
            return
        training = self._training()
        if remote.enabled(training):
            return
        try:
            self._refuse_if_elsewhere()
        except TrainingBusy:
            return
        jobbuild.update_trainer(training, retry=by_hand, said=self._say_trainer)

    def _trainer_python(self, training: Any) -> str:
        """``jobbuild.training_python`` under the lock: never pip (``_update_trainer``)."""
        return jobbuild.training_python(training, update=False, said=self._say_trainer)

    def _say_trainer(self, warning: str) -> None:
        """Log that rounds run with an old trainer once, not at every round."""
        if warning != self._trainer_said:
            self._trainer_said = warning
            self.store.log_event("training", warning)

    def _training(self) -> Any:
        settings = self.settings_provider()
        return getattr(settings, "training", settings)

    def _refuse_if_running(
        self, what: str = "start another round", publishing_ok: bool = False
    ) -> None:
        """Refuse while a round runs. ``publishing_ok``: not once its trainer has exited and
        its result is recorded (a rollback then goes ahead: the publisher's lock and its
        ``_settle`` point ``latest`` at whatever is active when the publish ends). Review 3
        r5: a rollback was refused for the whole merge and upload, tens of minutes."""
        child = self._child
        if child is not None and not (publishing_ok and child.publishing):
            raise TrainingBusy(f"a training round is running; pause it before you {what}")

    def exporting(self) -> bool:
        """Whether the round's result is recorded and only its publish to Ollama runs."""
        with self._lock:
            return self._child is not None and self._child.publishing

    def _refuse_if_elsewhere(self) -> None:
        """Another live process runs a round of this data folder (``reconcile`` leaves it
        alone): a second round would train the same ratings beside it."""
        for run in self.store.list_runs(limit=100):
            owner = None
            if run.status == "running":
                owner = leftovers.live_owner(self.paths.runs / run.id)
            if owner is not None:
                raise TrainingBusy(
                    f"training run {run.id} is already running in another process (pid "
                    f"{owner}: `rltray train` in another terminal, or a tray); it goes on "
                    "there. `rltray runs` shows how it goes and how it ended."
                )

    def _paused_runs(self) -> list[Run]:
        return adapterversions.paused_runs(self.store)

    def _launch(
        self,
        run_id: str,
        *,
        reason: str,
        built: jobbuild.BuiltJob | None = None,
        python: str | None = None,
        user_away: bool = False,
        by_hand: bool = False,
    ) -> str:
        """Spawn the trainer on ``runs/<run_id>/job.json`` and its reader thread.

        ``user_away``: the scheduler started this round because the user is idle
        (it pauses the round when they return), so the trainer may use every core;
        otherwise it leaves one free (``torch_setup.choose_threads``). ``by_hand``:
        the user asked for this round (Train now), which resets the scheduler's
        failure budget (``outcome.failure_streak``); it stays set when the run resumes.
        """
        folder = self.paths.runs / run_id
        built = built or jobbuild.read_manifest(folder)
        training = self._training()
        remote_round = remote.enabled(training)
        if remote_round:  # the stand-in speaks the trainer's contract (app/training/remote)
            argv = remote.command(built.job_path)
        else:
            python = python or self._trainer_python(training)
            argv = [python, "-m", "rltray.trainer", str(built.job_path)]
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            childpython.SAFE_PATH_ENV: "1",  # the current folder off sys.path (review 3, 2)
            "RLTRAY_TRAINER_USER_AWAY": "1" if user_away else "0",
            # kept in the data folder, emptied when a turn is deleted (a user's own setting,
            # such as "off", wins)
            ANSWER_CACHE_ENV: os.environ.get(ANSWER_CACHE_ENV) or str(self.paths.answer_cache),
            STDIN_ENV: "stop",
            PARENT_PID_ENV: str(os.getpid()),
            **self.env,
        }
        with contextlib.suppress(FileNotFoundError):
            (folder / STOP_FILE).unlink()  # a stop the last trainer never saw is not for this one
        with open_private_log(folder / "trainer.log") as log:
            log.write(f"--- {datetime.now(timezone.utc).isoformat()} {reason}\n".encode())
            log.flush()
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    cwd=folder,
                    env=env,
                    creationflags=creation_flags(),
                )
            except OSError as exc:
                if reason != "resume":  # a paused run stays resumable
                    self.store.finish_run(
                        run_id, "failed", error=f"the trainer did not start: {exc}"
                    )
                raise jobbuild.TrainingNotSetUp(
                    f"set up training first: {argv[0]} did not start ({exc})"
                ) from None
        if remote_round and proc.stdin is not None:
            with contextlib.suppress(OSError):  # settings and keyring secrets, never argv
                proc.stdin.write(remote.handshake(training))
                proc.stdin.flush()
        leftovers.claim(folder, proc.pid)  # trainer.pid and owner.pid (reconcile reads them)
        run = self.store.get_run(run_id)
        before = run.metrics if run else {}
        resumed = reason in ("resume", "reattach")
        metrics = {
            **before,
            "reason": reason,
            "by_hand": by_hand or bool(before.get("by_hand")),
            "resumes": int(before.get("resumes") or 0) + resumed,
            "notes": list(built.notes),
            "fresh": len(built.fresh_ids),
            "heldout": len(built.heldout_ids),
            "replay": len(built.replay_ids),
            "window": built.window,  # what decides whether an example fits (skipped)
        }
        self.store.set_run_metrics(run_id, metrics)
        if run is not None and run.status != "running":
            self.store.set_run_status(run_id, "running")
        progress = {
            "run_id": run_id,
            "status": "running",
            "percent": 0.0,
            "message": "resuming from the checkpoint" if resumed else "starting",
            "resumed": resumed,
        }
        child = _Child(run_id, built, proc, progress, metrics=metrics, remote=remote_round,
                       user_away=user_away)
        child.reader = threading.Thread(
            target=self._read, args=(child,), name=f"trainer-reader-{run_id}", daemon=True
        )
        self._child = child
        child.reader.start()
        self._notify()
        return run_id

    # -- the reader thread ---------------------------------------------------

    def _read(self, child: _Child) -> None:
        """Drain stdout to EOF, then record the outcome; always leaves the runner idle."""
        assert child.proc.stdout is not None
        for raw in io.TextIOWrapper(child.proc.stdout, encoding="utf-8", errors="replace"):
            if raw.strip():
                with contextlib.suppress(Exception):  # one odd line must not stop the draining
                    self._on_line(child, raw)
        code = child.proc.wait()
        try:
            self._finish(child, code)
        except Exception as exc:  # never leave the runner stuck "running"
            with contextlib.suppress(Exception):
                self.store.finish_run(child.run_id, "failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            leftovers.release(child.built.folder)  # a detached remote round: the next
            status = "unknown"  # start re-attaches to it (``reconcile``)
            with contextlib.suppress(Exception):
                status = getattr(self.store.get_run(child.run_id), "status", status)
            with self._lock:
                self._last = {**child.progress, "status": status}
                self._child = None
            child.finished.set()
            self._notify()

    def _on_line(self, child: _Child, raw: str) -> None:
        try:
            line = json.loads(raw)
        except ValueError:
            line = {"type": "log", "message": raw.strip()}
        if not isinstance(line, dict):
            return
        kind = line.get("type")
        with self._lock:
            p = child.progress
            if kind == "progress":
                step, total = int(line.get("step", 0)), max(1, int(line.get("total", 1)))
                p.update(step=step, total=total, percent=round(100.0 * step / total, 1))
                p.update(loss=line.get("loss"), message=f"step {step} of {total}")
            elif kind == "metric":
                child.metrics[str(line.get("name"))] = line.get("value")
            elif kind == "log":
                p["message"] = str(line.get("message", ""))
            elif kind == "done":
                child.done = line
                p.update(percent=100.0, message="finishing")
            elif kind == "paused":
                child.paused = True
            elif kind == "skipped":
                _record_skip(child.metrics, line)
            elif kind == "error":
                child.error = line
                p["message"] = str(line.get("message", ""))
            now = time.monotonic()
            save = kind in ("metric", "skipped") or now - child.saved_at >= PROGRESS_SAVE_S
            if save:
                child.saved_at = now
                child.metrics["progress"] = {k: v for k, v in p.items() if k != "run_id"}
                snapshot = dict(child.metrics)
        if save:
            with contextlib.suppress(Exception):
                self.store.set_run_metrics(child.run_id, snapshot)
        if save or kind == "progress":
            # a rating changed in another process (`rltray bad`, a tray while `rltray
            # train` runs) reaches no listener here: ask the store at each step (one
            # indexed query, nothing beside a training step)
            self.ratings_changed()
        self._notify()

    def _finish(self, child: _Child, code: int) -> None:
        metrics = {**child.metrics, "exit_code": code}
        if child.stop_mode == "detach":  # the remote round runs on: still "running" here
            return
        if child.done is not None and code == 0:
            self._apply(child, metrics)
        elif child.stop_mode == "cancel":
            adapterversions.cancel_run(
                self.store, self.paths, child.run_id, child.stop_reason, metrics
            )
        elif child.paused or code == EXIT_PAUSED or (
            child.stop_mode == "pause" and child.error is None  # a pause that failed failed
        ):
            self.store.set_run_metrics(child.run_id, metrics)
            self.store.set_run_status(child.run_id, "paused")
        else:
            tail = outcome.log_tail(child.built.folder / "trainer.log", LOG_TAIL_LINES)
            error = failure_text(child.error, code, tail)
            self.store.finish_run(child.run_id, "failed", metrics=metrics, error=error)
            adapterversions.discard_output(self.paths, child.run_id)

    # -- results -------------------------------------------------------------

    def _apply(self, child: _Child, metrics: dict) -> None:
        """Record the finished round's result, then publish the version it made active."""
        assert child.done is not None
        with self._lock:
            version = adapterversions.apply_result(
                self.store, self.paths, child.built, child.done, metrics,
                self._training().base_model,
            )  # fmt: skip
            child.publishing = version is not None
        if version is not None:
            self._publish_round(child.built.run_id, version)

    def _publish_round(self, run_id: str, version: int) -> None:
        """Publish an accepted round's version and keep the line in the run's metrics
        (``ollama``), where `rltray train` reads it when it says how the round ended."""
        line = self._publish("published", version)
        if line is None:
            return
        with contextlib.suppress(Exception):
            run = self.store.get_run(run_id)
            if run is not None:
                self.store.set_run_metrics(run_id, {**run.metrics, "ollama": line})

    def _publish(self, hook: str, version: int | None) -> str | None:
        """Call the publisher; a failure is logged and said, never raised (the version
        is active here whatever Ollama does). The line names the version active when it
        failed: a rollback may have landed while the publish ran (review r5)."""
        try:
            return getattr(self.publisher, hook)(version)
        except Exception as exc:
            with contextlib.suppress(Exception):
                self.store.log_event("publish-failed", f"{hook}({version}): {exc}")
                active = self.store.active_adapter()
                version = active.version if active is not None else None
            return failure_line(exc, version)

    def _notify(self) -> None:
        if self.on_change is None:
            return
        with contextlib.suppress(Exception):  # a broken listener must not stop bookkeeping
            self.on_change(self.progress)


def _record_skip(metrics: dict[str, Any], line: Mapping[str, Any]) -> None:
    """Keep a ``skipped`` line (``{"type": "skipped", "id", "set", "reason"}``,
    trainer/rounddata.py) in the run's metrics, once per example (a resumed trainer
    says it again). Review 2 r4: the runner dropped them, so nothing named the rating."""
    entry = {
        "rating": jobbuild.rating_of(line.get("id")),
        "id": str(line.get("id")),
        "set": str(line.get("set") or "training"),
        "reason": str(line.get("reason") or ""),
    }
    known = metrics.setdefault("skipped", [])
    if not any(e.get("id") == entry["id"] and e.get("set") == entry["set"] for e in known):
        known.append(entry)


def open_private_log(path: Path) -> BinaryIO:
    """``path`` opened for appending, created 0600 whatever the umask (it was 0666 under
    umask 000) and made 0600 if it was not; a symlink in its place is refused."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags, 0o600)
    with contextlib.suppress(OSError, AttributeError):  # no os.fchmod on Windows before 3.13
        os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


def creation_flags(platform: str = sys.platform) -> int:
    """``Popen`` creation flags for the trainer: ``CREATE_NO_WINDOW`` on Windows, else none.

    Why: a console program started from the windowed tray (``rltray.exe``, the Run-key
    start) opens a console window of its own each round; with this flag it runs without
    one. No ``CREATE_NEW_PROCESS_GROUP``: it was there for ``CTRL_BREAK_EVENT``, which
    needs a console the tray does not have (:func:`_terminate` uses none).
    """
    return CREATE_NO_WINDOW if platform == "win32" else 0


#: Seconds a trainer has to answer the stop file before SIGTERM follows (off Windows).
SIGTERM_AFTER_S = 15.0


def _terminate(proc: subprocess.Popen[bytes], folder: Path, cancel: bool = False) -> None:
    """Ask the trainer to pause: write ``folder/stop`` and close its stdin.

    Why no signal: on Windows ``CTRL_BREAK_EVENT`` reaches only processes that share
    the sender's console, and the windowed tray has none; the failure was swallowed,
    the trainer ran on until :meth:`TrainingRunner.stop` killed it, without a
    checkpoint. Both of these work on every OS without a console
    (``trainer/stopchannel.py``); the trainer checkpoints and exits 3.
    """
    with contextlib.suppress(OSError):  # "cancel" tells a remote stand-in to clean up there
        (folder / STOP_FILE).write_bytes(b"cancel" if cancel else b"")
    with contextlib.suppress(OSError, ValueError):
        if proc.stdin is not None:
            proc.stdin.close()

