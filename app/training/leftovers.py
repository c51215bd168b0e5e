"""Rounds a process left behind: who runs a round's trainer, and settling the leftovers.

Split from app/training/versions.py along its noun: versions says what a result
means for the store; this module says whose a ``running`` run is and what a
killed tray's run becomes. Decisions kept here:

* A run another process runs (its ``owner.pid`` names a live process: a tray, or
  `rltray train` in a terminal) is its own; only runs whose owner is gone are
  settled as leftovers.
* A leftover whose adapter was fully written is applied from its ``rltray.json``
  through ``versions.apply_result``, the one place a result is recorded (so a round
  whose ratings changed while it trained is cancelled here too); one with a
  checkpoint becomes ``paused``; any other is ``failed``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.app.fileio import write_private_atomic
from rltray.app.training import jobbuild
from rltray.app.training import versions as adapterversions

if TYPE_CHECKING:
    from rltray.app.paths import Paths
    from rltray.app.store import Run, Store

KILLED_TRAY = "the app stopped while this run was going"
TRAINER_PID_FILE = "trainer.pid"
OWNER_FILE = "owner.pid"  # the process that runs the round's trainer: a tray or `rltray train`


def claim(folder: Path, trainer_pid: int) -> None:
    """Record that this process runs the trainer ``trainer_pid`` of run ``folder`` (0600)."""
    write_private_atomic(folder / TRAINER_PID_FILE, str(trainer_pid).encode(), mode=0o600)
    write_private_atomic(folder / OWNER_FILE, str(os.getpid()).encode(), mode=0o600)


def release(folder: Path) -> None:
    """This process no longer runs the round of ``folder`` (its trainer ended, or a remote
    round was left to run on for the next start to re-attach to)."""
    path = folder / OWNER_FILE
    with contextlib.suppress(OSError, ValueError):
        if int(path.read_text(encoding="utf-8")) == os.getpid():
            path.unlink()


def live_owner(folder: Path) -> int | None:
    """The pid of the live process that runs this round's trainer, else None.

    Regression (review r3): a second `rltray train` (or a tray starting) took the first
    one's live round for a killed tray's leftover, stopped its trainer and settled it as
    failed while its version became active. A pid reused since is no owner: a process
    started after ``owner.pid`` was written did not write it.
    """
    import psutil

    path = folder / OWNER_FILE
    try:
        pid, written = int(path.read_text(encoding="utf-8")), path.stat().st_mtime
        proc = psutil.Process(pid)
        alive = proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= written + 1.0
    except (OSError, ValueError, psutil.Error):
        return None
    return pid if alive else None


def settle_leftover(
    store: Store, paths: Paths, run: Run, timeout: float = 60.0, base_model: str = ""
) -> int | None:
    """Settle a run a killed tray left ``running``; see ``TrainingRunner.reconcile``.

    A trainer of it still alive is stopped first (it would pause on its own).
    Its adapter fully written: apply it from ``rltray.json`` (returns the version
    made active). A checkpoint: ``paused``, resumable. Otherwise ``failed``. A run
    another process settled meanwhile is left as that process recorded it.
    """
    folder = paths.runs / run.id
    stop_leftover(folder, timeout)
    meta = finished_meta(folder, run.id)
    now = store.get_run(run.id)
    if now is None or now.status != "running":
        return None
    if meta is not None:
        built = jobbuild.read_manifest(folder)
        return adapterversions.apply_result(store, paths, built, meta, run.metrics, base_model)
    if (folder / "checkpoint" / "state.json").is_file():
        store.set_run_status(run.id, "paused", only_if="running")
    elif store.finish_run(
        run.id, "failed", metrics=run.metrics, error=KILLED_TRAY, only_if="running"
    ).status == "failed":
        adapterversions.discard_output(paths, run.id)
    return None


def finished_meta(folder: Path, run_id: str) -> dict[str, Any] | None:
    """The result a trainer wrote before the tray died (its adapter's rltray.json), or None.

    The folder is checked again as the trainer checks a folder it wrote
    (trainer/finish.py ``written_result``), with the tray's standard-library checker: the
    trainer may have died between writing it and checking it. A folder that fails is
    taken as rejected, with the reasons, and so never becomes a version.
    """
    from rltray.app.training.remote import verify

    try:
        out = jobbuild.read_manifest(folder).out
    except (OSError, ValueError, KeyError):
        return None
    meta = adapterversions.written_meta(out)
    if meta.get("job_id") != run_id:
        return None
    keys = ("accepted", "reasons", "metrics", "baseline", "trained_ids", "unseen_ids")
    result = {k: meta.get(k) for k in keys}
    problems = verify.problems(out, run_id, result) if result["accepted"] else []
    if problems:
        reasons = [*(result["reasons"] or []), *(f"adapter check failed: {p}" for p in problems)]
        result.update(accepted=False, reasons=reasons)
    return result


def stop_leftover(folder: Path, timeout: float) -> None:
    """SIGTERM, then kill, a trainer of this run folder that outlived its tray."""
    import psutil

    try:
        pid = int((folder / TRAINER_PID_FILE).read_text(encoding="utf-8"))
        proc = psutil.Process(pid)
        if not any(str(folder) in part for part in proc.cmdline()):
            return  # the pid was reused by something else
        proc.terminate()
        proc.wait(timeout)
    except psutil.TimeoutExpired:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    except (OSError, ValueError, psutil.Error):
        return
