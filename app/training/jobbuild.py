"""Build a trainer job folder (``runs/<id>/``) from the store: which ratings, which parent.

Why a module of its own: choosing the round's data is the part of training that
decides what the model learns, and it is pure bookkeeping, so it is written as
small functions over plain rows (:func:`select`, :func:`split_heldout`,
:func:`example_line`) that tests call without a trainer, plus one
:func:`build_job` that reads the store and writes the files.

What a round holds (TRAINER-SPEC "Optimisation" and "Evaluation"):

* **fresh** ratings: active and never trained on, oldest first — all of them,
  so a backlog always drains;
* minus the **standing held-out set** (:func:`split_heldout`): ratings once held
  out stay held out (``ratings.heldout_at``, set when a job is built), and each
  round adds ~15% of its new ratings per class (newest good ones, newest bad
  ones), at least enough to reach the gate's minimum of each class
  (``evaluate.MIN_HELDOUT_PER_CLASS``) but never more than half of a class's new
  ones. The gate's evidence so grows round after round instead of spending half
  of one round's good ratings on 4 + 4; past :data:`HELDOUT_CAP_PER_CLASS` the
  oldest rotate into training. Until both classes reach the minimum, the gate
  decides on drift and sanity alone and says so (:attr:`BuiltJob.notes` says it
  up front). The standing set is not "new": it never starts a round;
* plus a **replay** share of already-trained ratings, newest first
  (``replay_share`` x the fresh training count), so a round does not forget
  what earlier rounds taught. Replayed lines carry ``"replay": true`` so the
  trainer does not count their rewards into the EMA baseline a second time.

A rating the trainer skipped in an earlier round with the same **window** (base
model and ``max_seq_len``; :func:`unfit_ratings`) is left out: its example cannot fit
and would be skipped again. It stays untrained, and another window offers it again.

A response the store marks ``truncated`` (cut off when captured) is passed on
as ``"truncated": true``: the trainer then never trains its end-of-turn token.

Only the fresh training ratings are marked trained, and only when the gate
accepts the adapter (the runner does that, from ``ratings.json``).

The files follow the trainer's contract (ARCHITECTURE "Trainer job", trainer/job.py):
``job.json``, ``examples.jsonl``, ``heldout.jsonl``, all 0600 in a 0700 folder.
``ratings.json`` is ours (the job refuses unknown keys): the rating ids of each
part and the parent version, so a resumed run — even after the tray restarted —
knows what to mark. Nothing here imports the trainer: the job file is the contract.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import secrets
import sys
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rltray.app import basemodel
from rltray.app.errors import ExitCode, NothingToDo, UserError
from rltray.app.fileio import write_private_atomic
from rltray.app.store.base import parse_iso
from rltray.app.training import backends

if TYPE_CHECKING:
    from rltray.app.paths import Paths
    from rltray.app.store import Adapter, Store

ROLES = ("system", "user", "assistant")  # the trainer's job.ROLES
JOB_FILE = "job.json"
EXAMPLES_FILE = "examples.jsonl"
HELDOUT_FILE = "heldout.jsonl"
MANIFEST_FILE = "ratings.json"
#: Fewest held-out ratings of each class the trainer's gate compares AUROC on
#: (the trainer's ``evaluate.MIN_HELDOUT_PER_CLASS``: fewer is noise, not evidence).
MIN_HELDOUT_PER_CLASS = 4
#: Per preset: the share of already-trained ratings replayed beside the fresh ones (x the
#: fresh training count, so a round does not forget what earlier rounds taught) and the
#: share of fresh ratings held out for the gate. Decided here, where the job is built
#: (the trainer only reads the files): careful replays half, to hold on to what was
#: learned while it moves in small steps; aggressive a tenth, learning from the newest.
#: "custom" is balanced plus the user's [training.hyper] values, which are the trainer's.
DATA_SHARES: dict[str, tuple[float, float]] = {
    "careful": (0.5, 0.15),
    "balanced": (0.25, 0.15),
    "aggressive": (0.1, 0.15),
    "custom": (0.25, 0.15),
}
DEFAULT_REPLAY_SHARE, DEFAULT_HELDOUT_FRACTION = DATA_SHARES["balanced"]
#: Most held-out ratings per class the standing set keeps before the oldest rotate
#: into training. 32 + 32 rejects a round-1 adapter at true held-out AUROC 0.35 in
#: over 90% of simulated rounds where 8 + 8 does in about half (``bench/gate_power.py``),
#: and scoring 64 turns stays a small part of a round's forward passes.
HELDOUT_CAP_PER_CLASS = 32
#: Why :func:`select` leaves out a rating an earlier round with this window skipped.
UNFIT = "an earlier round with this window could not fit it"


class TrainingSettingsLike(Protocol):
    """What job building reads from ``config.TrainingSettings``."""

    base_model: str
    backend: str
    preset: str
    trust_remote_code: bool
    python: str
    hyper: Mapping[str, Any]


class TrainingNotSetUp(UserError):
    """No interpreter that can train: one sentence naming what to set up."""

    exit_code = ExitCode.NOT_AVAILABLE


class NotEnoughRatings(NothingToDo):
    """Too few new ratings for a round; the message says how many there are."""


@dataclass(frozen=True)
class Selection:
    """Store rows (``Store.training_examples`` dicts) split into the round's parts."""

    train: list[dict[str, Any]]
    heldout: list[dict[str, Any]]
    replay: list[dict[str, Any]]
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (rating id, why)
    notes: list[str] = field(default_factory=list)
    #: Untrained ratings not in the standing held-out set: what a round starts on.
    new_count: int = 0


