"""The MIS-PO objective for rated turns, written once per tensor library.

Why this module looks the way it does:

* The maths lives here once per tensor library (torch, MLX) plus a numpy
  forward reference the tests compare both against. Backends only gather the
  log-probabilities and call :func:`mispo_loss_torch` / :func:`mispo_loss_mlx`.
* ``import rltray.trainer.objective`` must stay cheap and must not import torch
  or MLX: the tray, the job validator and the MLX backend import it on machines
  that have only one of the two (or neither). Every heavy import is inside the
  function that needs it.
* The advantage, class-weight and EMA helpers are pure python so the train loop
  and the tray can use them without any tensor library.

The maths (see TRAINER-SPEC "Objective"), per example ``i`` with response
tokens ``t`` (``mask_t = 1``), ``T_i = Σ_t mask_t``:

    ρ_t  = exp(n_t − o_t)                                  gradient through n_t
    m_t  = 1[rho_lo ≤ ρ_t ≤ rho_hi]                        detached token mask
    d_i  = Σ_t mask_t (n_t − f_t) / T_i                    detached drift
    g_i  = 0 if (A_i > 0 and d_i > delta_hi) or (A_i < 0 and d_i < delta_lo) else 1
    k3_t = exp(f_t − n_t) − (f_t − n_t) − 1  (bounded, below)  ≥ 0, = 0 iff n_t = f_t
    L_i  = −(1/T_i) Σ_t mask_t m_t g_i ρ_t A_i + β (1/T_i) Σ_t mask_t k3_t
    loss = Σ_i w_i L_i

The masks ``m`` and ``g`` are hard 0/1 numbers computed from detached values,
so they only select which tokens the surrogate pushes; they never scale or flip
a gradient (ReinforceClaw multiplies by an undetached trajectory scale, which
does exactly that). The gate ``g`` does not touch the β·k3 term: a trajectory
that has drifted too far is still pulled back towards the base.

**Weights are normalised by the caller over the whole optimizer step**, not per
micro-batch: ``Σ_{i in step} w_i`` is the step's mean-weighting (use
:func:`step_weights`). The loss of one micro-batch is therefore its share of the
step loss, and summing gradients over the micro-batches of a step equals the
gradient of one big batch holding all of them — whatever the micro-batch size.

Padding and out-of-band tokens are guarded with ``where`` *before* ``exp`` so
that a huge log-ratio on a token we ignore can neither overflow into the loss
nor send ``0 · inf = NaN`` through the backward pass.

The k3 term is **bounded**: with ``x = f_t − n_t``, ``k3(x) = e^x − x − 1`` for
``x ≤`` :data:`K3_LINEAR_FROM` and its tangent line beyond (value and slope
continuous). Exact k3 grows like ``e^x`` once a token sits far below the base:
a held-out run with ``aggressive`` saw mean k3 go 21 → 95,412 in eleven steps
and a gradient norm of 88,815, so after clipping one runaway token steered the
whole step. The tangent keeps the pull back towards the base (the slope at the
bound, ``β (e^4 − 1) ≈ 54 β`` per token, is still the strongest force on that
token) without letting it drown every other token; below the bound nothing
changes. The logged ``kl`` is the same bounded value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

#: Log-ratio ``f − n`` (nats) beyond which the k3 term continues as its tangent line.
K3_LINEAR_FROM = 4.0

#: Keys of the stats dict every ``mispo_loss_*`` returns, in this order.
STAT_KEYS: tuple[str, ...] = (
    "loss",
    "masked_tokens",
    "gated_examples",
    "drift",
    "kl",
    "adv_mean",
    "tokens",
    "examples",
)


class MisPoHyper(Protocol):
    """What the objective reads from ``presets.Hyper`` (duck-typed)."""

    rho_lo: float
    rho_hi: float
    delta_lo: float
    delta_hi: float
    beta: float


# --------------------------------------------------------------------------------------
# Pure-python helpers: advantages, class balance, reward baseline
# --------------------------------------------------------------------------------------


def _sign(rating: float) -> int:
    """+1 / -1 for a rating; a zero or NaN rating has no class and is refused."""
    if rating > 0:
        return 1
    if rating < 0:
        return -1
    raise ValueError(f"a rating must be positive (good) or negative (bad), got {rating!r}")


def advantages(ratings: Iterable[float], baseline: float, clip: float = 2.0) -> list[float]:
    """A_i = clip(|r_i| · (sign(r_i) − b), −clip, clip) for each rating.

    For a plain good or bad (``r = ±1``) that is ``r − b``. A graded rating's reward is
    a fraction of one (a 2/5 is ``−0.5``): as ``r − b`` it took the other class's sign
    whenever ``|b| > 0.5`` on its side (users rate bad more often than good, so a
    baseline of −0.6 is common), and a 2/5 answer was trained as good, with the bad
    class's weight on top. Scaling the binary advantage by ``|r|`` keeps every
    rating's sign (``|b| < 1``) and its strength.

    Deliberately *no* z-normalisation over the batch: normalising a mixed batch
    subtracts the batch mean and divides by the batch spread, which replaces the
    EMA baseline by the batch's own mean (so ``b`` no longer matters at all) and
    rescales the step by how balanced this particular batch happens to be.
    ReinforceClaw does this and its baseline and ``pos_weight`` become inert.
    Class balance is handled by :func:`class_weights` instead, and step size by
    the learning rate and the trust-region masks.
    """
    if clip <= 0 or math.isnan(clip):
        raise ValueError(f"advantage clip must be positive, got {clip!r}")
    if not math.isfinite(baseline):
        raise ValueError(f"reward baseline must be finite, got {baseline!r}")
    out: list[float] = []
    for r in ratings:
        a = abs(float(r)) * (_sign(r) - float(baseline))
        out.append(max(-clip, min(clip, a)))
    return out


def class_weights(ratings: Sequence[float], advs: Sequence[float] | None = None) -> list[float]:
    """Per-example weights that make the good and the bad class push equally hard.

    What one example pushes is ``w_i · |A_i|``. Each class gets half of the
    round's total push ``S = Σ_i |A_i|``: good examples ``w = (S/2) / Σ_good |A|``,
    bad ones ``w = (S/2) / Σ_bad |A|``, so the ratio of good to bad push is 1
    (inside the spec's [3:4, 4:3]) and ``Σ w|A| = S``: the weighting changes the
    balance, not the overall step size. Without ``advs`` every ``|A|`` is 1, which
    is plain count balancing (``n / 2P`` and ``n / 2N``, mean weight 1).

    Why by push and not by count: the EMA baseline already shifts the advantages
    by the historic class mix (``A = r − b``). Balancing counts on top of that
    corrected the mix twice: with equal counts and ``b = −0.5`` good answers got
    ``A = 1.5`` and bad ones ``−0.5``, a 3:1 push, and the ``+0.5`` shared by every
    rated answer was an imitation push on the bad ones too. Balancing the push
    corrects once; the baseline still sets the step size of a one-class round
    (nothing to balance there), which is where it carries information.
    A round with one class only gets uniform weights.
    """
    signs = [_sign(r) for r in ratings]
    n = len(signs)
    mags = [1.0] * n if advs is None else [abs(float(a)) for a in advs]
    if len(mags) != n:
        raise ValueError(f"class_weights needs one advantage per rating, got {len(mags)} and {n}")
    pos = sum(m for s, m in zip(signs, mags, strict=True) if s > 0)
    neg = sum(m for s, m in zip(signs, mags, strict=True) if s < 0)
    if pos <= 0 or neg <= 0:
        if advs is not None and any(s > 0 for s in signs) and any(s < 0 for s in signs):
            return class_weights(ratings)  # one class has no push at all: balance counts
        return [1.0] * n
    half = (pos + neg) / 2.0
    return [half / pos if s > 0 else half / neg for s in signs]


def push_ratio(ratings: Sequence[float], advs: Sequence[float], weights: Sequence[float]) -> float:
    """Total good push over total bad push, ``Σ_good w|A| / Σ_bad w|A|`` (inf with no bad)."""
    pos = sum(w * abs(a) for r, a, w in zip(ratings, advs, weights, strict=True) if r > 0)
    neg = sum(w * abs(a) for r, a, w in zip(ratings, advs, weights, strict=True) if r < 0)
    return pos / neg if neg > 0 else math.inf


def step_weights(weights: Sequence[float]) -> list[float]:
    """Scale one optimizer step's example weights to sum to 1.

    The objective's loss is ``Σ_i w_i L_i`` per micro-batch; with weights that
    sum to 1 over the *step* (not the micro-batch) the accumulated gradient is
    the weighted mean over the step, independent of how it is split.
    """
    total = float(sum(weights))
    if not weights:
        return []
    if not (total > 0 and math.isfinite(total)):
        raise ValueError(f"step weights must have a positive finite sum, got {total!r}")
    return [float(w) / total for w in weights]


def ema_update(baseline: float, rewards: Iterable[float], decay: float = 0.99) -> float:
    """Fold rewards, oldest first, into the EMA reward baseline.

    ``b ← decay · b + (1 − decay) · r`` for each reward in time order. Called once
    a round is published, over that round's fresh ratings; order matters (newer
    rewards weigh more), so pass them in the order they were rated.
    """
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"EMA decay must be within [0, 1], got {decay!r}")
    b = float(baseline)
    for r in rewards:
        b = decay * b + (1.0 - decay) * float(r)
    return b


# --------------------------------------------------------------------------------------
# The objective a round optimises (``train(..., objective=...)``)
# --------------------------------------------------------------------------------------


#: A Hyper (``presets.Hyper``; any dataclass with the loss fields).
H = TypeVar("H")


@dataclass(frozen=True)
class Objective:
    """What a round optimises, handed to :func:`rltray.trainer.train.train`.

    Why an object and not hyper overrides: a baseline such as REINFORCE is a choice
    of objective, not a preset. Before this, the benchmarks wrote the numbers that
    switch MIS-PO's masks and KL off into the job's ``hyper`` and so dressed another
    objective up as a MIS-PO preset; now they name the objective and the trainer
    applies it, in one place, to a Hyper the job left as it was.

    Every objective here shares the round's mechanics (EMA baseline, advantages,
    class weights by push, step weights) and the backends' one loss function
    (``mispo_loss_<library>``); ``loss_fields`` are the loss parameters it fixes
    whatever the preset says (``rho_lo`` ... ``beta``; none for MIS-PO itself).
    The backend's loss reads them from the Hyper the trainer hands it.
    """

    name: str
    loss_fields: Mapping[str, float] = field(default_factory=dict)

    def loss_hyper(self, hyper: H) -> H:
        """``hyper`` with this objective's loss parameters in place (itself when none)."""
        if not self.loss_fields:
            return hyper
        return dataclasses.replace(hyper, **dict(self.loss_fields))


