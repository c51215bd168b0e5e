"""MIS-PO objective: numpy reference vs torch vs MLX, gradients, masks and helpers.

No models: small random tensors whose log-ratios are built to land inside and
outside the token band, with padding, a gated example and an empty example.
"""

from __future__ import annotations

import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from rltray.trainer import objective as ob

torch = pytest.importorskip("torch", reason="torch is needed for the torch objective")
mx = pytest.importorskip("mlx.core", reason="mlx is needed for the MLX objective")


def hyper(**kw: float) -> SimpleNamespace:
    base = {"rho_lo": 0.5, "rho_hi": 2.0, "delta_lo": -0.2, "delta_hi": 0.2, "beta": 0.05}
    base.update(kw)
    return SimpleNamespace(**base)


def make_batch(seed: int = 0, b: int = 5, t: int = 9) -> dict[str, np.ndarray]:
    """Random log-probs with every case present: in-band, out-of-band, padding, gating."""
    rng = np.random.default_rng(seed)
    n = rng.normal(-2.0, 1.0, (b, t)).astype(np.float32)
    # log-ratio spread wide enough that about a third of the tokens leave [0.5, 2].
    o = (n - rng.normal(0.0, 0.6, (b, t))).astype(np.float32)
    f = (n - rng.normal(0.0, 0.1, (b, t))).astype(np.float32)
    mask = np.ones((b, t), np.float32)
    mask[:, 0] = 0.0  # leading prompt position
    mask[1, -3:] = 0.0  # right padding
    mask[3, :] = 0.0  # an example with no response tokens
    n[1, -3:] = 50.0  # garbage in padding must not matter
    # example 0 drifted far above the base while its advantage is positive: gated.
    f[0] = n[0] - 0.5
    adv = np.array([1.0, -1.0, 0.7, 2.0, -0.4], np.float32)[:b]
    weight = np.full(b, 1.0 / b, np.float32)
    return {"n": n, "o": o, "f": f, "mask": mask, "adv": adv, "weight": weight}


def torch_loss(batch: dict[str, np.ndarray], h: SimpleNamespace):
    n = torch.tensor(batch["n"], requires_grad=True)
    loss, stats = ob.mispo_loss_torch(
        n, batch["o"], batch["f"], batch["mask"], batch["adv"], batch["weight"], h
    )
    loss.backward()
    return loss.item(), stats, n.grad.numpy()


def mlx_loss(batch: dict[str, np.ndarray], h: SimpleNamespace):
    def fn(n):
        return ob.mispo_loss_mlx(
            n, batch["o"], batch["f"], batch["mask"], batch["adv"], batch["weight"], h
        )

    (loss, stats), grad = mx.value_and_grad(fn)(mx.array(batch["n"]))
    return float(loss.item()), stats, np.array(grad)


def analytic_grad(batch: dict[str, np.ndarray], h: SimpleNamespace) -> np.ndarray:
    """∂L/∂n_t = w_i mask_t [−(1/T) m_t g_i ρ_t A_i + β (1/T)(1 − exp(f_t − n_t))].

    This is the gradient with masks treated as constants; if any mask leaked a
    gradient the autograd result would differ from it.
    """
    n, o, f, mask = (batch[k].astype(np.float64) for k in ("n", "o", "f", "mask"))
    adv, w = batch["adv"].astype(np.float64), batch["weight"].astype(np.float64)
    valid = mask > 0
    rho = np.exp(np.where(valid, n - o, 0.0))
    m = (rho >= h.rho_lo) & (rho <= h.rho_hi)
    t = np.maximum(mask.sum(1), 1.0)
    drift = (mask * np.where(valid, n - f, 0.0)).sum(1) / t
    g = ~(((adv > 0) & (drift > h.delta_hi)) | ((adv < 0) & (drift < h.delta_lo)))
    fn = np.where(valid, f - n, 0.0)
    k3_slope = np.exp(np.minimum(fn, ob.K3_LINEAR_FROM)) - 1.0  # bounded k3: tangent beyond
    per_tok = -(m * g[:, None] * rho * adv[:, None]) - h.beta * k3_slope
    return w[:, None] * mask * per_tok / t[:, None]