@dataclass(frozen=True)
class BuiltJob:
    """A written job folder and which ratings went where (``ratings.json``)."""

    run_id: str
    folder: Path
    out: Path
    fresh_ids: tuple[int, ...]
    heldout_ids: tuple[int, ...]
    replay_ids: tuple[int, ...]
    parent_version: int | None
    base_model: str
    notes: tuple[str, ...] = ()
    max_seq_len: int | None = None  # the job's own; None: the trainer's preset picks it

    @property
    def job_path(self) -> Path:
        return self.folder / JOB_FILE

    @property
    def window(self) -> dict[str, Any]:
        """What decides whether an example fits (:func:`window`)."""
        return window(self.base_model, self.max_seq_len)

    @property
    def rating_ids(self) -> tuple[int, ...]:
        """Every rating the job's files hold: trained, replayed and held out."""
        return (*self.fresh_ids, *self.replay_ids, *self.heldout_ids)

    def manifest(self) -> dict[str, Any]:
        """``ratings.json``: paths relative to the run folder, so the data folder can move."""
        d = asdict(self)
        del d["folder"]
        d["out"] = os.path.relpath(self.out, self.folder)
        return d


def window(base_model: str, max_seq_len: Any = None) -> dict[str, Any]:
    """The window a round's examples must fit: the base model (its tokenizer and chat
    template) and the job's ``max_seq_len`` (None: the trainer's preset picks it from the
    model's size, the same for every round of that model). An example the trainer
    skipped is skipped again in any round with the same window."""
    return {"base_model": base_model.strip(), "max_seq_len": max_seq_len}


def rating_of(example_id: Any) -> int | None:
    """The rating id of an example id ``rating-12`` (:func:`example_line`), else None."""
    text = str(example_id)
    if not text.startswith("rating-") or not text[7:].isdigit():
        return None
    return int(text[7:])


def unfit_ratings(store: Store, current: Mapping[str, Any]) -> set[int]:
    """Ratings the trainer skipped in a recent round with the window ``current``.

    Read from the runs' metrics (``skipped`` and ``window``, recorded by the runner):
    review 2 r4 found them marked trained for good; kept untrained, they would be
    offered to every round and skipped every time. A rating older than the newest 100
    runs is offered once more, and recorded again if it is skipped again.
    """
    unfit: set[int] = set()
    for run in store.list_runs(limit=100):
        entries = run.metrics.get("skipped")
        if run.metrics.get("window") != dict(current) or not isinstance(entries, list):
            continue
        unfit |= {int(e["rating"]) for e in entries
                  if isinstance(e, dict) and isinstance(e.get("rating"), int)}  # fmt: skip
    return unfit


