"""The trainer's inputs: the job file (TrainJob JSON v1) and the example files (JSONL).

Why strict: the trainer runs unattended as a subprocess of the tray, and a typo
in a job (``"lerning_rate"``) that is silently ignored trains the wrong model for
an hour. So every key is known, every value is type-checked, and anything wrong
raises :class:`JobError` with ONE sentence naming the file, the line (for
example files) and the key — the tray shows that sentence to the user as is.

Relative paths in a job resolve against the job file's folder, so a job folder
can be moved or built in a temp dir. Checkpoints for pause/resume live in
``<job folder>/checkpoint/``.

This module imports nothing heavy (no numpy, torch or mlx): a bad job must be
reported before seconds of tensor-library import time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rltray.trainer.backends.catalogue import CATALOGUE
from rltray.trainer.errors import JobError  # its home; importers of job.JobError keep working

BACKENDS = tuple(CATALOGUE)  # the backends a job may name
DEVICES = ("auto", "cpu", "cuda", "mps")
PRESETS = ("careful", "balanced", "aggressive", "custom")
ROLES = ("system", "user", "assistant")

#: Job keys: name -> (required, default). Declared once; the loader and the docs use it.
JOB_KEYS: dict[str, tuple[bool, Any]] = {
    "v": (True, None),
    "id": (True, None),
    "base_model": (True, None),
    "revision": (False, None),
    "backend": (True, None),
    "device": (False, "auto"),
    "preset": (False, "balanced"),
    "hyper": (False, None),
    "examples": (True, None),
    "heldout": (False, None),
    "parent_adapter": (False, None),
    "out": (True, None),
    "seed": (False, 0),
    "baseline": (False, 0.0),
    "trust_remote_code": (False, False),
}

EXAMPLE_KEYS = (
    "id", "messages", "prompt", "response", "rating", "rated_at", "behaviour_logprobs",
    "truncated", "replay", "reward",
)
EXAMPLE_REQUIRED = ("id", "prompt", "response", "rating", "rated_at")


@dataclass(frozen=True)
class Example:
    """One rated turn: context (oldest first), prompt, rated response, rating.

    ``messages`` is the chat context *before* the prompt, as ``{"role", "content"}``
    dicts. ``behaviour_logprobs`` are per-response-token log-probs from the local
    model that really wrote the response (rare; ``None`` for cloud-written text).
    ``truncated``: the response was cut off where it was captured (the agent hit
    its token limit, the capture was clipped), so it has no real end: its
    end-of-turn token is never trained (the model must not learn to stop there).
    ``replay``: an older, already-trained rating replayed in this round; it is
    trained on but not counted again in the reward baseline.
    ``reward``: a graded rating's reward in [-1, 1] (the app sends ``(score - 3) / 2``
    for a 1-5 score), of the same sign as ``rating``, which stays the class the
    good/bad push balance counts; ``None`` means the rating itself (+1 / -1).
    ``line`` is the 1-based line in the source file, for messages about it.
    """

    id: str
    prompt: str
    response: str
    rating: int
    rated_at: str
    messages: tuple[dict[str, str], ...] = ()
    behaviour_logprobs: tuple[float, ...] | None = None
    truncated: bool = False
    replay: bool = False
    line: int = 0
    reward: float | None = None

    @property
    def value(self) -> float:
        """What the objective and the reward baseline use: the reward, else the rating."""
        return float(self.rating) if self.reward is None else self.reward

    def to_dict(self) -> dict[str, Any]:
        """The JSONL form (what :func:`load_examples` reads back)."""
        return {
            "id": self.id,
            "messages": [dict(m) for m in self.messages],
            "prompt": self.prompt,
            "response": self.response,
            "rating": self.rating,
            "rated_at": self.rated_at,
            "behaviour_logprobs": (
                list(self.behaviour_logprobs) if self.behaviour_logprobs is not None else None
            ),
            "truncated": self.truncated,
            "replay": self.replay,
            **({"reward": self.reward} if self.reward is not None else {}),
        }


@dataclass(frozen=True)
class TrainJob:
    """A validated job; every path is absolute. See the brief's TrainJob JSON (v1)."""

    id: str
    base_model: str
    backend: str
    examples: Path
    out: Path
    folder: Path
    revision: str | None = None
    device: str = "auto"
    preset: str = "balanced"
    hyper: Mapping[str, Any] = field(default_factory=dict)
    heldout: Path | None = None
    parent_adapter: Path | None = None
    seed: int = 0
    baseline: float = 0.0
    trust_remote_code: bool = False
    v: int = 1

    @property
    def checkpoint_dir(self) -> Path:
        """Where pause/resume checkpoints go: ``<job folder>/checkpoint``."""
        return self.folder / "checkpoint"