def test_import_pulls_no_tensor_library() -> None:
    code = (
        "import sys, rltray.trainer.objective;"
        "bad = [m for m in ('torch', 'mlx', 'numpy') if m in sys.modules];"
        "sys.exit(repr(bad) if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_batch_covers_every_case() -> None:
    b, h = make_batch(), hyper()
    _, stats = ob.mispo_loss_numpy(**b, hyper=h)
    assert 0.1 < stats["masked_tokens"] < 0.9
    assert stats["gated_examples"] > 0
    assert stats["examples"] == 4.0  # example 3 has no response tokens


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_torch_mlx_agree_on_loss_and_stats(seed: int) -> None:
    b, h = make_batch(seed), hyper()
    ref_loss, ref_stats = ob.mispo_loss_numpy(**b, hyper=h)
    t_loss, t_stats, _ = torch_loss(b, h)
    m_loss, m_stats, _ = mlx_loss(b, h)
    assert t_loss == pytest.approx(ref_loss, rel=1e-5, abs=1e-7)
    assert m_loss == pytest.approx(ref_loss, rel=1e-5, abs=1e-7)
    assert set(t_stats) == set(m_stats) == set(ref_stats) == set(ob.STAT_KEYS)
    for key in ob.STAT_KEYS:
        assert isinstance(t_stats[key], float) and isinstance(m_stats[key], float)
        assert t_stats[key] == pytest.approx(ref_stats[key], rel=1e-5, abs=1e-6), key
        assert m_stats[key] == pytest.approx(ref_stats[key], rel=1e-5, abs=1e-6), key


@pytest.mark.parametrize("seed", [0, 3])
def test_gradients_match_between_torch_mlx_and_analytic(seed: int) -> None:
    b, h = make_batch(seed), hyper()
    _, _, t_grad = torch_loss(b, h)
    _, _, m_grad = mlx_loss(b, h)
    expected = analytic_grad(b, h)
    np.testing.assert_allclose(t_grad, m_grad, atol=1e-5, rtol=0)
    np.testing.assert_allclose(t_grad, expected, atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(m_grad, expected, atol=1e-6, rtol=1e-5)


def _case_masks(b: dict[str, np.ndarray], h: SimpleNamespace):
    valid = b["mask"] > 0
    rho = np.exp(np.where(valid, b["n"] - b["o"], 0.0))
    out_of_band = valid & ((rho < h.rho_lo) | (rho > h.rho_hi))
    return valid, out_of_band


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_gradient_exactly_zero_off_band_padding_and_gated_without_kl(backend: str) -> None:
    b, h = make_batch(), hyper(beta=0.0)
    _, _, grad = (torch_loss if backend == "torch" else mlx_loss)(b, h)
    valid, out_of_band = _case_masks(b, h)
    assert out_of_band.any()
    assert np.all(grad[out_of_band] == 0.0)
    assert np.all(grad[~valid] == 0.0)  # padding, including the garbage n = 50
    assert np.all(grad[0] == 0.0)  # gated example (A > 0, drift 0.5 > delta_hi)
    assert np.all(grad[3] == 0.0)  # example with no tokens
    in_band = valid & ~out_of_band
    in_band[0] = False
    assert np.all(grad[in_band] != 0.0)  # the surrogate does push the rest


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_kl_gradient_remains_on_off_band_and_gated_tokens(backend: str) -> None:
    b, h = make_batch(), hyper(beta=0.3)
    _, _, grad = (torch_loss if backend == "torch" else mlx_loss)(b, h)
    valid, out_of_band = _case_masks(b, h)
    t = b["mask"].sum(1, keepdims=True)
    slope = np.exp(np.minimum(b["f"] - b["n"], ob.K3_LINEAR_FROM)) - 1.0
    kl_only = -b["weight"][:, None] * h.beta * slope / np.maximum(t, 1.0)
    np.testing.assert_allclose(grad[0], kl_only[0] * b["mask"][0], rtol=1e-5, atol=1e-8)
    assert np.all(grad[0][valid[0]] != 0.0)
    np.testing.assert_allclose(grad[out_of_band], kl_only[out_of_band], rtol=1e-5, atol=1e-8)
    assert np.all(grad[~valid] == 0.0)


def test_gate_direction_follows_the_advantage() -> None:
    h = hyper(beta=0.0)
    n = np.full((4, 3), -1.0, np.float32)
    f = n.copy()
    f[0] -= 0.5  # drift +0.5, A > 0 -> gated
    f[1] -= 0.5  # drift +0.5, A < 0 -> pulled back, not gated
    f[2] += 0.5  # drift -0.5, A < 0 -> gated
    f[3] += 0.5  # drift -0.5, A > 0 -> not gated
    adv = np.array([1.0, -1.0, -1.0, 1.0], np.float32)
    mask = np.ones_like(n)
    nt = torch.tensor(n, requires_grad=True)
    _, stats = ob.mispo_loss_torch(nt, n, f, mask, adv, np.full(4, 0.25, np.float32), h)
    assert stats["gated_examples"] == pytest.approx(0.5)
    assert stats["drift"] == pytest.approx(0.0, abs=1e-6)
    # ρ = 1 (n == o) and m = g = 1 -> the surrogate is −A per example
    loss, _ = ob.mispo_loss_numpy(n, n, f, mask, adv, np.full(4, 0.25), h)
    assert loss == pytest.approx(-0.25 * (-1.0 + 1.0))


def test_huge_log_ratios_stay_finite() -> None:
    b, h = make_batch(), hyper()
    b["o"][2, 4] = b["n"][2, 4] - 120.0  # ρ = e^120 overflows float32 if not guarded
    b["n"][1, -1] = 1e4  # padding garbage
    t_loss, t_stats, t_grad = torch_loss(b, h)
    m_loss, _, m_grad = mlx_loss(b, h)
    assert np.isfinite(t_loss) and np.isfinite(m_loss)
    assert np.isfinite(t_grad).all() and np.isfinite(m_grad).all()
    assert t_grad[2, 4] == pytest.approx(float(analytic_grad(b, h)[2, 4]), rel=1e-5)
    assert t_stats["masked_tokens"] > 0


def test_empty_example_contributes_nothing() -> None:
    b, h = make_batch(), hyper()
    loss_all, _ = ob.mispo_loss_numpy(**b, hyper=h)
    b2 = dict(b)
    b2["weight"] = b["weight"].copy()
    b2["weight"][3] = 100.0
    loss_heavy, _ = ob.mispo_loss_numpy(**b2, hyper=h)
    assert loss_heavy == pytest.approx(loss_all)


def test_micro_batches_accumulate_to_the_full_batch_gradient() -> None:
    b, h = make_batch(5, b=5), hyper()
    b["weight"] = np.asarray(ob.step_weights([1.0, 2.0, 1.0, 1.0, 3.0]), np.float32)
    full_loss, _, full_grad = torch_loss(b, h)
    parts = []
    loss_sum = 0.0
    for sl in (slice(0, 2), slice(2, 5)):
        part = {k: v[sl] for k, v in b.items()}
        loss, _, grad = torch_loss(part, h)
        loss_sum += loss
        parts.append(grad)
    assert loss_sum == pytest.approx(full_loss, rel=1e-5)
    np.testing.assert_allclose(np.concatenate(parts), full_grad, rtol=1e-6, atol=1e-8)


def test_k3_is_non_negative_and_zero_at_the_base() -> None:
    b, h = make_batch(), hyper()
    _, stats = ob.mispo_loss_numpy(**b, hyper=h)
    assert stats["kl"] > 0
    b["f"] = b["n"].copy()
    b["adv"] = np.zeros_like(b["adv"])
    loss, stats = ob.mispo_loss_numpy(**b, hyper=h)
    assert stats["kl"] == 0.0 and loss == 0.0
    x = np.linspace(-10, 10, 201)
    assert np.all(np.exp(x) - x - 1.0 >= 0.0)


def test_torch_accepts_bf16_policy_logprobs_and_tensor_stats() -> None:
    b, h = make_batch(), hyper()
    n = torch.tensor(b["n"]).to(torch.bfloat16).requires_grad_(True)
    loss, stats = ob.mispo_loss_torch(
        n, b["o"], b["f"], b["mask"], b["adv"], b["weight"], h, float_stats=False
    )
    loss.backward()
    assert loss.dtype == torch.float32
    assert n.grad is not None and n.grad.dtype == torch.bfloat16
    assert isinstance(stats["tokens"], torch.Tensor)
    assert float(stats["tokens"]) == b["mask"].sum()


def test_mlx_tensor_stats_option() -> None:
    b, h = make_batch(), hyper()
    consts = {k: b[k] for k in ("o", "f", "mask", "adv", "weight")}
    loss, stats = ob.mispo_loss_mlx(mx.array(b["n"]), **consts, hyper=h, float_stats=False)
    assert isinstance(stats["loss"], mx.array)
    assert stats["loss"].item() == pytest.approx(loss.item())


def test_shape_mismatch_is_refused() -> None:
    b, h = make_batch(), hyper()
    b["f"] = b["f"][:, :-1]
    with pytest.raises(ValueError, match="f has shape"):
        ob.mispo_loss_numpy(**b, hyper=h)
    with pytest.raises(ValueError, match="f has shape"):
        torch_loss(b, h)
    b = make_batch()
    b["adv"] = b["adv"][:-1]
    with pytest.raises(ValueError, match="adv has shape"):
        mlx_loss(b, h)


# ---- pure-python helpers -------------------------------------------------------------


def test_advantages_subtract_baseline_and_clip_without_normalising() -> None:
    assert ob.advantages([1, -1, 1], 0.0) == [1.0, -1.0, 1.0]
    assert ob.advantages([1, -1], 0.5) == [0.5, -1.5]
    # every reward above a very negative baseline clips at +2; no batch z-score
    assert ob.advantages([1, 1, -1], -5.0) == [2.0, 2.0, 2.0]
    assert ob.advantages([-1], 1.5, clip=2.0) == [-2.0]
    assert ob.advantages([1, -1], 0.0, clip=0.5) == [0.5, -0.5]
    # all-good batch keeps its positive sign (z-normalising would zero it)
    assert ob.advantages([1, 1, 1], -0.2) == pytest.approx([1.2, 1.2, 1.2])
    with pytest.raises(ValueError):
        ob.advantages([1], 0.0, clip=0.0)


def test_a_graded_rating_keeps_its_sign_whatever_the_baseline() -> None:
    """Regression: as ``r - b``, a 2/5 (reward -0.5) under a baseline of -0.578 (80% of
    ratings bad) got +0.078 and was trained as good, with the bad class's weight."""
    assert ob.advantages([-0.5, 0.5], -0.578) == pytest.approx([-0.211, 0.789])
    for b in [x / 20 for x in range(-19, 20)]:
        for r in (-1.0, -0.5, 0.5, 1.0):
            (a,) = ob.advantages([r], b)
            assert a * r > 0, (r, b, a)
    assert ob.advantages([1, -1], 0.3) == ob.advantages([1.0, -1.0], 0.3) == [0.7, -1.3]


def test_class_weights_balance_classes_with_mean_one() -> None:
    ratings = [-1, -1, -1, -1, -1, -1, -1, 1, 1, -1]
    w = ob.class_weights(ratings)
    pos = sum(x for x, r in zip(w, ratings, strict=True) if r > 0)
    neg = sum(x for x, r in zip(w, ratings, strict=True) if r < 0)
    assert pos / neg == pytest.approx(1.0)
    assert 3 / 4 <= pos / neg <= 4 / 3
    assert sum(w) / len(w) == pytest.approx(1.0)
    assert w[7] == pytest.approx(10 / 4) and w[0] == pytest.approx(10 / 16)


def test_class_weights_single_class_and_empty() -> None:
    assert ob.class_weights([-1, -1, -1]) == [1.0, 1.0, 1.0]
    assert ob.class_weights([1]) == [1.0]
    assert ob.class_weights([]) == []
    with pytest.raises(ValueError, match="positive"):
        ob.class_weights([1, 0])


def test_step_weights_sum_to_one() -> None:
    w = ob.step_weights([0.5, 1.5, 2.0])
    assert sum(w) == pytest.approx(1.0) and w[2] == pytest.approx(0.5)
    assert ob.step_weights([]) == []
    with pytest.raises(ValueError):
        ob.step_weights([0.0, 0.0])


def test_ema_update_folds_rewards_in_time_order() -> None:
    assert ob.ema_update(0.0, [1.0]) == pytest.approx(0.01)
    b = ob.ema_update(0.0, [1, -1, 1], decay=0.5)
    assert b == pytest.approx(((0.5 * 0.5 + -0.5) * 0.5) + 0.5)  # 0 -> .5 -> -.25 -> .375
    assert b == pytest.approx(0.375)
    # order matters: the newest reward weighs most
    assert ob.ema_update(0.0, [-1, 1], 0.5) > ob.ema_update(0.0, [1, -1], 0.5)
    assert ob.ema_update(0.3, []) == 0.3
    many = ob.ema_update(0.0, [1.0] * 2000)
    assert many == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError):
        ob.ema_update(0.0, [1.0], decay=1.5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torch_loss_on_cuda_matches_cpu_with_numpy_constants() -> None:
    b, h = make_batch(), hyper()
    cpu_loss, cpu_stats, cpu_grad = torch_loss(b, h)
    n = torch.tensor(b["n"], device="cuda", requires_grad=True)
    loss, stats = ob.mispo_loss_torch(n, b["o"], b["f"], b["mask"], b["adv"], b["weight"], h)
    loss.backward()
    assert loss.item() == pytest.approx(cpu_loss, rel=1e-5)
    assert stats["masked_tokens"] == pytest.approx(cpu_stats["masked_tokens"])
    np.testing.assert_allclose(n.grad.cpu().numpy(), cpu_grad, atol=1e-6)


def test_k3_is_bounded_far_below_the_base_and_exact_near_it() -> None:
    """A token pushed 100 nats below the base: finite loss, a bounded pull (the
    held-out aggressive run saw k3 95,412 and gradient norm 88,815 unbounded)."""
    h = hyper(beta=1.0)
    n = np.array([[-1.0, -101.0, -1.0]], np.float32)
    f = np.array([[-1.5, -1.0, -1.0]], np.float32)
    args = (n, f, np.ones_like(n), np.ones(1, np.float32), np.ones(1, np.float32), h)
    loss, stats, grad = torch_loss({"n": n, "o": n.copy(), "f": f, "mask": args[2],
                                    "adv": np.zeros(1, np.float32), "weight": args[4]}, h)
    slope = math.expm1(ob.K3_LINEAR_FROM)
    exact_near = math.exp(-0.5) + 0.5 - 1.0  # token 0: x = f - n = -0.5, below the bound
    tangent = math.exp(4.0) - 4.0 - 1.0 + slope * (100.0 - 4.0)
    assert stats["kl"] == pytest.approx((exact_near + tangent) / 3, rel=1e-5)
    assert np.isfinite(loss) and abs(grad[0, 1]) == pytest.approx(slope / 3, rel=1e-5)
    assert grad[0, 0] == pytest.approx(-(math.exp(-0.5) - 1.0) / 3, rel=1e-5)
    m_loss, _, m_grad = mlx_loss({"n": n, "o": n.copy(), "f": f, "mask": args[2],
                                        "adv": np.zeros(1, np.float32), "weight": args[4]}, h)
    assert m_loss == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(m_grad, grad, rtol=1e-5)
    np_loss, _ = ob.mispo_loss_numpy(n, n, f, np.ones_like(n), np.zeros(1), np.ones(1), h)
    assert np_loss == pytest.approx(loss, rel=1e-5)
    assert ob.k3_bounded_numpy(np.array([0.0]))[0] == 0.0


def test_class_weights_balance_push_not_counts_with_the_baseline() -> None:
    """Balanced classes, baseline -0.5: the old count weights pushed good 3:1 over bad."""
    ratings = [1, -1] * 5
    adv = ob.advantages(ratings, -0.5)
    old = ob.class_weights(ratings)
    assert ob.push_ratio(ratings, adv, old) == pytest.approx(3.0)  # the finding
    w = ob.class_weights(ratings, adv)
    assert ob.push_ratio(ratings, adv, w) == pytest.approx(1.0)
    assert sum(wi * abs(a) for wi, a in zip(w, adv, strict=True)) == pytest.approx(
        sum(abs(a) for a in adv))  # overall step size kept
    for ratings, b in (([1] + [-1] * 9, -0.8), ([1] * 7 + [-1] * 2, 0.6), ([1, -1], 0.0)):
        adv = ob.advantages(ratings, b)
        ratio = ob.push_ratio(ratings, adv, ob.class_weights(ratings, adv))
        assert 3 / 4 <= ratio <= 4 / 3
    assert ob.class_weights([-1, -1], ob.advantages([-1, -1], -0.5)) == [1.0, 1.0]
    # a class with zero push (b = 1, good ones have A = 0) falls back to count balance
    assert ob.class_weights([1, -1, -1], [0.0, -2.0, -2.0]) == ob.class_weights([1, -1, -1])


# ---- the objective handed to train() ------------------------------------------------


def test_mispo_is_the_default_objective_and_leaves_the_hyper_as_it_is() -> None:
    import inspect

    from rltray.trainer import train as train_mod
    from rltray.trainer.presets import Hyper

    hyper = Hyper()
    assert ob.MISPO.loss_hyper(hyper) is hyper  # MIS-PO rounds see the job's Hyper itself
    assert inspect.signature(train_mod.train).parameters["objective"].default is ob.MISPO
    assert ob.OBJECTIVES == {"mispo": ob.MISPO, "reinforce": ob.REINFORCE}


def test_reinforce_masks_no_token_gates_no_example_and_has_no_kl_term() -> None:
    from rltray.trainer.presets import Hyper

    hyper = Hyper()
    opened = ob.REINFORCE.loss_hyper(hyper)
    assert (opened.rho_lo, opened.rho_hi, opened.beta) == (0.0, 1e9, 0.0)
    assert (opened.delta_lo, opened.delta_hi) == (-1e9, 1e9)
    assert opened.lr == hyper.lr and hyper.beta > 0  # only the loss's fields change
    # Far off-policy tokens (rho = e^3 and e^-3) and a large drift in both directions:
    # MIS-PO masks and gates them, REINFORCE pushes every token with rho * A.
    n = np.array([[0.0, -1.0, -2.0], [-3.0, -1.0, 0.0]])
    o = n - np.array([[3.0, -3.0, 0.0], [0.0, 3.0, -3.0]])
    f = n - 2.5
    mask = np.ones_like(n)
    adv, weight = np.array([1.0, -1.0]), np.array([0.5, 0.5])
    _, mispo = ob.mispo_loss_numpy(n, o, f, mask, adv, weight, hyper)
    loss, plain = ob.mispo_loss_numpy(n, o, f, mask, adv, weight, opened)
    assert mispo["masked_tokens"] > 0 and mispo["gated_examples"] > 0
    assert plain["masked_tokens"] == 0 and plain["gated_examples"] == 0
    rho = np.exp(n - o)
    expected = 0.5 * (-rho[0].mean() * 1.0) + 0.5 * (-rho[1].mean() * -1.0)
    assert loss == pytest.approx(expected)  # the surrogate alone: no KL term
