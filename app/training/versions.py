"""Adapter versions: turn a finished round into ``adapters/vNNNN``, roll back, settle runs.

Split from the runner (app/training/runner.py) along its noun: the runner owns a
process; this module owns what a result *means* for the store and the
adapters folder. Plain functions over a Store and Paths, no state, so the
runner, reconcile-after-a-crash and tests all apply a result the same way.

Decisions kept here:

* An accepted adapter is renamed from the trainer's ``adapters/.run-<id>`` to
  ``adapters/vNNNN`` (same folder, so the rename is atomic) and registered
  candidate-then-active with its parent and its EMA baseline, the fresh ratings
  are marked trained and the run is ``done`` — one transaction; on a store
  error the folder is renamed back.
* A rejected adapter's folder is deleted and no version is registered: it is
  never served, may be large, and dense version numbers keep Ollama tags
  readable. The run row keeps the gate's reasons and metrics.
* When the active version changed while the round trained (a rollback from
  another process), the new adapter is kept as a ``candidate`` and not switched
  in under the user. So is a round built on a base model that is no longer the
  one set up (``training.base_model`` changed while it trained): it is never
  served on a model it was not judged on. A round on a new ``training.base_model``
  starts a new line (no parent) and does become active over a version of the old base.
* Only the fresh ratings the kept weights saw are marked trained (the trainer
  lists the others as ``unseen_ids``); those wait for the next round. A version kept
  as a candidate marks none: the active line never learned them. It records them
  (``retires``) and marks them when a rollback makes it active, so they are not
  trained a second time on top of weights that already learned them.
* The round's held-out ratings join the standing held-out set when its result is
  recorded (accepted or rejected: the gate judged on them), not when the job is
  built: a round that failed or was cancelled judged nothing, and must not move
  ratings out of training for good.
* A paused run trained from a parent that is no longer active is stale, so it
  is ``cancelled`` whenever the active version changes.
* The sha256 of a version's weights and config are recorded when its result is applied
  (``file_digests``); a rollback compares them, and checks the files are a LoRA adapter
  at all, before the store switches or anything is published (``folder_problems``): a
  folder whose files went missing or were replaced is never served under that number.
* A round is what the user said *when it was built*. When any rating its job holds
  is no longer the user's active verdict (reversed, withdrawn, its turn deleted),
  its result is never recorded: the run is ``cancelled``, its output removed, no
  rating marked trained or held out, the baseline untouched (``stale_ratings``, the
  one home of that rule: a paused run is not resumed for it, a running one is
  stopped by the runner, and ``apply_result`` checks it last, for the live round
  and a leftover alike).
* An example the trainer skipped (a ``skipped`` line, recorded by the runner in the
  run's metrics as ``skipped``) was neither trained nor judged on: a skipped fresh
  rating is not marked trained, a skipped held-out one does not join the standing
  held-out set. Both stay out of later rounds with the same window
  (``jobbuild.unfit_ratings``), since they would be skipped again; the run's notes
  name them (``outcome.skipped_notes``).

Runs another process left behind (whose trainer is whose, settling a killed tray's
run) are app/training/leftovers.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltray.app import fileio
from rltray.app.errors import NothingToDo, UserError
from rltray.app.training import jobbuild, outcome
from rltray.app.training.remote import verify

if TYPE_CHECKING:
    from rltray.app.paths import Paths
    from rltray.app.store import Adapter, Run, Store

_VERSION_DIR = re.compile(r"^v(\d{4,})$")
#: The files a version is served from: their digests are recorded when its result is
#: applied and compared before it is made active again (``folder_problems``).
SERVED_FILES = (verify.WEIGHTS, verify.CONFIG)
_RUN_OUTPUT = re.compile(r"^\.{1,2}run-(.+?)(?:\.tmp-.*)?$")  # .run-<id>, ..run-<id>.tmp-…


def folder_name(version: int) -> str:
    return f"v{version:04d}"


def describe(version: int | None) -> str:
    return "the base model" if version is None else f"v{version}"


def next_version(store: Store, adapters_dir: Path) -> int:
    """One above every version in the store and every ``vNNNN`` folder on disk."""
    taken = [a.version for a in store.list_adapters()]
    with contextlib.suppress(OSError):
        for p in adapters_dir.iterdir():
            m = _VERSION_DIR.match(p.name)
            if m:
                taken.append(int(m.group(1)))
    return max(taken, default=0) + 1


def paused_runs(store: Store) -> list[Run]:
    """Paused runs, newest first."""
    return [r for r in store.list_runs(limit=100) if r.status == "paused"]


def resumable_run(store: Store, paths: Paths, base_model: str) -> str | None:
    """The newest paused run worth resuming; the others that can never be resumed are
    cancelled (``cancel_if_stale`` says which)."""
    keep = None
    for run in paused_runs(store):
        if cancel_if_stale(store, paths, run.id, base_model) is None and keep is None:
            keep = run.id
    return keep


def cancel_if_stale(store: Store, paths: Paths, run_id: str, base_model: str) -> str | None:
    """Cancel the paused run ``run_id`` when it must not resume, and say why; else None.

    A paused run of another base model (the settings changed) or without its folder
    can never give an adapter the user wants. Nor can one whose ratings changed while
    it waited: its job files were written when it was built, and a rating the user
    reversed, withdrew or deleted since would be trained (or judged on) with its old
    value, a deleted turn's text with it. The next round is built afresh from the store.
    ``TrainingRunner.start`` (through ``resumable_run``) and ``resume`` both ask this.
    """
    try:
        manifest = jobbuild.read_manifest(paths.runs / run_id)
    except (OSError, ValueError, KeyError):
        manifest = None
    if manifest is None or manifest.base_model != base_model.strip():
        why: str | None = "the model to train changed while it was paused"
    else:
        why = _stale_since(store, manifest)
    if why:
        cancel_run(store, paths, run_id, why)
    return why


def stale_ratings(store: Store, built: jobbuild.BuiltJob) -> list[int]:
    """The ratings of a round's job that are no longer the user's active verdict: reversed
    (a new rating replaced it), withdrawn, or its turn deleted. The one home of "the
    round is not what the user says now", for a paused, a running and a finished round."""
    return sorted(set(built.rating_ids) - store.active_of(built.rating_ids))