# ---- job file -----------------------------------------------------------------------


def load_job(path: str | Path) -> TrainJob:
    """Read and validate a job file; raises :class:`JobError` (one sentence) on any problem."""
    path = Path(path).expanduser().resolve()
    raw = _read_json_object(path)
    return job_from_dict(raw, folder=path.parent, source=str(path))


def job_from_dict(raw: Mapping[str, Any], *, folder: Path, source: str = "the job") -> TrainJob:
    """Validate a job dict; relative paths resolve against ``folder``."""
    unknown = sorted(set(raw) - set(JOB_KEYS))
    if unknown:
        raise JobError(f"{source} has an unknown key {unknown[0]!r}; allowed keys are "
                       f"{', '.join(JOB_KEYS)}")
    missing = [k for k, (req, _) in JOB_KEYS.items() if req and k not in raw]
    if missing:
        raise JobError(f"{source} is missing the required key {missing[0]!r}")
    val = {k: raw.get(k, default) for k, (_, default) in JOB_KEYS.items()}

    if val["v"] != 1 or isinstance(val["v"], bool):
        raise JobError(f"{source} has version v={val['v']!r}; this trainer reads v=1 jobs")
    for key in ("id", "base_model"):
        _want_str(source, key, val[key], empty_ok=False)
    for key in ("revision",):
        if val[key] is not None:
            _want_str(source, key, val[key], empty_ok=False)
    _want_choice(source, "backend", val["backend"], BACKENDS)
    _want_choice(source, "device", val["device"], DEVICES)
    _want_choice(source, "preset", val["preset"], PRESETS)
    hyper = {} if val["hyper"] is None else val["hyper"]
    if not isinstance(hyper, dict):
        raise JobError(f"{source}: 'hyper' must be an object of hyperparameter overrides")
    _check_hyper_names(source, hyper)
    seed = val["seed"]
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise JobError(f"{source}: 'seed' must be a whole number from 0 to 2**63-1, "
                       f"not {seed!r}")
    baseline = val["baseline"]
    if (not isinstance(baseline, (int, float)) or isinstance(baseline, bool)
            or not math.isfinite(baseline) or not -1.0 <= baseline <= 1.0):
        raise JobError(f"{source}: 'baseline' must be a number from -1 to 1 (an EMA of "
                       f"+1/-1 rewards), not {baseline!r}")
    if not isinstance(val["trust_remote_code"], bool):
        raise JobError(f"{source}: 'trust_remote_code' must be true or false")

    examples = _existing_file(source, "examples", val["examples"], folder)
    heldout = (None if val["heldout"] is None
               else _existing_file(source, "heldout", val["heldout"], folder))
    parent = None
    if val["parent_adapter"] is not None:
        parent = _path(source, "parent_adapter", val["parent_adapter"], folder)
        if not parent.is_dir():
            raise JobError(f"{source}: the parent adapter folder {parent} does not exist")
    out = _path(source, "out", val["out"], folder)
    if out.exists() and not out.is_dir():
        raise JobError(f"{source}: 'out' {out} exists and is not a folder")

    return TrainJob(
        v=1,
        id=val["id"],
        base_model=_model_ref(val["base_model"], folder),
        revision=val["revision"],
        backend=val["backend"],
        device=val["device"],
        preset=val["preset"],
        hyper=dict(hyper),
        examples=examples,
        heldout=heldout,
        parent_adapter=parent,
        out=out,
        folder=folder.resolve(),
        seed=seed,
        baseline=float(baseline),
        trust_remote_code=val["trust_remote_code"],
    )