def example_line(row: Mapping[str, Any], *, replay: bool = False) -> dict[str, Any] | None:
    """One ``examples.jsonl`` object for a store row, or None when the trainer would refuse it.

    Refused rows (empty response, unreadable time) would fail the whole job
    (trainer/job.py validates every line), so they are left out and reported.
    Context messages with another role or shape are dropped for the same reason.
    """
    response, prompt, rated_at = row.get("response"), row.get("prompt"), row.get("rated_at")
    if not isinstance(response, str) or not response.strip() or not isinstance(prompt, str):
        return None
    if not isinstance(rated_at, str) or not _is_iso(rated_at):
        return None
    messages = [
        {"role": m["role"], "content": m["content"]}
        for m in row.get("context") or []
        if isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)
    ]
    line: dict[str, Any] = {
        "id": f"rating-{int(row['rating_id'])}",
        "messages": messages,
        "prompt": prompt,
        "response": response,
        "rating": 1 if int(row["rating"]) > 0 else -1,
        "rated_at": rated_at,
    }
    if row.get("score") is not None:  # a graded rating: its reward, the class stays +-1
        from rltray.app.rating import reward

        line["reward"] = reward(line["rating"], int(row["score"]))
    if row.get("truncated"):
        line["truncated"] = True
    if replay:
        line["replay"] = True
    return line


