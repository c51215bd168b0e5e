"""Evaluation of a trained adapter and the publish gate.

An adapter is published only if it is safe and not measurably worse
(TRAINER-SPEC "Evaluation and the publish gate"):

* **Drift, per round and in total**, measured where it matters: exact KL over the
  vocabulary, with the model's chat template, at the *response positions* of the
  user's held-out rated turns (the answers it will write) and at their *prompt
  positions* (general text in the user's own domain and the model's own
  tokenizer — a fixed English file is out of vocabulary for some models and says
  nothing about a code model's use). Each is measured against the **parent**
  (this round's change, capped by ``hyper.kl_cap``) and against the **base**
  (the cumulative change, capped by ``hyper.kl_cap_total``). A cap on the base
  alone filled up round after round (0.0087 → 0.0275 in round 2) and would have
  locked a long-lived user out at about round 5 with no explanation; the per
  round cap bounds every step and the larger total cap bounds the sum (the
  numbers and their reasoning are in ``presets.py``).
* **Held-out preference**, by an exact, paired rank test (:mod:`.preference`:
  ``preference_test``, ``judge_preference``). Each held-out answer has an implicit reward
  ``mean_t(n_t − f_t)`` under the parent and under the new adapter, on the *same*
  answers; the test ranks each answer's change ``new − parent`` and compares good
  with bad against the exact Mann–Whitney distribution (the share of good/bad
  pairs the round moved the right way; 0.5 = the change ignores the ratings). In
  round 1 the parent is the base, whose reward is identically 0, so this is the
  new AUROC against exactly 0.5 — no sampling error for the base. Later rounds
  pair the scores, so the parent's own spread cancels (the old test added two
  Hanley–McNeil standard errors as if independent: no power at 4 + 4, about 2x
  the noise later). *Worse* — a drop beyond ``hyper.auroc_tolerance`` with
  one-sided p <= :data:`.preference.ALPHA_WORSE` (0.25) — rejects; *better* needs p <=
  :data:`.preference.ALPHA_BETTER` (0.05); anything else is *not measurably worse*, and the
  note says whether the drop was inside the tolerance or the ratings too few to
  tell. Power by simulation (``bench/gate_power.py``, bench/README.md): at 8 + 8
  held out a round-1 adapter at true AUROC 0.25 is rejected 84% of the time, one
  at 0.75 0.4%; one that changed nothing is rejected about 1 time in 5 — a good
  round rejected is retried with its ratings, a worse one accepted is what the
  user talks to. The held-out set itself grows across rounds (``app/jobbuild``'s
  standing held-out set). With fewer than :data:`MIN_HELDOUT_PER_CLASS` held-out
  ratings of a class the check is skipped, the verdict says so, and the other
  checks decide alone.
* **Capability kept** (:mod:`.capability`): the NLL per token of the base
  model's own greedy answers, under the new adapter against the base, to a few
  everyday prompts (beyond ``hyper.nll_cap``, +5%, rejects) and to a few of the
  round's own prompts (beyond ``hyper.rated_nll_cap``, +20%: the style the user
  asked for moves those answers too), each when this round made it worse than the
  parent did; on SmolLM2 ``aggressive`` had been accepted at +25.6% with 6% broken
  answers, inside the drift caps.
* **Sanity**: finite tensors, shapes that match the base, a scale present.

Gate profiles (``hyper.gate_profile``, see :data:`GATE_PROFILES`): ``standard``
for every real model; ``tiny-test`` for the randomly initialised tiny models of
the test suite only, whose "preferences" are noise and whose own answers are
near-uniform babble — it turns the held-out preference and capability checks off
(said in the notes) and keeps drift and sanity.

Importing this module pulls in neither torch, MLX nor numpy:
:func:`gate` and :class:`Verdict` are pure python so the tray can re-check or
display a verdict; the tensor helpers import their library inside the function.

The gate reads a plain ``metrics`` dict; the keys it understands:

``kl_round``, ``kl_total``
    floats, required: mean per-token KL(new ‖ parent) and KL(new ‖ base) at the
    response positions of the drift set (the held-out turns; the newest
    training turns when nothing is held out). An adapter whose drift was not
    measured is not published.
``kl_round_general``, ``kl_total_general``
    the same at the prompt positions (checked when present).
``heldout_scores_new``, ``heldout_scores_parent``, ``heldout_labels``
    per held-out answer: the implicit reward under the new adapter and under the
    parent (None or absent: the base, 0 everywhere), and the rating (+1 / -1);
    ``rounddata.heldout_metrics`` writes them. ``auroc_new`` / ``auroc_parent``
    are reported for display; the test reads the scores.
``heldout_good``, ``heldout_bad``
    how many held-out examples of each class were scored.
``ref_nll_base``, ``ref_nll_parent``, ``ref_nll_new``, ``ref_nll_increase``, ``ref_prompts``
    the capability check on the round's prompts (``capability.finish``); absent: the check
    was off (noted).
``general_nll_base``, ``general_nll_parent``, ``general_nll_new``, ``general_nll_increase``,
``general_prompts``
    the same on everyday prompts; absent: the round's prompts are held to ``nll_cap``.
``sanity_errors``
    list of sentences from the adapter checks (:func:`tensor_sanity_errors`,
    ``adapters.validate``); each one rejects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Protocol

from rltray.trainer.preference import (
    PreferenceTest,
    judge_preference,
    missing,
    preference_test,
)

#: Fewest held-out examples of *each* class for an AUROC worth gating on. With
#: two or three of a class AUROC moves in steps of 1/4 to 1/9 and its standard
#: error is ~0.2-0.3 — noise, not evidence — so below this the comparison is
#: skipped (and said so in the verdict's notes) rather than used to reject: a new
#: user with a handful of ratings would otherwise never get an adapter.
MIN_HELDOUT_PER_CLASS = 4

#: Gate profiles: what each turns off. ``tiny-test`` exists for the test suite's
#: randomly initialised tiny models, whose held-out "preference" is noise; never
#: for a real model (drift and sanity still decide).
GATE_PROFILES: dict[str, dict[str, bool]] = {
    "standard": {"preference": True, "capability": True},
    "tiny-test": {"preference": False, "capability": False},
}

NEUTRAL_RESOURCE = "neutral.txt"


class GateHyper(Protocol):
    """What the gate reads from ``presets.Hyper`` (duck-typed)."""

    auroc_tolerance: float
    kl_cap: float
    kl_cap_total: float
    gate_profile: str


# --------------------------------------------------------------------------------------
# Implicit reward
# --------------------------------------------------------------------------------------


def implicit_reward(n: Any, f: Any, mask: Any) -> Any:
    """Per-example implicit reward ``mean_t(n_t − f_t)`` over response tokens.

    ``n`` (policy) and ``f`` (base) are (B, T) token log-probs, ``mask`` (B, T)
    marks response tokens. How far the policy raised its own answer above the
    base, per token: a model that learned the ratings raises good answers and
    lowers bad ones. An example with no response tokens gets NaN, which
    :func:`.preference.auroc` drops. Returns a float64 numpy array (B,).
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