def _model_ref(ref: str, folder: Path) -> str:
    """A base model folder (made absolute) or a Hugging Face id (kept as written).

    A value is a path when it is absolute, starts with ``.`` or ``~``, or names an
    existing folder next to the job; anything else (``org/name``) is a hub id.
    """
    p = Path(ref).expanduser()
    if p.is_absolute():
        return str(p)
    if ref.startswith((".", "~")) or (folder / p).is_dir():
        return str((folder / p).resolve())
    return ref


def _check_hyper_names(source: str, hyper: Mapping[str, Any]) -> None:
    from rltray.trainer.presets import HYPER_FIELDS

    unknown = sorted(set(hyper) - set(HYPER_FIELDS))
    if unknown:
        raise JobError(f"{source}: 'hyper' has an unknown hyperparameter {unknown[0]!r}; "
                       f"known ones are {', '.join(HYPER_FIELDS)}")


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise JobError(f"the job file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise JobError(f"the job file {path} cannot be read: {exc}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JobError(f"the job file {path} is not valid JSON (line {exc.lineno}: "
                       f"{exc.msg})") from None
    if not isinstance(raw, dict):
        raise JobError(f"the job file {path} must hold a JSON object")
    return raw


def _want_str(source: str, key: str, value: Any, *, empty_ok: bool) -> None:
    if not isinstance(value, str) or (not empty_ok and not value.strip()):
        raise JobError(f"{source}: {key!r} must be a non-empty string, not {value!r}")


def _want_choice(source: str, key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise JobError(f"{source}: {key!r} must be one of {', '.join(choices)}, not {value!r}")


def _path(source: str, key: str, value: Any, folder: Path) -> Path:
    _want_str(source, key, value, empty_ok=False)
    p = Path(value).expanduser()
    return (p if p.is_absolute() else folder / p).resolve()


def _existing_file(source: str, key: str, value: Any, folder: Path) -> Path:
    p = _path(source, key, value, folder)
    if not p.is_file():
        raise JobError(f"{source}: the {key} file {p} does not exist")
    return p


# ---- example files ------------------------------------------------------------------


def load_examples(path: str | Path) -> list[Example]:
    """Read a JSONL example file (blank lines allowed); raises :class:`JobError` naming
    the file and line for the first problem, or when the file holds no examples."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise JobError(f"the example file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise JobError(f"the example file {path} cannot be read: {exc}") from None
    examples: list[Example] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise JobError(f"{where} is not valid JSON ({exc.msg})") from None
        ex = example_from_dict(obj, where=where, line=number)
        if ex.id in seen:
            raise JobError(f"{where} repeats the example id {ex.id!r} from line {seen[ex.id]}")
        seen[ex.id] = number
        examples.append(ex)
    if not examples:
        raise JobError(f"the example file {path} holds no examples")
    return examples


def example_from_dict(obj: Any, *, where: str = "the example", line: int = 0) -> Example:
    """Validate one example object (see the brief's Example line)."""
    if not isinstance(obj, dict):
        raise JobError(f"{where} must be a JSON object")
    unknown = sorted(set(obj) - set(EXAMPLE_KEYS))
    if unknown:
        raise JobError(f"{where} has an unknown key {unknown[0]!r}")
    missing = [k for k in EXAMPLE_REQUIRED if k not in obj]
    if missing:
        raise JobError(f"{where} is missing the required key {missing[0]!r}")
    ex_id = obj["id"]
    if not isinstance(ex_id, str) or not ex_id:
        raise JobError(f"{where}: 'id' must be a non-empty string")
    for key in ("prompt", "response"):
        if not isinstance(obj[key], str):
            raise JobError(f"{where}: {key!r} must be a string")
    if not obj["response"]:
        raise JobError(f"{where}: 'response' is empty, so there is nothing to learn from")
    rating = obj["rating"]
    if isinstance(rating, bool) or rating not in (1, -1):
        raise JobError(f"{where}: 'rating' must be 1 or -1, not {rating!r}")
    rated_at = obj["rated_at"]
    if not isinstance(rated_at, str) or not _is_iso(rated_at):
        raise JobError(f"{where}: 'rated_at' must be an ISO-8601 time, not {rated_at!r}")
    messages = _messages(obj.get("messages"), where)
    lps = obj.get("behaviour_logprobs")
    if lps is not None:
        if not isinstance(lps, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and v <= 0.0 for v in lps
        ):
            raise JobError(f"{where}: 'behaviour_logprobs' must be a list of finite log-probs "
                           f"(numbers <= 0) or null")
        lps = tuple(float(v) for v in lps)
    flags = {}
    for key in ("truncated", "replay"):
        value = obj.get(key, False)
        if not isinstance(value, bool):
            raise JobError(f"{where}: {key!r} must be true or false, not {value!r}")
        flags[key] = value
    reward = obj.get("reward")
    if reward is not None:
        if (isinstance(reward, bool) or not isinstance(reward, (int, float))
                or not math.isfinite(reward) or not 0 < abs(reward) <= 1
                or (reward > 0) != (rating > 0)):
            raise JobError(f"{where}: 'reward' must be a number in [-1, 1] with the sign of "
                           f"'rating' ({rating}), not {reward!r}")
        reward = float(reward)
    return Example(id=ex_id, prompt=obj["prompt"], response=obj["response"], rating=int(rating),
                   rated_at=rated_at, messages=messages, behaviour_logprobs=lps, line=line,
                   reward=reward, **flags)


def _messages(value: Any, where: str) -> tuple[dict[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise JobError(f"{where}: 'messages' must be a list of {{role, content}} objects")
    out = []
    for i, msg in enumerate(value):
        if (not isinstance(msg, dict) or set(msg) != {"role", "content"}
                or msg["role"] not in ROLES or not isinstance(msg["content"], str)):
            raise JobError(f"{where}: messages[{i}] must be {{\"role\": one of "
                           f"{'/'.join(ROLES)}, \"content\": string}} and nothing else")
        out.append({"role": msg["role"], "content": msg["content"]})
    return tuple(out)


def _is_iso(text: str) -> bool:
    try:
        datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        return False
    return True


# ---- output lines -------------------------------------------------------------------


@dataclass(frozen=True)
class TrainResult:
    """What a finished round reports: the ``{"type": "done", ...}`` progress line.

    Which ratings the round used up (added with issue 20; the adapter's
    ``rltray.json`` carries the same two lists):

    ``trained_ids``
        The ids of the training examples (fresh and replayed, in file order) whose
        gradient the kept weights include. All examples that fit the window,
        unless the drift guard stopped the round inside its first epoch: a stop
        that keeps step k has seen only the first k x ``step_examples`` examples of
        the first epoch's order.
    ``unseen_ids``
        The ids of training examples that fit the window but whose gradient the
        kept weights do *not* include (that guard stop). The tray must leave these
        ratings untrained, so a later round trains them.

    An example the trainer skipped (a ``skipped`` line: no response token fits
    ``max_seq_len``) is in neither list: the tray leaves it untrained and out of later
    rounds with the same window (app/training/jobbuild.py ``unfit_ratings``). So an
    accepted round retires its fresh ratings **minus ``unseen_ids`` and the skipped
    ones**, and ``baseline`` has folded in exactly those ratings (rated_at order). A
    ``done`` line without these keys comes from an older trainer, which
    trained every example: read it as ``unseen_ids == []``.
    """

    adapter: str
    accepted: bool
    reasons: list[str]
    metrics: dict[str, Any]
    baseline: float
    trained_ids: list[str] = field(default_factory=list)
    unseen_ids: list[str] = field(default_factory=list)

    def line(self) -> dict[str, Any]:
        return {"type": "done", "adapter": self.adapter, "accepted": self.accepted,
                "reasons": list(self.reasons), "metrics": dict(self.metrics),
                "baseline": self.baseline, "trained_ids": list(self.trained_ids),
                "unseen_ids": list(self.unseen_ids)}


def error_line(message: str, kind: str) -> dict[str, Any]:
    """The ``{"type": "error"}`` line; ``kind`` e.g. ``"job"`` (exit 2) or ``"internal"``."""
    return {"type": "error", "message": message, "kind": kind}


def metric_line(name: str, value: Any) -> dict[str, Any]:
    return {"type": "metric", "name": name, "value": value}


def paused_line(checkpoint: str | Path) -> dict[str, Any]:
    return {"type": "paused", "checkpoint": str(checkpoint)}