def split_heldout(
    fresh: Sequence[Mapping[str, Any]],
    fraction: float = DEFAULT_HELDOUT_FRACTION,
    min_per_class: int = MIN_HELDOUT_PER_CLASS,
    cap_per_class: int = HELDOUT_CAP_PER_CLASS,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, held-out) from untrained rows oldest first; both lists stay oldest first.

    Rows with ``heldout_at`` set form the **standing held-out set**: held out in an
    earlier round, they stay held out, so the gate's evidence grows round after
    round. Per class, the new rows add ``round(fraction x new)`` of their newest.
    When that leaves a class below ``min_per_class`` (the fewest the gate tests
    on) and *both* classes can reach it with at most half of their new rows,
    they are topped up to it — half of a round's ratings are spent only when that
    makes the gate's test possible now. Past ``cap_per_class`` the oldest
    held-out rows of a class rotate into training: the set stays recent and a
    rating is not held back for ever.
    """
    rows = [dict(r) for r in fresh]
    parts = []
    for good in (True, False):
        cls = [i for i, r in enumerate(rows) if (int(r["rating"]) > 0) == good]
        standing = [i for i in cls if rows[i].get("heldout_at")]
        new = [i for i in cls if not rows[i].get("heldout_at")]
        parts.append((standing, new, min(round(fraction * len(new)), len(new) // 2)))
    top_up = all(len(s) + len(n) // 2 >= min_per_class for s, n, _ in parts)
    held: set[int] = set()
    for standing, new, add in parts:
        if top_up:
            add = max(add, min_per_class - len(standing))
        chosen = sorted(standing + new[len(new) - add :] if add > 0 else standing)
        held.update(chosen[max(0, len(chosen) - cap_per_class) :])
    train = [r for i, r in enumerate(rows) if i not in held]
    return train, [r for i, r in enumerate(rows) if i in held]


def select(
    rows: Sequence[Mapping[str, Any]],
    *,
    replay_share: float = DEFAULT_REPLAY_SHARE,
    heldout_fraction: float = DEFAULT_HELDOUT_FRACTION,
    unfit: Iterable[int] = (),
) -> Selection:
    """Split every active rating (oldest first) into training, held-out and replay parts.

    ``unfit``: ratings an earlier round with this window skipped (:func:`unfit_ratings`).
    """
    usable: list[dict[str, Any]] = []
    skipped: list[tuple[int, str]] = []
    unfit = set(unfit)
    left_unfit = 0
    for row in rows:
        if int(row["rating_id"]) in unfit:
            skipped.append((int(row["rating_id"]), UNFIT))
            left_unfit += 1
        elif example_line(row) is None:
            skipped.append((int(row["rating_id"]), "empty response or unreadable rating time"))
        else:
            usable.append(dict(row))
    fresh = [r for r in usable if r.get("trained_run_id") is None]
    train, heldout = split_heldout(fresh, heldout_fraction)
    older = [r for r in usable if r.get("trained_run_id") is not None]
    count = round(max(0.0, replay_share) * len(train))
    replay = list(reversed(older))[:count]  # newest first
    replay.sort(key=lambda r: (r["rated_at"], r["rating_id"]))
    notes = []
    good = sum(1 for r in heldout if int(r["rating"]) > 0)
    standing = sum(1 for r in heldout if r.get("heldout_at"))
    if min(good, len(heldout) - good) < MIN_HELDOUT_PER_CLASS:
        notes.append(
            f"held out {good} good and {len(heldout) - good} bad ratings, fewer than "
            f"{MIN_HELDOUT_PER_CLASS} of each, so the gate decides on drift and sanity alone "
            "this round"
        )
    elif standing:
        notes.append(
            f"held out {good} good and {len(heldout) - good} bad ratings, {standing} of them "
            "kept from earlier rounds"
        )
    if len(skipped) > left_unfit:
        notes.append(f"left out {len(skipped) - left_unfit} ratings with an empty response or time")
    if left_unfit:
        notes.append(
            f"left out {left_unfit} ratings an earlier round on this model could not fit into "
            "its max_seq_len (`rltray runs` says which); they stay untrained"
        )
    new_count = sum(1 for r in fresh if not r.get("heldout_at"))
    return Selection(train, heldout, replay, skipped, notes, new_count)


def resolve_backend(setting: str, plat: str | None = None, machine: str | None = None) -> str:
    """``auto`` is mlx on Apple Silicon and torch everywhere else (``backends.resolve``)."""
    return backends.resolve(setting, plat, machine).name


def training_python(
    training: TrainingSettingsLike,
    *,
    update: bool = True,
    retry: bool = False,
    said: Callable[[str], None] | None = None,
) -> str:
    """The trainer's interpreter: ``training.python``, or ours when it has the backend's library.

    Checked with ``importlib.util.find_spec`` so the tray never imports torch.
    Another interpreter is only checked to exist: a broken one fails the run
    with its log tail. A trainer environment rltray built first gets this rltray's
    trainer when it holds an older one (``_same_trainer``); ``update=False`` never runs
    pip for that (the runner asks under its lock, after ``update_trainer`` without it).
    """
    if training.python.strip():
        path = Path(training.python).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise TrainingNotSetUp(
                f"set up training first: the trainer interpreter {path} does not exist or "
                "cannot run; fix training.python or empty it to use rltray's own Python"
            )
        _same_trainer(path, update=update, retry=retry, said=said)
        return str(path)
    module = backends.resolve(training.backend).library
    if importlib.util.find_spec(module) is None:
        raise TrainingNotSetUp(
            f"set up training first: this Python has no {module}; run `rltray trainer-env create` "
            "(or the setup wizard's Backend step) to build a trainer environment, or set "
            "training.python to a Python that has it"
        )
    return sys.executable


def update_trainer(
    training: TrainingSettingsLike,
    *,
    retry: bool = False,
    said: Callable[[str], None] | None = None,
) -> None:
    """Bring the configured trainer environment up to this rltray's trainer (pip, up to
    minutes) for a caller that holds no lock: the runner calls it before ``start`` or
    ``resume`` takes its own, so the tray and `/api/status` never wait for pip (review 4,
    item 1). Raises nothing: what went wrong, ``training_python`` says again at once."""
    if not training.python.strip():
        return
    path = Path(training.python).expanduser()
    if path.is_file() and os.access(path, os.X_OK):
        with contextlib.suppress(TrainingNotSetUp):
            _same_trainer(path, update=True, retry=retry, said=said)


def _same_trainer(
    python: Path, *, update: bool, retry: bool, said: Callable[[str], None] | None
) -> None:
    """A trainer environment rltray built holds this rltray's trainer: one built before an
    upgrade is brought up to it first (its old trainer refused today's job files: review 3,
    finding 3), or the round fails naming `rltray trainer-env create`; or, when rltray
    cannot update it by itself and the old trainer may read today's jobs, the round goes on
    with it and ``said`` (the log by default) gets the warning (``stamp.ensure_current``)."""
    from rltray.app.training.trainerenv import stamp
    from rltray.app.training.trainerenv.plan import TrainerEnvError

    try:
        warning = stamp.ensure_current(python, install=update, retry=retry)
    except TrainerEnvError as exc:
        raise TrainingNotSetUp(str(exc)) from None
    if warning is not None:
        (said or logging.getLogger(__name__).warning)(warning)


def new_run_id() -> str:
    """Sortable and unique: ``20250101T120000Z-1a2b3c``."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)


def seed_for(run_id: str) -> int:
    """A stable seed per run: rounds differ, and a resumed run keeps its numbers."""
    return zlib.crc32(run_id.encode("utf-8"))