def kl_positions_torch(logits_policy: Any, logits_base: Any) -> Any:
    """(B, T) float64 Σ_v p log(p/q) at every position (torch), one row at a time.

    Why per position: drift is summed under several masks (answer and prompt
    positions); computing the KL once and masking the result costs one
    log-softmax pair per row instead of one per mask. The row loop bounds the
    fp32 copies to one row's T x V.
    """
    import torch

    rows = []
    with torch.no_grad():
        for b in range(logits_policy.shape[0]):
            lp = torch.log_softmax(logits_policy[b].float(), dim=-1)
            lq = torch.log_softmax(logits_base[b].float(), dim=-1)
            p = lp.exp()
            # p = 0 (logit −inf) contributes 0, not 0·(−inf) = NaN.
            per_pos = torch.where(p > 0, p * (lp - lq), torch.zeros_like(p)).sum(-1)
            rows.append(per_pos.clamp(min=0.0).double())  # KL ≥ 0; drop rounding below 0
    return torch.stack(rows)


def masked_sum_torch(per_pos: Any, mask: Any) -> tuple[float, float]:
    """(Σ per_pos · mask, Σ mask) as floats."""
    import torch

    mask = torch.as_tensor(mask, device=per_pos.device).double()
    return float((per_pos * mask).sum()), float(mask.sum())


def kl_sum_torch(logits_policy: Any, logits_base: Any, mask: Any) -> tuple[float, float]:
    """Σ over masked positions of Σ_v p log(p/q), and the number of positions (torch)."""
    _check_logits(tuple(logits_policy.shape), tuple(logits_base.shape), tuple(mask.shape))
    return masked_sum_torch(kl_positions_torch(logits_policy, logits_base), mask)


def kl_per_token_torch(logits_policy: Any, logits_base: Any, mask: Any) -> float:
    """Masked mean per-token KL(policy ‖ base) from logits (torch); 0.0 with no tokens."""
    total, count = kl_sum_torch(logits_policy, logits_base, mask)
    return total / count if count else 0.0


def kl_positions_mlx(logits_policy: Any, logits_base: Any) -> Any:
    """(B, T) numpy float64 Σ_v p log(p/q) at every position (MLX); see the torch twin."""
    import mlx.core as mx
    import numpy as np

    rows = []
    for b in range(logits_policy.shape[0]):
        zp = mx.stop_gradient(logits_policy[b]).astype(mx.float32)
        zq = mx.stop_gradient(logits_base[b]).astype(mx.float32)
        lp = zp - mx.logsumexp(zp, axis=-1, keepdims=True)
        lq = zq - mx.logsumexp(zq, axis=-1, keepdims=True)
        p = mx.exp(lp)
        per_pos = mx.where(p > 0, p * (lp - lq), mx.zeros_like(p)).sum(axis=-1)
        rows.append(np.array(mx.maximum(per_pos, 0.0), dtype=np.float64))
    return np.stack(rows)