def changed_while_training(store: Store, built: jobbuild.BuiltJob) -> str | None:
    """Why a running or finished round must not become a version (``stale_ratings``), else
    None: the reason its run is cancelled with."""
    changed = stale_ratings(store, built)
    if not changed:
        return None
    them = "1 of its ratings was" if len(changed) == 1 else f"{len(changed)} of its ratings were"
    return (
        f"ratings changed while it trained: {them} reversed, withdrawn or deleted since it "
        "started; a new round will train on what you said now"
    )


def _stale_since(store: Store, manifest: jobbuild.BuiltJob) -> str | None:
    """Why a paused round (of the model set up now) must not resume, if it must not."""
    changed = len(stale_ratings(store, manifest))
    if changed:
        return (f"{changed} of its ratings were changed or deleted while it was paused; the "
                "next round starts afresh with them as they are")
    now = jobbuild.line_parent(store.active_adapter(), manifest.base_model)
    if (now.version if now is not None else None) != manifest.parent_version:
        # it would end as a candidate, never active (a run a killed tray or CLI left
        # running, settled as paused later, missed the cancel an accepted round makes)
        return "another version became active while it was paused"
    if store.trained_of(manifest.fresh_ids):
        return "a later round trained its ratings while it was paused"
    return None


def cancel_paused_holding(store: Store, paths: Paths, rating_ids: Iterable[int]) -> list[str]:
    """Cancel the paused runs whose job holds any of these ratings (their turns were
    deleted): a checkpoint keeps the round's prompts as token ids, which decode back to
    the text, and such a run would be cancelled at resume anyway (``resumable_run``)."""
    gone = {int(i) for i in rating_ids}
    cancelled = []
    for run in paused_runs(store) if gone else []:
        try:
            held = set(jobbuild.read_manifest(paths.runs / run.id).rating_ids)
        except (OSError, ValueError, KeyError):
            continue
        if held & gone:
            cancel_run(store, paths, run.id, "a turn it trained on was deleted while it was paused")
            cancelled.append(run.id)
    return cancelled


def measured_peaks(store: Store, paths: Paths) -> dict[str, dict[str, Any]]:
    """Per base model, the newest finished round that measured its peak memory.

    ``{base_model: {"peak_bytes", "run"}}``: the trainer reports ``peak_memory_bytes``
    at its end; the setup wizard shows it beside its estimate, which it replaces.
    Read once per page: each run's manifest is a file.
    """
    found: dict[str, dict[str, Any]] = {}
    for run in store.list_runs(limit=100):  # newest first: the first one per model wins
        peak = run.metrics.get("peak_memory_bytes")
        if run.status not in ("done", "failed") or not isinstance(peak, int) or peak <= 0:
            continue
        try:
            manifest = jobbuild.read_manifest(paths.runs / run.id)
        except (OSError, ValueError, KeyError):
            continue
        found.setdefault(manifest.base_model, {"peak_bytes": peak, "run": run.id})
    return found