def line_parent(active: Adapter | None, base_model: str) -> Adapter | None:
    """The parent of a round on ``base_model``: the active version when it is of that base.

    A version of another base is never a parent (its tensors belong to other
    weights): after ``training.base_model`` changes, the round starts a new line
    of versions from the new base, with baseline 0 (issue 20 item 11). The runner
    asks this again when the round ends, to tell a new line from a rollback.
    """
    if active is None or not base_model.strip() or other_base(active, base_model):
        return None
    return active


class _OfABase(Protocol):
    """A version or a built round: something trained on one base model."""

    @property
    def base_model(self) -> str: ...


def other_base(adapter: _OfABase | None, base_model: str) -> str | None:
    """The base ``adapter`` was trained on when it is not ``base_model`` (the model set up
    now), else None; nothing is compared while no model is set up (``base_model`` empty).

    The one rule behind "a version is only ever served on the model it was trained and
    judged on": a round never takes it as parent (:func:`line_parent`), a rollback refuses
    it, a round that ends after the setting changed is kept as a candidate, and Ollama's
    ``latest`` serves the plain base instead of merging it onto another model (same-shaped
    siblings load without a complaint).
    """
    if adapter is None or not base_model.strip() or adapter.base_model == base_model.strip():
        return None
    return adapter.base_model


def not_enough(fresh: int, needed: int) -> str:
    """Why no round starts yet, in words that are right for 0 and 1 too ("0 new ratings
    wait for training; a round starts at 1" was the sentence once)."""
    ratings = "rating" if needed == 1 else "ratings"
    if fresh == 0:
        return (
            f"No new ratings yet; a round starts after {needed} new {ratings} (rate answers "
            "with the notification's buttons, `rltray good` / `rltray bad`, or "
            "`rltray rate ID good`)"
        )
    waits = "1 new rating waits" if fresh == 1 else f"{fresh} new ratings wait"
    return f"{waits} for training; a round starts at {needed}"


def build_job(
    store: Store,
    paths: Paths,
    training: TrainingSettingsLike,
    run_id: str,
    *,
    replay_share: float | None = None,
    heldout_fraction: float | None = None,
    min_fresh: int = 1,
    hyper: Mapping[str, Any] | None = None,
    device: str = "auto",
    seed: int | None = None,
) -> BuiltJob:
    """Write ``runs/<run_id>/`` for the next round and return what went in.

    Raises UserError when no base model is chosen or the active adapter's
    folder is gone, and :class:`NotEnoughRatings` below ``min_fresh`` new
    ratings (the standing held-out set does not count) or with none left to train on.
    The data shares are the preset's (``DATA_SHARES``) unless given.
    """
    base_model = training.base_model.strip()
    if not base_model:
        raise UserError(basemodel.NOT_CHOSEN)
    preset_replay, preset_heldout = DATA_SHARES.get(training.preset, DATA_SHARES["balanced"])
    replay_share = preset_replay if replay_share is None else replay_share
    heldout_fraction = preset_heldout if heldout_fraction is None else heldout_fraction
    # custom: balanced with the user's [training.hyper]; a caller's (tests') wins
    job_hyper = {**(dict(training.hyper) if training.preset == "custom" else {}),
                 **dict(hyper or {})}  # fmt: skip
    fits = window(base_model, job_hyper.get("max_seq_len"))
    sel = select(
        store.training_examples(),
        replay_share=replay_share,
        heldout_fraction=heldout_fraction,
        unfit=unfit_ratings(store, fits),
    )
    fresh_count = sel.new_count  # the standing held-out set is not new: it never starts a round
    if fresh_count < max(1, min_fresh) or not sel.train:
        unfit = sum(1 for _, why in sel.skipped if why == UNFIT)
        also = (f"; {unfit} more could not be fitted to this model's max_seq_len in an "
                "earlier round (`rltray runs` says which)") if unfit else ""  # fmt: skip
        raise NotEnoughRatings(not_enough(fresh_count, max(1, min_fresh)) + also)
    parent = line_parent(store.active_adapter(), base_model)
    if parent is not None and not Path(parent.path).is_dir():
        raise UserError(
            f"the active adapter v{parent.version} is missing its folder {parent.path}; "
            "roll back to another version first"
        )
    folder = paths.runs / run_id
    folder.mkdir(mode=0o700, parents=True, exist_ok=False)
    out = paths.adapters / f".run-{run_id}"  # renamed to adapters/vNNNN on accept
    job = {
        "v": 1,
        "id": run_id,
        "base_model": base_model,
        "backend": resolve_backend(training.backend),
        "device": device,
        "preset": training.preset,
        "hyper": job_hyper,
        "examples": EXAMPLES_FILE,
        "heldout": HELDOUT_FILE,
        "parent_adapter": parent.path if parent is not None else None,
        "out": os.path.relpath(out, folder),
        "seed": seed_for(run_id) if seed is None else int(seed),
        "baseline": float(parent.baseline or 0.0) if parent is not None else 0.0,
        "trust_remote_code": bool(training.trust_remote_code),
    }
    examples = sorted(sel.train + sel.replay, key=lambda r: (r["rated_at"], r["rating_id"]))
    replayed = {int(r["rating_id"]) for r in sel.replay}
    _write_jsonl(folder / EXAMPLES_FILE, examples, replayed)
    _write_jsonl(folder / HELDOUT_FILE, sel.heldout)
    write_private_atomic(folder / JOB_FILE, (json.dumps(job, indent=1) + "\n").encode())
    built = BuiltJob(
        run_id=run_id,
        folder=folder,
        out=out,
        fresh_ids=tuple(int(r["rating_id"]) for r in sel.train),
        heldout_ids=tuple(int(r["rating_id"]) for r in sel.heldout),
        replay_ids=tuple(int(r["rating_id"]) for r in sel.replay),
        parent_version=parent.version if parent is not None else None,
        base_model=base_model,
        notes=tuple(sel.notes),
        max_seq_len=fits["max_seq_len"],
    )
    write_private_atomic(
        folder / MANIFEST_FILE, (json.dumps(built.manifest(), indent=1) + "\n").encode()
    )
    # Held-out ratings join the standing set when the round's result is recorded
    # (versions.apply_result): a round that fails judged nothing with them.
    return built