def kl_sum_mlx(logits_policy: Any, logits_base: Any, mask: Any) -> tuple[float, float]:
    """Σ over masked positions of Σ_v p log(p/q), and the number of positions (MLX)."""
    _check_logits(tuple(logits_policy.shape), tuple(logits_base.shape), tuple(mask.shape))
    return masked_sum_numpy(kl_positions_mlx(logits_policy, logits_base), mask)


def masked_sum_numpy(per_pos: Any, mask: Any) -> tuple[float, float]:
    """(Σ per_pos · mask, Σ mask) as floats, for numpy arrays (the MLX path)."""
    import numpy as np

    mask = np.asarray(mask, dtype=np.float64)
    return float((per_pos * mask).sum()), float(mask.sum())


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
    if scale is None or missing(scale) or not math.isfinite(float(scale)) or float(scale) <= 0:
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


#: Drift metrics the gate checks: (key, cap attribute, where, against what, required).
_DRIFT_CHECKS = (
    ("kl_round", "kl_cap", "the held-out answers", "the parent", True),
    ("kl_total", "kl_cap_total", "the held-out answers", "the base model", True),
    ("kl_round_general", "kl_cap", "the prompt text", "the parent", False),
    ("kl_total_general", "kl_cap_total", "the prompt text", "the base model", False),
)


def gate(metrics: Mapping[str, Any], hyper: GateHyper) -> Verdict:
    """Decide whether an adapter may be published; see the module doc for the keys.

    Rejects when: any sanity error is reported; a drift (per round against the
    parent, in total against the base, on answers and on prompt text) exceeds
    its cap or a required one was not measured; the round's held-out change is
    measurably worse (:func:`.preference.judge_preference`); the base's own answers lost more
    of their likelihood than the capability caps allow (:func:`_capability`). The
    verdict's ``metrics`` gain ``preference`` (``better``, ``unchanged``,
    ``worse`` or ``unmeasured``) and, when tested, ``preference_change_auroc``,
    ``preference_p_worse`` and ``preference_p_better``.
    """
    reasons: list[str] = []
    notes: list[str] = []
    out = dict(metrics)

    errors = metrics.get("sanity_errors") or []
    if isinstance(errors, str):
        errors = [errors]
    reasons.extend(f"adapter sanity check failed: {e}" for e in errors)

    for key, cap_name, where, against, required in _DRIFT_CHECKS:
        value = metrics.get(key)
        cap = float(getattr(hyper, cap_name))
        if missing(value) or not math.isfinite(float(value)):
            if required or key in metrics:
                reasons.append(
                    f"the drift from {against} on {where} was not measured (got {value!r}), "
                    "so the adapter cannot be checked"
                )
        elif float(value) > cap:
            reasons.append(
                f"mean per-token KL to {against} on {where} is {float(value):.4g} nats, "
                f"above the {cap:.4g} cap ({cap_name})"
            )

    out["preference"], test = _preference(metrics, hyper, reasons, notes)
    _capability(metrics, hyper, reasons, notes)
    if test is not None:
        out.update(preference_change_auroc=test.change_auroc, preference_p_worse=test.p_worse,
                   preference_p_better=test.p_better)
    return Verdict(accept=not reasons, reasons=reasons, metrics=out, notes=notes)


def _capability(
    metrics: Mapping[str, Any], hyper: GateHyper, reasons: list[str], notes: list[str]
) -> None:
    """The capability check (``general_nll_*``, ``ref_nll_*``, :mod:`.capability`);
    appends to reasons/notes.

    Rejects when the base model's own greedy answers to the everyday prompts became
    more than ``hyper.nll_cap`` less likely per token than under the base, or those to
    the round's own prompts more than ``hyper.rated_nll_cap`` (``nll_cap`` when the
    everyday set was not measured) — each only when this round made them less likely
    than the parent did: a line of versions already over a cap (a cap lowered later)
    may still publish a round that gives capability back. A measurement that came out
    NaN or infinite rejects (the model is broken); one that was not made
    (``ref_prompts`` 0) is said in the notes.
    """
    cap = getattr(hyper, "nll_cap", None)
    if cap is None:
        return
    profile = str(getattr(hyper, "gate_profile", "standard") or "standard")
    if not GATE_PROFILES.get(profile, GATE_PROFILES["standard"])["capability"]:
        notes.append(f"capability check off (gate profile {profile!r}, for tiny test models "
                     "only: a randomly initialised model has no capability to keep)")
        return
    if "ref_nll_increase" not in metrics:
        notes.append("capability check off (no reference answers): decided without it")
        return
    everyday = "general_nll_increase" in metrics
    if everyday:
        _nll_rise(metrics, "general", float(cap), "nll_cap",
                  f"the base model's own answers to {metrics.get('general_prompts')} everyday "
                  "prompts", reasons, notes)
    else:
        notes.append("capability on everyday prompts not measured (general_prompts 0, or a "
                     "round begun before it existed): the round's prompts are held to nll_cap")
    rated = float(getattr(hyper, "rated_nll_cap", cap)) if everyday else float(cap)
    _nll_rise(metrics, "ref", rated, "rated_nll_cap" if everyday else "nll_cap",
              f"the base model's own answers to {metrics.get('ref_prompts')} of the round's "
              "prompts", reasons, notes)
    _broken_answers(metrics, hyper, reasons, notes)