def cancel_run(
    store: Store, paths: Paths, run_id: str, why: str, metrics: dict[str, Any] | None = None
) -> None:
    """Finish a run as ``cancelled``; drop its checkpoint and its output (folder and log stay)."""
    shutil.rmtree(paths.runs / run_id / "checkpoint", ignore_errors=True)
    discard_output(paths, run_id)
    if metrics is None:
        run = store.get_run(run_id)
        metrics = run.metrics if run is not None else {}
    store.finish_run(run_id, "cancelled", error=why, metrics=metrics)


def discard_output(paths: Paths, run_id: str) -> None:
    """Remove what a failed or cancelled round wrote into ``adapters/``: its adapter folder
    when its ``rltray.json`` names this run, and half-written temp folders of it.

    Regression (review r8): a trainer that died after writing its adapter but before its
    ``done`` line left ``adapters/.run-<id>`` for ever (never applied, never removed).
    A paused run keeps its folder: the trainer reports a resumed round from it.
    """
    try:
        out = jobbuild.read_manifest(paths.runs / run_id).out
    except (OSError, ValueError, KeyError):
        return
    if written_meta(out).get("job_id") == run_id:
        shutil.rmtree(out, ignore_errors=True)
    with contextlib.suppress(OSError):
        for partial in out.parent.glob(f".{out.name}.tmp-*"):
            shutil.rmtree(partial, ignore_errors=True)


def sweep_outputs(store: Store, paths: Paths) -> None:
    """``discard_output`` for every failed or cancelled run that still has output lying in
    ``adapters/`` (one left before this was done at the end of a round)."""
    try:
        names = [p.name for p in paths.adapters.iterdir()]
    except OSError:
        return
    for run_id in {m.group(1) for m in map(_RUN_OUTPUT.match, names) if m}:
        run = store.get_run(run_id)
        if run is not None and run.status in ("failed", "cancelled"):
            discard_output(paths, run_id)


