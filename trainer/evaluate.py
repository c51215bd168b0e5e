"""Evaluation of a trained adapter and the publish gate.

An adapter is published only if it is better and still safe (TRAINER-SPEC
"Evaluation and the publish gate"):

* **Held-out AUROC** of the implicit reward ``mean_t(n_t − f_t)`` against the
  ratings, for the new adapter and its parent; the new one may not be worse by
  more than ``hyper.auroc_tolerance``.
* **Drift**: exact mean per-token KL(policy ‖ base) over the whole vocabulary on
  the bundled neutral texts; must not exceed ``hyper.kl_cap``.
* **Sanity**: finite tensors, shapes that match the base, a scale present.

Importing this module pulls in neither torch, MLX nor numpy: :func:`auroc`,
:func:`gate` and :class:`Verdict` are pure python so the tray can re-check or
display a verdict; the tensor helpers import their library inside the function.

The gate reads a plain ``metrics`` dict; the keys it understands:

``auroc_new``, ``auroc_parent``
    float or None. For a first round the parent is the base model, whose
    implicit reward is identically 0, so its AUROC is exactly 0.5 — pass 0.5.
``heldout_good``, ``heldout_bad``
    how many held-out examples of each class were scored.
``kl_to_base``
    float, required: an adapter whose drift was not measured is not published.
``sanity_errors``
    list of sentences from the adapter checks (:func:`tensor_sanity_errors`,
    ``adapters.validate``); each one rejects.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Protocol

#: Fewest held-out examples of *each* class for an AUROC worth gating on. With
#: one good and one bad example AUROC can only be 0, 0.5 or 1 — a coin flip, not
#: evidence — so below this the comparison is skipped (and said so in the
#: verdict's notes) rather than used to reject: a new user with a handful of
#: ratings would otherwise never get an adapter.
MIN_HELDOUT_PER_CLASS = 2

NEUTRAL_RESOURCE = "neutral.txt"


class GateHyper(Protocol):
    """What the gate reads from ``presets.Hyper`` (duck-typed)."""

    auroc_tolerance: float
    kl_cap: float


# --------------------------------------------------------------------------------------
# AUROC and implicit reward
# --------------------------------------------------------------------------------------


def _missing(x: Any) -> bool:
    if x is None:
        return True
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return True


def auroc(scores: Iterable[float | None], labels: Iterable[float | bool | None]) -> float:
    """Area under the ROC curve of ``scores`` for ``labels`` (Mann–Whitney U).

    A label counts as positive when it is > 0 (``+1``, ``1``, ``True``) and as
    negative otherwise (``-1``, ``0``, ``False``). Pairs whose score or label is
    None or NaN are dropped (an example with no tokens left has no implicit
    reward). Tied scores across the classes count 0.5, so a constant scorer gets
    exactly 0.5. Raises ValueError naming the counts when a class is missing,
    because AUROC is undefined then and a silent 0.5 would hide it.
    """
    scores = list(scores)
    labels = list(labels)
    if len(scores) != len(labels):
        raise ValueError(f"auroc needs one label per score, got {len(scores)} and {len(labels)}")
    pairs = [
        (float(s), float(y) > 0)
        for s, y in zip(scores, labels, strict=True)
        if not _missing(s) and not _missing(y)
    ]
    n_pos = sum(1 for _, y in pairs if y)
    n_neg = len(pairs) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError(
            f"AUROC needs both classes, got {n_pos} positive and {n_neg} negative scored examples"
        )
    # Mid-ranks (1-based) over tied groups; U = R_pos − P(P+1)/2.
    pairs.sort(key=lambda p: p[0])
    rank_sum_pos = 0.0
    i = 0
    while i < len(pairs):
        j = i
        while j + 1 < len(pairs) and pairs[j + 1][0] == pairs[i][0]:
            j += 1
        mid_rank = (i + j) / 2.0 + 1.0
        rank_sum_pos += mid_rank * sum(1 for k in range(i, j + 1) if pairs[k][1])
        i = j + 1
    u = rank_sum_pos - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


def implicit_reward(n: Any, f: Any, mask: Any) -> Any:
    """Per-example implicit reward ``mean_t(n_t − f_t)`` over response tokens.

    ``n`` (policy) and ``f`` (base) are (B, T) token log-probs, ``mask`` (B, T)
    marks response tokens. How far the policy raised its own answer above the
    base, per token: a model that learned the ratings raises good answers and
    lowers bad ones. An example with no response tokens gets NaN, which
    :func:`auroc` drops. Returns a float64 numpy array (B,).
    """
    import numpy as np

    n, f, mask = (np.asarray(x, dtype=np.float64) for x in (n, f, mask))
    if not (n.shape == f.shape == mask.shape) or n.ndim != 2:
        raise ValueError(
            f"implicit_reward needs (B, T) arrays of one shape, got {n.shape}, {f.shape}, "
            f"{mask.shape}"
        )
    valid = mask > 0
    tokens = mask.sum(axis=1)
    total = (mask * np.where(valid, n - f, 0.0)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tokens > 0, total / np.where(tokens > 0, tokens, 1.0), np.nan)


# --------------------------------------------------------------------------------------
# Exact KL(policy ‖ base) over the vocabulary
# --------------------------------------------------------------------------------------
#
# All three take logits (B, L, V) and a mask (B, L): mask[b, j] = 1 selects the
# next-token distribution at position j. For a text of L tokens the caller passes
# logits[:, :-1] with attention_mask[:, 1:] (every predicted real token). The
# ``*_sum`` forms return (Σ KL, token count) so a caller can add batches up and
# take one token-weighted mean; the ``kl_per_token_*`` forms return that mean.
# Work is done one sequence at a time in float32 to bound memory at L × V.


def kl_sum_torch(logits_policy: Any, logits_base: Any, mask: Any) -> tuple[float, float]:
    """Σ over masked positions of Σ_v p log(p/q), and the number of positions (torch)."""
    import torch

    _check_logits(tuple(logits_policy.shape), tuple(logits_base.shape), tuple(mask.shape))
    mask = torch.as_tensor(mask, device=logits_policy.device).float()
    total = torch.zeros((), dtype=torch.float64, device=logits_policy.device)
    with torch.no_grad():
        for b in range(logits_policy.shape[0]):
            lp = torch.log_softmax(logits_policy[b].float(), dim=-1)
            lq = torch.log_softmax(logits_base[b].float(), dim=-1)
            p = lp.exp()
            # p = 0 (logit −inf) contributes 0, not 0·(−inf) = NaN.
            per_pos = torch.where(p > 0, p * (lp - lq), torch.zeros_like(p)).sum(-1)
            per_pos = per_pos.clamp(min=0.0)  # KL ≥ 0; drop float rounding below 0
            total = total + (per_pos * mask[b]).sum().double()
        count = float(mask.sum())
    return float(total), count


def kl_per_token_torch(logits_policy: Any, logits_base: Any, mask: Any) -> float:
    """Masked mean per-token KL(policy ‖ base) from logits (torch); 0.0 with no tokens."""
    total, count = kl_sum_torch(logits_policy, logits_base, mask)
    return total / count if count else 0.0


def kl_sum_mlx(logits_policy: Any, logits_base: Any, mask: Any) -> tuple[float, float]:
    """Σ over masked positions of Σ_v p log(p/q), and the number of positions (MLX)."""
    import mlx.core as mx

    _check_logits(tuple(logits_policy.shape), tuple(logits_base.shape), tuple(mask.shape))
    mask = mx.stop_gradient(mx.array(mask).astype(mx.float32))
    total = 0.0
    for b in range(logits_policy.shape[0]):
        zp = mx.stop_gradient(logits_policy[b]).astype(mx.float32)
        zq = mx.stop_gradient(logits_base[b]).astype(mx.float32)
        lp = zp - mx.logsumexp(zp, axis=-1, keepdims=True)
        lq = zq - mx.logsumexp(zq, axis=-1, keepdims=True)
        p = mx.exp(lp)
        per_pos = mx.where(p > 0, p * (lp - lq), mx.zeros_like(p)).sum(axis=-1)
        per_pos = mx.maximum(per_pos, 0.0)
        total += float((per_pos * mask[b]).sum().item())
    return total, float(mask.sum().item())


def kl_per_token_mlx(logits_policy: Any, logits_base: Any, mask: Any) -> float:
    """Masked mean per-token KL(policy ‖ base) from logits (MLX); 0.0 with no tokens."""
    total, count = kl_sum_mlx(logits_policy, logits_base, mask)
    return total / count if count else 0.0


def kl_per_token_numpy(logits_policy: Any, logits_base: Any, mask: Any) -> float:
    """Float64 numpy reference for the exact per-token KL (tests compare against it)."""
    import numpy as np

    zp, zq, mask = (np.asarray(x, dtype=np.float64) for x in (logits_policy, logits_base, mask))
    _check_logits(zp.shape, zq.shape, mask.shape)

    def log_softmax(z: Any) -> Any:
        m = z.max(axis=-1, keepdims=True)
        return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))

    lp, lq = log_softmax(zp), log_softmax(zq)
    p = np.exp(lp)
    with np.errstate(invalid="ignore"):
        per_pos = np.where(p > 0, p * (lp - lq), 0.0).sum(axis=-1)
    count = mask.sum()
    return float((np.maximum(per_pos, 0.0) * mask).sum() / count) if count else 0.0


def _check_logits(p: tuple[int, ...], q: tuple[int, ...], mask: tuple[int, ...]) -> None:
    if len(p) != 3 or p != q or mask != p[:2]:
        raise ValueError(
            f"KL needs policy and base logits of one (B, L, V) shape and a (B, L) mask, "
            f"got {p}, {q} and {mask}"
        )


# --------------------------------------------------------------------------------------
# Sanity of the trained tensors
# --------------------------------------------------------------------------------------


def tensor_sanity_errors(
    state: Mapping[str, Any],
    expected_shapes: Mapping[str, Sequence[int]] | None = None,
    scale: float | None = None,
) -> list[str]:
    """Every problem with an adapter's tensors at once, as sentences (empty = fine).

    ``state`` maps tensor names to numpy arrays (``Backend.lora_state()``);
    ``expected_shapes`` maps names to the shapes the base model's modules imply;
    ``scale`` is ``alpha / rank`` as it will be written. Listing everything at
    once (like mlx-lm's adapter loader) spares a fix-one-rerun loop.
    """
    import numpy as np

    errors: list[str] = []
    if not state:
        errors.append("the adapter has no tensors")
    for name, value in state.items():
        arr = np.asarray(value)
        if not np.issubdtype(arr.dtype, np.number):
            errors.append(f"tensor {name} is not numeric ({arr.dtype})")
            continue
        bad = int(arr.size - np.isfinite(arr).sum())
        if bad:
            errors.append(f"tensor {name} has {bad} non-finite values out of {arr.size}")
    if expected_shapes is not None:
        for name, shape in expected_shapes.items():
            if name not in state:
                errors.append(f"tensor {name} is missing")
            elif tuple(np.shape(state[name])) != tuple(shape):
                errors.append(
                    f"tensor {name} has shape {tuple(np.shape(state[name]))}, "
                    f"the base model needs {tuple(shape)}"
                )
        errors.extend(
            f"tensor {name} matches no module of the base model"
            for name in state
            if name not in expected_shapes
        )
    if scale is None or _missing(scale) or not math.isfinite(float(scale)) or float(scale) <= 0:
        errors.append(f"the adapter scale (lora_alpha / r) is missing or invalid: {scale!r}")
    return errors


# --------------------------------------------------------------------------------------
# The publish gate
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """The gate's decision.

    ``reasons`` say why an adapter was rejected (empty when accepted); ``notes``
    say what was not checked and why (e.g. too few held-out ratings), so an
    accepted adapter still tells the user what its acceptance rests on.
    """

    accept: bool
    reasons: list[str]
    metrics: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def gate(metrics: Mapping[str, Any], hyper: GateHyper) -> Verdict:
    """Decide whether an adapter may be published; see the module doc for the keys.

    Rejects when: the held-out AUROC fell more than ``hyper.auroc_tolerance``
    below the parent's (only when both exist and the held-out set has at least
    :data:`MIN_HELDOUT_PER_CLASS` of each class); the KL to the base exceeds
    ``hyper.kl_cap`` or was not measured; any sanity error is reported.
    """
    reasons: list[str] = []
    notes: list[str] = []

    errors = metrics.get("sanity_errors") or []
    if isinstance(errors, str):
        errors = [errors]
    reasons.extend(f"adapter sanity check failed: {e}" for e in errors)

    kl = metrics.get("kl_to_base")
    cap = float(hyper.kl_cap)
    if _missing(kl) or not math.isfinite(float(kl)):
        reasons.append(
            f"the KL to the base model was not measured (got {kl!r}), "
            "so the adapter's drift cannot be checked"
        )
    elif float(kl) > cap:
        reasons.append(
            f"mean per-token KL to the base model is {float(kl):.4g} nats, above the {cap:.4g} cap"
        )

    good, bad = metrics.get("heldout_good"), metrics.get("heldout_bad")
    new, parent = metrics.get("auroc_new"), metrics.get("auroc_parent")
    tol = float(hyper.auroc_tolerance)
    if good is not None and bad is not None and min(good, bad) < MIN_HELDOUT_PER_CLASS:
        notes.append(
            f"held-out AUROC skipped: {good} good and {bad} bad held-out ratings, "
            f"fewer than {MIN_HELDOUT_PER_CLASS} of each"
        )
    elif _missing(new):
        notes.append("held-out AUROC skipped: it was not computed for the new adapter")
    elif _missing(parent):
        notes.append(
            f"held-out AUROC is {_fmt(float(new))}; the parent has none, so there is "
            "nothing to compare against"
        )
    elif float(new) < float(parent) - tol:
        reasons.append(
            f"held-out AUROC fell from {_fmt(float(parent))} to {_fmt(float(new))}, "
            f"more than the {tol:g} tolerance"
        )

    return Verdict(accept=not reasons, reasons=reasons, metrics=dict(metrics), notes=notes)


# --------------------------------------------------------------------------------------
# Bundled neutral texts
# --------------------------------------------------------------------------------------


def load_neutral_texts() -> list[str]:
    """The bundled neutral paragraphs (prose and small code) the KL is measured on.

    Read through importlib.resources so it works from a wheel, a zip or the
    editable checkout. Paragraphs are separated by blank lines.
    """
    text = resources.files("rltray.trainer.assets").joinpath(NEUTRAL_RESOURCE).read_text("utf-8")
    paragraphs = [p.strip("\n") for p in text.replace("\r\n", "\n").split("\n\n")]
    return [p for p in paragraphs if p.strip()]