def _nll_rise(metrics: Mapping[str, Any], prefix: str, cap: float, cap_name: str, what: str,
              reasons: list[str], notes: list[str]) -> None:
    inc, new = metrics.get(f"{prefix}_nll_increase"), metrics.get(f"{prefix}_nll_new")
    if missing(inc) or missing(new) or not math.isfinite(float(new)):
        reasons.append(f"the NLL of {what} under the new adapter is {new!r}: the model no "
                       "longer gives them a finite probability")
        return
    base = float(metrics[f"{prefix}_nll_base"])
    parent = float(metrics.get(f"{prefix}_nll_parent") or base)
    told = f"{what}: NLL {base:.3f} -> {float(new):.3f} nats/token ({float(inc):+.1%})"
    if float(inc) > cap and float(new) > parent:
        reasons.append(f"{told}, above the +{cap:.0%} cap ({cap_name}): the model lost "
                       "capability")
    elif float(inc) > cap:
        notes.append(f"{told}, above the +{cap:.0%} cap but below the parent's "
                     f"{parent:.3f}: this round gave capability back")
    else:
        notes.append(f"{told}: capability kept")


def _broken_answers(
    metrics: Mapping[str, Any], hyper: GateHyper, reasons: list[str], notes: list[str]
) -> None:
    """Rejects when the new adapter's greedy answers to the reference prompts are broken
    (``capability.degenerate``) more often than the base's by over ``hyper.degen_cap``,
    and by two answers at least: one answer that flips is not evidence on a handful."""
    cap = getattr(hyper, "degen_cap", None)
    new, base = metrics.get("ref_degenerate_new"), metrics.get("ref_degenerate_base")
    n = metrics.get("ref_prompts")
    if cap is None or missing(new) or missing(base) or not n:
        return
    rise = (int(new) - int(base)) / int(n)
    told = (f"broken answers (empty, looping, or without the code the base wrote) to the "
            f"same {n} prompts: {int(base)} from the base, {int(new)} from the new adapter")
    if rise > float(cap) and int(new) - int(base) >= 2:
        reasons.append(f"{told}, {rise:+.0%} above the {float(cap):.0%} cap (degen_cap)")
    else:
        notes.append(told)


def _preference(
    metrics: Mapping[str, Any], hyper: GateHyper, reasons: list[str], notes: list[str]
) -> tuple[str, PreferenceTest | None]:
    """The held-out preference test; appends to ``reasons``/``notes``, returns the evidence."""
    profile = str(getattr(hyper, "gate_profile", "standard") or "standard")
    if not GATE_PROFILES.get(profile, GATE_PROFILES["standard"])["preference"]:
        notes.append(
            f"held-out preference check off (gate profile {profile!r}, for tiny test models "
            "only): decided on drift and sanity alone"
        )
        return "unmeasured", None
    new, labels = metrics.get("heldout_scores_new"), metrics.get("heldout_labels")
    if not new or not labels:
        notes.append("held-out scores were not computed for the new adapter: decided on drift "
                     "and sanity alone")
        return "unmeasured", None
    try:
        test = preference_test(new, metrics.get("heldout_scores_parent"), labels)
    except ValueError:
        test = None  # a class has no scored answer
    if test is None or min(test.good, test.bad) < MIN_HELDOUT_PER_CLASS:
        good, bad = (test.good, test.bad) if test else (metrics.get("heldout_good"),
                                                        metrics.get("heldout_bad"))
        notes.append(
            f"too few held-out ratings to judge the preference ({good} good, {bad} bad; "
            f"{MIN_HELDOUT_PER_CLASS} of each needed): decided on drift and sanity alone"
        )
        return "unmeasured", None
    evidence, sentence = judge_preference(test, float(hyper.auroc_tolerance))
    (reasons if evidence == "worse" else notes).append(sentence)
    return evidence, test


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