def read_manifest(folder: Path) -> BuiltJob:
    """The :class:`BuiltJob` a run folder was written with (for resume and reconcile)."""
    folder = Path(folder)
    raw = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    return BuiltJob(
        run_id=raw["run_id"],
        folder=folder,
        out=Path(os.path.normpath(folder / raw["out"])),
        fresh_ids=tuple(raw["fresh_ids"]),
        heldout_ids=tuple(raw["heldout_ids"]),
        replay_ids=tuple(raw["replay_ids"]),
        parent_version=raw["parent_version"],
        base_model=raw["base_model"],
        notes=tuple(raw.get("notes", ())),
        max_seq_len=raw.get("max_seq_len"),
    )


def _write_jsonl(
    path: Path, rows: Sequence[Mapping[str, Any]], replayed: set[int] | frozenset[int] = frozenset()
) -> None:
    lines = [example_line(r, replay=int(r["rating_id"]) in replayed) for r in rows]
    text = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines if x is not None)
    write_private_atomic(path, text.encode("utf-8"))


def forget_ratings(runs: Path, rating_ids: Iterable[int]) -> int:
    """Drop these ratings' lines from every run folder's job files; how many files changed.

    A deleted turn must leave every place rltray kept its text (app/store/turns.py),
    and each round's ``examples.jsonl`` and ``heldout.jsonl`` hold a copy of the turns
    it trained and judged on. A file that cannot be rewritten is removed: a copy must
    not keep what the user deleted (a finished run no longer reads it; a paused one
    is cancelled at resume, since its ratings changed).
    """
    gone = {f"rating-{int(i)}" for i in rating_ids}
    if not gone:
        return 0
    changed = 0
    for path in sorted(Path(runs).glob(f"*/{EXAMPLES_FILE}")) + sorted(
        Path(runs).glob(f"*/{HELDOUT_FILE}")
    ):
        try:
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [line for line in lines if _line_id(line) not in gone]
            if len(kept) != len(lines):
                write_private_atomic(path, "".join(kept).encode("utf-8"))
                changed += 1
        except (OSError, UnicodeDecodeError):
            path.unlink(missing_ok=True)
            changed += 1
    return changed


def _line_id(line: str) -> str | None:
    """The ``id`` of one job-file line (None for a line that is not a JSON object)."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj.get("id") if isinstance(obj, dict) else None


def _is_iso(text: str) -> bool:
    try:
        parse_iso(text)
    except ValueError:
        return False
    return True
