"""Round-start pieces of a training round: encoding, batched log-probs, held-out scores.

Split out of :mod:`.train` (which keeps the loop itself) so each stays small. All
functions work on the ``Backend`` door and :mod:`.data` batches only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rltray.trainer import data, evaluate, preference
from rltray.trainer.job import Example

Emit = Callable[[dict[str, Any]], None]


def pad_id(tokenizer: Any) -> int:
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int):
            return value
    return 0


def encode_all(
    tokenizer: Any, examples: Sequence[Example], hyper: Any, emit: Emit, which: str
) -> tuple[dict[int, Any], list[int]]:
    enc: dict[int, Any] = {}
    for i, ex in enumerate(examples):
        got = data.encode(tokenizer, ex, int(hyper.max_seq_len), index=i)
        if isinstance(got, data.Skip):
            emit({"type": "skipped", "id": ex.id, "set": which, "reason": got.reason})
        else:
            enc[i] = got
            for note in got.notes:
                emit({"type": "log", "message": f"{which} example {ex.id}: {note}"})
    return enc, sorted(enc)


def length(encoded: Any) -> int:
    return len(encoded.input_ids)


def micro_batches(indices: Sequence[int], enc: dict[int, Any], size: int) -> list[list[int]]:
    """Chunks of ``size`` after a stable sort by length: less padding, same maths."""
    ordered = sorted(indices, key=lambda i: length(enc[i]))
    return [ordered[s : s + size] for s in range(0, len(ordered), size)]


def logprob_rows(
    backend: Any,
    enc: dict[int, Any],
    indices: Sequence[int],
    size: int,
    pad_id: int,
    *,
    adapter: bool,
    should_stop: Callable[[], bool],
) -> dict[int, np.ndarray] | None:
    rows: dict[int, np.ndarray] = {}
    for mb in micro_batches(indices, enc, size):
        if should_stop():
            return None
        lp = backend.logprobs(data.collate([enc[i] for i in mb], pad_id), adapter=adapter)
        for r, i in enumerate(mb):
            rows[i] = lp[r, : length(enc[i]) - 1].astype(np.float32)
    return rows


def behaviour_row(encoded: Any, policy_row: np.ndarray) -> np.ndarray:
    """``o`` from the example's own behaviour log-probs when it has them, else the policy's.

    ``data.encode`` aligns them to the response tokens (cut when the response was
    truncated, dropped with a note when their count does not match); they go at the
    response positions of the (L-1) log-prob row.
    """
    lps = getattr(encoded, "behaviour_logprobs", None)
    mask = np.asarray(data.collate([encoded], 0).response_mask[0, 1:], dtype=np.float32)
    where = np.flatnonzero(mask > 0)
    if lps is None or len(lps) != len(where):
        return policy_row
    row = policy_row.copy()
    row[where] = np.asarray(lps, dtype=np.float32)
    return row


def heldout_metrics(
    held_enc: dict[int, Any],
    held_kept: list[int],
    heldout: Sequence[Example],
    pol: dict[int, np.ndarray],
    base: dict[int, np.ndarray],
    name: str,
) -> dict[str, Any]:
    scores, labels = [], []
    for i in held_kept:
        mask = np.asarray(data.collate([held_enc[i]], 0).response_mask[0, 1:], dtype=np.float32)
        reward = evaluate.implicit_reward(pol[i][None], base[i][None], mask[None])[0]
        scores.append(float(reward))
        labels.append(heldout[i].rating)
    good = sum(1 for y in labels if y > 0)
    out: dict[str, Any] = {"heldout_good": good, "heldout_bad": len(labels) - good}
    # Per answer, for the gate's paired test (preference.preference_test): the parent's and
    # the new adapter's rewards on the same answers. NaN (no response token) as None: JSON.
    out["heldout_labels"] = [1 if y > 0 else -1 for y in labels]
    out["heldout_scores_" + name.removeprefix("auroc_")] = [
        s if s == s else None for s in scores
    ]
    try:
        out[name] = preference.auroc(scores, labels)
    except ValueError:
        out[name] = None  # a class is missing: AUROC undefined, the gate notes it
    return out


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """Positions 0..n-1 in a seeded order that depends only on (seed, epoch)."""
    rng = np.random.default_rng([int(seed), int(epoch)])
    return [int(i) for i in rng.permutation(n)]


def trained_positions(n: int, per_step: int, seed: int, steps: int) -> list[int]:
    """Positions (into the kept examples) whose gradient the weights after ``steps``
    optimizer steps include, ascending: all of them once the first epoch is done,
    else the first ``steps x per_step`` of epoch 0's order — a drift guard stop
    inside the first epoch keeps weights that never saw the rest."""
    per_step = max(1, per_step)
    if steps * per_step >= n:
        return list(range(n))
    return sorted(epoch_order(n, seed, 0)[: steps * per_step])