def written_meta(out: Path) -> dict[str, Any]:
    """An adapter folder's ``rltray.json`` (``{}`` when there is none or it is unreadable)."""
    try:
        meta = json.loads((out / "rltray.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def apply_result(
    store: Store,
    paths: Paths,
    built: jobbuild.BuiltJob,
    done: Mapping[str, Any],
    metrics: Mapping[str, Any],
    base_model: str = "",
) -> int | None:
    """Record a ``done`` line (or its rltray.json); the version made active, else None.

    ``base_model``: the model set up now (``training.base_model``); a round built on
    another one is kept as a candidate (see ``_placement``). A round whose ratings
    changed while it trained is cancelled instead (``changed_while_training``): this is
    the one place a result is recorded, for the live round and a leftover alike.
    """
    accepted = bool(done.get("accepted"))
    merged: dict[str, Any] = {
        **metrics,
        **dict(done.get("metrics") or {}),
        "accepted": accepted,
        "reasons": list(done.get("reasons") or []),
        "baseline": done.get("baseline"),
    }
    stale = changed_while_training(store, built)
    if stale:
        # Review 2 r2: trained with a verdict the user took back (a deleted turn's text
        # with it), it was published as active and its ratings marked trained.
        shutil.rmtree(built.out, ignore_errors=True)
        gate = {"gate_accepted": accepted, "accepted": None, "baseline": None}
        cancel_run(store, paths, built.run_id, stale,
                   {**merged, **gate, "stale_ratings": stale_ratings(store, built)})
        return None
    skipped = skipped_ratings(merged)
    if skipped:
        merged["notes"] = [*merged.get("notes", []), *outcome.skipped_notes(merged)]
    # the gate judged on these: they stay held out (a skipped one was not judged on)
    judged = [i for i in built.heldout_ids if i not in skipped]
    if not accepted:
        # A rejected round changes nothing the next round reads: no version, so the
        # active adapter's baseline stays; the trainer's number is not recorded.
        merged["baseline"] = None
        shutil.rmtree(built.out, ignore_errors=True)
        with store.batch():
            store.mark_heldout(judged)
            store.finish_run(built.run_id, "done", metrics=merged)
        return None
    version = next_version(store, paths.adapters)
    final = paths.adapters / folder_name(version)
    os.rename(built.out, final)
    try:
        files = file_digests(final)  # what a rollback to it later checks (review 3 r7)
        with store.batch():
            # Review 3 r11: read the active version under the write lock that activates this
            # one, so a rollback another process makes meanwhile is seen, not overwritten.
            switch = _placement(store, built, version, merged, base_model)
            # A candidate is not what serves: its ratings wait for a round of the active
            # line, or are marked when a rollback makes it active (``retires``, review r7).
            retired = retired_ratings(built, done, skipped)
            seen = retired if switch else []
            if not switch:
                merged["retires"] = {"run": built.run_id, "ratings": retired}
            merged["trained"] = len(seen)
            fit = [i for i in built.fresh_ids if i not in skipped]
            if switch and len(seen) < len(fit):
                merged["notes"] = [
                    *merged.get("notes", []),
                    f"the kept weights saw {len(seen)} of the {len(fit)} fresh ratings; "
                    "the others wait for the next round",
                ]
            store.mark_heldout(judged)
            store.add_adapter(
                built.base_model,
                final,
                parent_version=built.parent_version,
                metrics=merged,
                baseline=float(done.get("baseline") or 0.0),
                version=version,
                files=files,
            )
            if switch:
                store.set_adapter_status(version, "active")
                for run in paused_runs(store):
                    cancel_run(store, paths, run.id, f"v{version} was trained meanwhile")
            store.mark_trained(seen, built.run_id)
            store.finish_run(built.run_id, "done", metrics=merged, adapter_version=version)
    except BaseException:
        os.rename(final, built.out)
        raise
    return version if switch else None


def file_digests(folder: Path) -> dict[str, str]:
    """The sha256 of ``folder``'s weights and config (``SERVED_FILES``; one that cannot be
    read is left out: the structure check refuses it), recorded with the version when its
    result is applied."""
    found = {}
    for name in SERVED_FILES:
        with contextlib.suppress(OSError):
            found[name] = fileio.sha256_file(folder / name)
    return found


def folder_problems(adapter: Adapter) -> list[str]:
    """Why ``adapter``'s folder cannot be served as that version (empty: it can).

    Its files must be the ones recorded when its result was applied (``Adapter.files``;
    a version from before they were recorded has none to compare) and still be a LoRA
    adapter (the check a remote round's result gets, ``verify.structure_problems``).
    Regression (review 3 r7): a rollback checked only that the folder existed, so a
    version whose weights were deleted or replaced since was made active, published
    under its old number, or left the store and Ollama serving different things.
    """
    folder = Path(adapter.path)
    if not folder.is_dir():
        return [f"its folder {folder} is missing"]
    found = []
    for name, digest in sorted((adapter.files or {}).items()):
        try:
            if fileio.sha256_file(folder / name) != digest:
                found.append(f"{name} in its folder {folder} was replaced since it was trained")
        except OSError:
            found.append(f"{name} is missing from its folder {folder}")
    return found or [f"{p} in its folder {folder}" for p in verify.structure_problems(folder)]


def skipped_ratings(metrics: Mapping[str, Any]) -> set[int]:
    """The ratings whose examples the trainer skipped (training or held-out), from the
    ``skipped`` list the runner records in a run's metrics (``outcome.skipped``)."""
    return {int(s["rating"]) for s in outcome.skipped(metrics) if s.get("rating") is not None}


def _placement(
    store: Store, built: jobbuild.BuiltJob, version: int, merged: dict, base_model: str = ""
) -> bool:
    """Whether the accepted ``version`` becomes active; records what happened in ``merged``.

    It does when the version that would be its parent now (``jobbuild.line_parent``)
    is still the one it was trained from. After ``training.base_model`` changed,
    the parent was the new base (None) and the active version is of the old base,
    which is no parent: the new version starts a new line and becomes active
    (issue 20 item 11). Only a switch *within* the line while it trained (a
    rollback from another process) keeps it as a candidate, not switched in
    under the user. So does a round built on a base model other than ``base_model``, the
    one set up now (the setting changed while it trained; review r2): made active, it
    would be published onto a model it was never judged on. ``base_now`` says so.
    """
    active = store.active_adapter()
    now_parent = jobbuild.line_parent(active, built.base_model)
    moved = jobbuild.other_base(built, base_model) is not None
    switch = not moved and (now_parent.version if now_parent else None) == built.parent_version
    merged.update(
        base_model=built.base_model,
        parent_version=built.parent_version,
        active_before=None if active is None else {
            "version": active.version, "base_model": active.base_model
        },
        kept_as="active" if switch else "candidate",
        new_line=switch and active is not None and now_parent is None,
        base_now=base_model.strip() if moved else None,
    )  # fmt: skip
    if moved:
        merged["notes"] = [
            *merged.get("notes", []),
            f"kept v{version} as a candidate: it was trained on {built.base_model}, but "
            f"training.base_model was changed to {base_model.strip()} while it trained",
        ]
    elif not switch:
        merged["notes"] = [
            *merged.get("notes", []),
            f"kept v{version} as a candidate: it was trained from "
            f"{describe(built.parent_version)}, but {describe(active and active.version)} "
            "became active while it trained; its ratings wait for a round of the active version",
        ]
    elif merged["new_line"]:
        assert active is not None
        merged["notes"] = [
            *merged.get("notes", []),
            f"v{version} starts a new line of versions on {built.base_model} from the base "
            f"model; v{active.version} was trained on {active.base_model}",
        ]
    return switch


def retired_ratings(
    built: jobbuild.BuiltJob, done: Mapping[str, Any], skipped: Iterable[int] = ()
) -> list[int]:
    """The fresh ratings an accepted round used up: only these are marked trained.

    Issue 20 item 8: a drift-guard stop at step k keeps weights that saw only the
    first k x step_examples ratings. The trainer lists the others as
    ``unseen_ids`` (example ids like ``rating-12``, trainer/job.py ``TrainResult``);
    they stay untrained so a later round trains them. An older trainer lists
    nothing: every fresh rating was seen.

    An example the trainer skipped (``skipped``: it cannot fit the window) is in
    neither of its lists and was never trained on, so it is not marked trained either
    (review 2 r4: it was, and so retired for good without a word). It stays untrained
    and out of later rounds with the same window (``jobbuild.unfit_ratings``).
    """
    left = set(skipped)
    unseen = done.get("unseen_ids")
    if isinstance(unseen, list):
        left |= {i for i in map(jobbuild.rating_of, unseen) if i is not None}
    return [i for i in built.fresh_ids if i not in left]


def rollback(
    store: Store, paths: Paths, version: int | None = None, base_model: str | None = None
) -> Adapter | None:
    """Make ``version`` active: default the active one's parent, ``0`` the plain base model.

    The next round reads its EMA baseline from the active adapter, so switching
    restores the target's baseline (0 for the base model). Returns the adapter
    now active. ``base_model``: the model set to train and serve; a version trained
    on another one is refused, since publishing it would merge it onto a model it
    was never trained or judged on (same-shaped siblings load without a complaint).
    """
    active = store.active_adapter()
    if version is None:
        if active is None:
            raise NothingToDo(
                "Nothing to roll back: the base model is already active (no trained version "
                "is in use); `rltray versions` lists the versions to switch to."
            )
        version = active.parent_version
    elif version == 0:
        version = None
    target = None if version is None else store.get_adapter(version)
    if version is not None:
        if target is None or target.status == "rejected":
            raise UserError(f"There is no usable adapter version {version}.")
        if not Path(target.path).is_dir():
            raise UserError(f"Adapter v{version}'s folder {target.path} is missing.")
        if jobbuild.other_base(target, base_model or ""):
            raise UserError(
                f"v{version} was trained on {target.base_model}, but the model set up now is "
                f"{base_model.strip()}: it would be served on a model it was never judged on. "
                f"Set training.base_model back to {target.base_model} first, or pick a "
                "version of the model set up now."
            )
    if (active.version if active else None) == version:
        now = "the base model is already active" if version is None else (
            f"v{version} is already the active version"
        )
        raise NothingToDo(f"Nothing to do: {now}.")
    broken = folder_problems(target) if target is not None else []
    if broken:  # before the store switches and anything is published (review 3 r7)
        more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
        raise UserError(
            f"v{version} cannot be made active: {broken[0]}{more}, so it would not serve "
            "what was trained; pick another version (`rltray versions` lists them)."
        )
    with store.batch():
        if active is not None:
            store.set_adapter_status(active.version, "rolled-back")
        if target is not None:
            target = store.set_adapter_status(target.version, "active")
            _retire_candidate_ratings(store, target)
        for run in paused_runs(store):
            cancel_run(store, paths, run.id, f"rolled back to {describe(version)} while paused")
        store.log_event("rollback", f"rolled back to {describe(version)}", {"version": version})
    return target


def _retire_candidate_ratings(store: Store, adapter: Adapter) -> None:
    """Mark the ratings a version kept as a candidate trained on, now that it is active.

    Regression (review r7): they stayed fresh, so the next round trained them a second
    time on top of weights that had learned them (and folded them into the baseline again).
    Ratings a round has trained on since keep that round.
    """
    retires = adapter.metrics.get("retires")
    if not isinstance(retires, dict) or store.get_run(str(retires.get("run"))) is None:
        return
    ids = {int(i) for i in retires.get("ratings") or []}
    store.mark_trained(ids - store.trained_of(ids), str(retires["run"]))