#: The trainer's own objective (the default of ``train``): the preset's masks and KL.
MISPO = Objective("mispo")

#: Plain REINFORCE with the same EMA baseline and class weights: no token mask (the
#: ratio band holds every ratio), no trajectory gate (the drift band holds every
#: drift), no KL term. The benchmarks' baseline (bench/runs.py).
REINFORCE = Objective(
    "reinforce",
    {"rho_lo": 0.0, "rho_hi": 1e9, "delta_lo": -1e9, "delta_hi": 1e9, "beta": 0.0},
)

#: Objectives by name, for the command lines that pick one.
OBJECTIVES: dict[str, Objective] = {o.name: o for o in (MISPO, REINFORCE)}


# --------------------------------------------------------------------------------------
# Numpy reference (forward only; the tests compare torch and MLX against it)
# --------------------------------------------------------------------------------------


def mispo_loss_numpy(
    n: Any, o: Any, f: Any, mask: Any, adv: Any, weight: Any, hyper: MisPoHyper
) -> tuple[float, dict[str, float]]:
    """Reference MIS-PO loss in float64 numpy; the same maths as the tensor versions."""
    import numpy as np

    n, o, f, mask = (np.asarray(x, dtype=np.float64) for x in (n, o, f, mask))
    adv = np.asarray(adv, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    _check_shapes(n.shape, o.shape, f.shape, mask.shape, adv.shape, weight.shape)

    valid = mask > 0
    log_ratio = np.where(valid, n - o, 0.0)
    rho = np.exp(log_ratio)
    in_band = (rho >= hyper.rho_lo) & (rho <= hyper.rho_hi) & valid
    tokens = mask.sum(axis=1)
    t_safe = np.maximum(tokens, 1.0)
    drift = (mask * np.where(valid, n - f, 0.0)).sum(axis=1) / t_safe
    gate = ~(((adv > 0) & (drift > hyper.delta_hi)) | ((adv < 0) & (drift < hyper.delta_lo)))
    k3 = k3_bounded_numpy(np.where(valid, f - n, 0.0))
    keep = mask * in_band * gate[:, None]
    surrogate = -(keep * rho).sum(axis=1) * adv / t_safe
    kl_term = hyper.beta * (mask * k3).sum(axis=1) / t_safe
    per_example = surrogate + kl_term
    loss = float((weight * per_example).sum())

    total = float(tokens.sum())
    has = tokens > 0
    n_has = int(has.sum())
    stats = {
        "loss": loss,
        "masked_tokens": float((mask * ~in_band).sum() / total) if total else 0.0,
        "gated_examples": float((~gate & has).sum() / n_has) if n_has else 0.0,
        "drift": float(drift[has].mean()) if n_has else 0.0,
        "kl": float((mask * k3).sum() / total) if total else 0.0,
        "adv_mean": float(adv.mean()) if adv.size else 0.0,
        "tokens": total,
        "examples": float(n_has),
    }
    return loss, stats


# --------------------------------------------------------------------------------------
# torch
# --------------------------------------------------------------------------------------


def mispo_loss_torch(
    n: Any,
    o: Any,
    f: Any,
    mask: Any,
    adv: Any,
    weight: Any,
    hyper: MisPoHyper,
    *,
    float_stats: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """MIS-PO loss in torch; ``n`` carries gradient, everything else is a constant.

    ``n`` is a (B, T) tensor on the model's device (any float dtype; the loss is
    computed in float32). ``o``, ``f``, ``mask`` (B, T) and ``adv``, ``weight`` (B,)
    may be tensors or numpy arrays; they are moved to ``n``'s device and
    detached. Returns ``(loss, stats)``: ``loss`` a 0-d float32 tensor to call
    ``.backward()`` on, ``stats`` python floats (one device sync), or 0-d tensors
    with ``float_stats=False``.
    """
    import torch

    dev = n.device

    def const(x: Any) -> Any:
        return torch.as_tensor(x, dtype=torch.float32, device=dev).detach()

    n32 = n.float()
    o, f, mask, adv, weight = (const(x) for x in (o, f, mask, adv, weight))
    _check_shapes(
        tuple(n.shape), tuple(o.shape), tuple(f.shape), tuple(mask.shape),
        tuple(adv.shape), tuple(weight.shape),
    )  # fmt: skip

    valid = mask > 0
    zero = torch.zeros((), dtype=torch.float32, device=dev)
    with torch.no_grad():
        nd = n32.detach()
        rho_d = torch.exp(torch.where(valid, nd - o, zero))
        in_band = valid & (rho_d >= hyper.rho_lo) & (rho_d <= hyper.rho_hi)
        tokens = mask.sum(dim=1)
        t_safe = tokens.clamp(min=1.0)
        drift = (mask * torch.where(valid, nd - f, zero)).sum(dim=1) / t_safe
        gated = ((adv > 0) & (drift > hyper.delta_hi)) | ((adv < 0) & (drift < hyper.delta_lo))
        keep = mask * in_band.float() * (~gated).float()[:, None]

    # Ignored tokens get a log-ratio of 0 before exp: finite forward and backward.
    rho = torch.exp(torch.where(keep > 0, n32 - o, zero))
    fn = torch.where(valid, f - n32, zero)
    # exp part stops at the bound, the tangent (a relu: no cancelling gradients) takes over
    fc = fn.clamp(max=K3_LINEAR_FROM)
    beyond = (fn - K3_LINEAR_FROM).clamp(min=0.0)
    k3 = torch.exp(fc) - fc - 1.0 + math.expm1(K3_LINEAR_FROM) * beyond
    surrogate = -(keep * rho).sum(dim=1) * adv / t_safe
    kl_term = hyper.beta * (mask * k3).sum(dim=1) / t_safe
    loss = (weight * (surrogate + kl_term)).sum()

    with torch.no_grad():
        has = tokens > 0
        total = tokens.sum()
        n_has = has.float().sum()
        one = torch.ones((), dtype=torch.float32, device=dev)
        stat_values = [
            loss.detach(),
            (mask * (~in_band).float()).sum() / torch.maximum(total, one),
            (gated & has).float().sum() / torch.maximum(n_has, one),
            (drift * has.float()).sum() / torch.maximum(n_has, one),
            (mask * k3.detach()).sum() / torch.maximum(total, one),
            adv.mean() if adv.numel() else zero,
            total,
            n_has,
        ]
        stacked = torch.stack([v.reshape(()) for v in stat_values])
    if float_stats:
        return loss, dict(zip(STAT_KEYS, (float(v) for v in stacked.tolist()), strict=True))
    return loss, dict(zip(STAT_KEYS, stacked.unbind(0), strict=True))


# --------------------------------------------------------------------------------------
# MLX
# --------------------------------------------------------------------------------------


def mispo_loss_mlx(
    n: Any,
    o: Any,
    f: Any,
    mask: Any,
    adv: Any,
    weight: Any,
    hyper: MisPoHyper,
    *,
    float_stats: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """MIS-PO loss in MLX, the same maths as :func:`mispo_loss_torch`.

    Use inside ``mx.value_and_grad`` / ``nn.value_and_grad``: the masks go
    through ``mx.stop_gradient``, so the gradient reaches ``n`` only through
    ``ρ_t`` in the surrogate and through the k3 term. ``o``, ``f``, ``mask``,
    ``adv``, ``weight`` may be numpy arrays. With ``float_stats=True`` (default)
    the stats are python floats (this evaluates them, which is fine under
    ``value_and_grad`` but not under ``mx.compile``); pass ``float_stats=False``
    for 0-d arrays in a compiled step.
    """
    import mlx.core as mx

    def const(x: Any) -> Any:
        arr = x if isinstance(x, mx.array) else mx.array(_as_float32_numpy(x))
        return mx.stop_gradient(arr.astype(mx.float32))

    n32 = n.astype(mx.float32)
    o, f, mask, adv, weight = (const(x) for x in (o, f, mask, adv, weight))
    _check_shapes(
        tuple(n.shape), tuple(o.shape), tuple(f.shape), tuple(mask.shape),
        tuple(adv.shape), tuple(weight.shape),
    )  # fmt: skip

    valid = mask > 0
    zero = mx.array(0.0, dtype=mx.float32)
    nd = mx.stop_gradient(n32)
    rho_d = mx.exp(mx.where(valid, nd - o, zero))
    in_band = valid & (rho_d >= hyper.rho_lo) & (rho_d <= hyper.rho_hi)
    tokens = mask.sum(axis=1)
    t_safe = mx.maximum(tokens, 1.0)
    drift = (mask * mx.where(valid, nd - f, zero)).sum(axis=1) / t_safe
    gated = ((adv > 0) & (drift > hyper.delta_hi)) | ((adv < 0) & (drift < hyper.delta_lo))
    keep = mx.stop_gradient(
        mask * in_band.astype(mx.float32) * mx.logical_not(gated).astype(mx.float32)[:, None]
    )

    rho = mx.exp(mx.where(keep > 0, n32 - o, zero))
    fn = mx.where(valid, f - n32, zero)
    fc = mx.minimum(fn, K3_LINEAR_FROM)
    beyond = mx.maximum(fn - K3_LINEAR_FROM, 0.0)
    k3 = mx.exp(fc) - fc - 1.0 + math.expm1(K3_LINEAR_FROM) * beyond
    surrogate = -(keep * rho).sum(axis=1) * adv / t_safe
    kl_term = hyper.beta * (mask * k3).sum(axis=1) / t_safe
    loss = (weight * (surrogate + kl_term)).sum()

    has = (tokens > 0).astype(mx.float32)
    total = tokens.sum()
    n_has = has.sum()
    stat_values = [
        loss,
        (mask * mx.logical_not(in_band).astype(mx.float32)).sum() / mx.maximum(total, 1.0),
        (gated.astype(mx.float32) * has).sum() / mx.maximum(n_has, 1.0),
        (drift * has).sum() / mx.maximum(n_has, 1.0),
        (mask * k3).sum() / mx.maximum(total, 1.0),
        adv.mean() if adv.size else zero,
        total,
        n_has,
    ]
    stacked = mx.stop_gradient(mx.stack([v.reshape(()) for v in stat_values]))
    if float_stats:
        return loss, dict(zip(STAT_KEYS, (float(v) for v in stacked.tolist()), strict=True))
    return loss, {k: stacked[i] for i, k in enumerate(STAT_KEYS)}


# --------------------------------------------------------------------------------------
# shared checks
# --------------------------------------------------------------------------------------


def k3_bounded_numpy(x: Any) -> Any:
    """``e^x − x − 1`` up to :data:`K3_LINEAR_FROM`, its tangent line beyond (float64)."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    xc = np.minimum(x, K3_LINEAR_FROM)
    return np.exp(xc) - xc - 1.0 + math.expm1(K3_LINEAR_FROM) * (x - xc)


def _as_float32_numpy(x: Any) -> Any:
    import numpy as np

    return np.asarray(x, dtype=np.float32)


def _check_shapes(
    n: tuple[int, ...],
    o: tuple[int, ...],
    f: tuple[int, ...],
    mask: tuple[int, ...],
    adv: tuple[int, ...],
    weight: tuple[int, ...],
) -> None:
    """Refuse mismatched inputs loudly: silent broadcasting here would train on garbage."""
    problems = []
    if len(n) != 2:
        problems.append(f"n must be (B, T), got {n}")
    for name, shape in (("o", o), ("f", f), ("mask", mask)):
        if shape != n:
            problems.append(f"{name} has shape {shape}, n has {n}")
    b = n[0] if n else None
    for name, shape in (("adv", adv), ("weight", weight)):
        if shape != (b,):
            problems.append(f"{name} has shape {shape}, expected ({b},)")
    if problems:
        raise ValueError("MIS-PO inputs do not match: " + "; ".join(problems))
