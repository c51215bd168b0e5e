"""Evaluation: AUROC, implicit reward, exact KL (torch / MLX / numpy), sanity, the gate."""

from __future__ import annotations

import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from rltray.trainer import evaluate as ev
from rltray.trainer import preference

torch = pytest.importorskip("torch", reason="torch is needed for the torch KL helper")
mx = pytest.importorskip("mlx.core", reason="mlx is needed for the MLX KL helper")

HYPER = SimpleNamespace(auroc_tolerance=0.05, kl_cap=0.05, kl_cap_total=0.2,
                        gate_profile="standard")


def test_import_pulls_no_tensor_library() -> None:
    code = (
        "import sys, rltray.trainer.evaluate;"
        "bad = [m for m in ('torch', 'mlx', 'numpy') if m in sys.modules];"
        "sys.exit(repr(bad) if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ---- AUROC ---------------------------------------------------------------------------


def brute_auroc(scores: list[float], labels: list[int]) -> float:
    pos = [s for s, y in zip(scores, labels, strict=True) if y > 0]
    neg = [s for s, y in zip(scores, labels, strict=True) if y <= 0]
    wins = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def test_auroc_known_values() -> None:
    assert preference.auroc([0.9, 0.8, 0.1, 0.2], [1, 1, -1, -1]) == 1.0
    assert preference.auroc([0.1, 0.2, 0.9, 0.8], [1, 1, -1, -1]) == 0.0
    assert preference.auroc([0.5, 0.5, 0.5], [1, -1, -1]) == 0.5  # constant scorer
    # one of four pairs inverted
    assert preference.auroc([0.9, 0.3, 0.4, 0.1], [1, 1, -1, -1]) == pytest.approx(0.75)
    # ties across classes count a half: pairs (2>1 win, 2=2 half, 3>1, 3>2) -> 3.5/4
    assert preference.auroc([2.0, 3.0, 1.0, 2.0], [1, 1, 0, 0]) == pytest.approx(0.875)
    assert preference.auroc([1.0, 0.0], [True, False]) == 1.0


def test_auroc_matches_brute_force_with_many_ties() -> None:
    rng = np.random.default_rng(4)
    scores = rng.integers(0, 5, 60).astype(float).tolist()
    labels = rng.choice([1, -1], 60).tolist()
    assert preference.auroc(scores, labels) == pytest.approx(brute_auroc(scores, labels))


def test_auroc_drops_none_and_nan() -> None:
    assert preference.auroc([0.9, None, float("nan"), 0.1, 0.5], [1, 1, -1, -1, None]) == 1.0


def test_auroc_missing_class_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="both classes, got 2 positive and 0 negative"):
        preference.auroc([0.3, 0.4, 0.2], [1, 1, None])
    with pytest.raises(ValueError, match="one label per score"):
        preference.auroc([0.3], [1, -1])


def test_implicit_reward_is_the_masked_mean_drift() -> None:
    n = np.array([[-1.0, -2.0, -3.0], [-1.0, 99.0, -5.0], [0.0, 0.0, 0.0]])
    f = np.array([[-2.0, -2.0, -2.0], [-1.5, -1.0, -1.0], [0.0, 0.0, 0.0]])
    mask = np.array([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    r = ev.implicit_reward(n, f, mask)
    assert r[0] == pytest.approx(0.0) and r[1] == pytest.approx(0.5)
    assert math.isnan(r[2])
    with pytest.raises(ValueError):
        ev.implicit_reward(n, f[:, :2], mask)


# ---- exact KL ------------------------------------------------------------------------


def logits_pair(seed: int = 0, b: int = 3, length: int = 6, v: int = 50):
    rng = np.random.default_rng(seed)
    zq = rng.normal(0, 2.0, (b, length, v)).astype(np.float32)
    zp = (zq + rng.normal(0, 0.5, (b, length, v))).astype(np.float32)
    mask = np.ones((b, length), np.float32)
    mask[1, -2:] = 0.0
    zp[1, -2:] = 1e4  # padding positions must not count
    return zp, zq, mask


def test_numpy_kl_matches_a_direct_sum() -> None:
    zp, zq, mask = logits_pair()
    zp, zq = zp.astype(np.float64), zq.astype(np.float64)
    p = np.exp(zp[0, 0] - zp[0, 0].max())
    p /= p.sum()
    q = np.exp(zq[0, 0] - zq[0, 0].max())
    q /= q.sum()
    one = np.zeros_like(mask)
    one[0, 0] = 1.0
    assert ev.kl_per_token_numpy(zp, zq, one) == pytest.approx(float((p * np.log(p / q)).sum()))


def test_torch_and_mlx_kl_equal_numpy_reference() -> None:
    zp, zq, mask = logits_pair()
    ref = ev.kl_per_token_numpy(zp, zq, mask)
    assert ref > 0.01
    t = ev.kl_per_token_torch(torch.tensor(zp), torch.tensor(zq), torch.tensor(mask))
    m = ev.kl_per_token_mlx(mx.array(zp), mx.array(zq), mask)
    assert t == pytest.approx(ref, rel=1e-5)
    assert m == pytest.approx(ref, rel=1e-5)
    total, count = ev.kl_sum_torch(torch.tensor(zp), torch.tensor(zq), mask)
    assert count == mask.sum() and total / count == pytest.approx(ref, rel=1e-5)


def test_kl_is_zero_for_identical_logits_and_shift_invariant() -> None:
    _, zq, mask = logits_pair(1)
    assert ev.kl_per_token_numpy(zq, zq, mask) == 0.0
    assert ev.kl_per_token_torch(torch.tensor(zq), torch.tensor(zq + 7.0), mask) < 1e-6
    assert ev.kl_per_token_mlx(mx.array(zq), mx.array(zq), mask) == 0.0


def test_kl_is_stable_for_large_logits_and_masked_vocab() -> None:
    zp, zq, mask = logits_pair(2)
    zp, zq = zp * 200.0, zq * 200.0  # naive softmax overflows
    zp[:, :, 0] = -np.inf  # a vocabulary entry the policy can never emit
    t = ev.kl_per_token_torch(torch.tensor(zp), torch.tensor(zq), mask)
    m = ev.kl_per_token_mlx(mx.array(zp), mx.array(zq), mask)
    ref = ev.kl_per_token_numpy(zp, zq, mask)
    assert math.isfinite(ref) and ref > 0
    assert t == pytest.approx(ref, rel=1e-4) and m == pytest.approx(ref, rel=1e-4)


def test_kl_shape_mismatch_and_empty_mask() -> None:
    zp, zq, mask = logits_pair()
    with pytest.raises(ValueError, match=r"\(B, L, V\)"):
        ev.kl_per_token_torch(torch.tensor(zp), torch.tensor(zq[:, :, :-1]), mask)
    assert ev.kl_per_token_mlx(mx.array(zp), mx.array(zq), np.zeros_like(mask)) == 0.0


# ---- sanity --------------------------------------------------------------------------


def test_tensor_sanity_reports_every_problem_at_once() -> None:
    state = {
        "a.lora_A.weight": np.array([[1.0, np.nan], [np.inf, 0.0]], np.float32),
        "b.lora_A.weight": np.zeros((2, 3), np.float32),
        "stray": np.zeros(1, np.float32),
    }
    expected = {"a.lora_A.weight": (2, 2), "b.lora_A.weight": (2, 4), "c.lora_B.weight": (4, 2)}
    errors = ev.tensor_sanity_errors(state, expected, scale=None)
    text = "\n".join(errors)
    assert "a.lora_A.weight has 2 non-finite values out of 4" in text
    assert "b.lora_A.weight has shape (2, 3), the base model needs (2, 4)" in text
    assert "c.lora_B.weight is missing" in text
    assert "stray matches no module" in text
    assert "scale" in text
    assert len(errors) == 5
    good = {"a": np.zeros((2, 2), np.float32)}
    assert ev.tensor_sanity_errors(good, {"a": (2, 2)}, scale=2.0) == []


# ---- gate ----------------------------------------------------------------------------


#: 6 good and 9 bad held-out answers: the parent's per-answer rewards, and a new
#: adapter whose change moves them a little, unrelated to the rating.
LABELS = [1] * 6 + [-1] * 9
PARENT = [0.3, 0.1, 0.4, -0.1, 0.2, 0.5, -0.2, 0.0, -0.3, 0.1, -0.4, -0.1, 0.2, -0.5, 0.0]
NOISE = [0.01, -0.02, 0.03, -0.01, 0.02, -0.03, 0.02, -0.01, 0.01, -0.02, 0.03, 0.0, -0.03,
         0.01, -0.01]


def good_metrics(**kw: object) -> dict[str, object]:
    m: dict[str, object] = {
        "heldout_scores_new": [p + d for p, d in zip(PARENT, NOISE, strict=True)],
        "heldout_scores_parent": PARENT,
        "heldout_labels": LABELS,
        "heldout_good": 6,
        "heldout_bad": 9,
        "kl_round": 0.01,
        "kl_total": 0.03,
        "kl_round_general": 0.002,
        "kl_total_general": 0.004,
        "sanity_errors": [],
    }
    m.update(kw)
    return m


def shifted(labels: list[int], gap: float, parent: list[float] | None = None) -> list[float]:
    """New rewards: the parent's (or 0) plus ``gap`` for good answers, a little noise."""
    base = parent or [0.0] * len(labels)
    return [b + (gap if y > 0 else 0.0) + 0.001 * ((7 * i) % 5 - 2)
            for i, (b, y) in enumerate(zip(base, labels, strict=True))]


def test_gate_accepts_a_good_adapter_and_says_what_the_preference_shows() -> None:
    v = ev.gate(good_metrics(), HYPER)
    assert v.accept and v.reasons == []
    assert v.metrics["preference"] == "unchanged"  # a change unrelated to the ratings
    assert "not measurably worse" in v.notes[0]
    v = ev.gate(good_metrics(heldout_scores_new=shifted(LABELS, 0.5, PARENT)), HYPER)
    assert v.accept and v.metrics["preference"] == "better"
    assert v.notes[0].endswith("measurably better")


def test_gate_rejects_a_measurably_worse_change() -> None:
    v = ev.gate(good_metrics(heldout_scores_new=shifted(LABELS, -0.5, PARENT)), HYPER)
    assert not v.accept and v.metrics["preference"] == "worse"
    assert v.reasons[0].startswith("held-out AUROC ")
    assert "measurably worse, beyond the 0.05 tolerance" in v.reasons[0]


def test_gate_rejects_drift_per_round_and_in_total() -> None:
    v = ev.gate(good_metrics(kl_round=0.125), HYPER)
    assert not v.accept
    assert v.reasons == ["mean per-token KL to the parent on the held-out answers is 0.125 "
                         "nats, above the 0.05 cap (kl_cap)"]
    v = ev.gate(good_metrics(kl_total=0.3), HYPER)
    assert v.reasons == ["mean per-token KL to the base model on the held-out answers is 0.3 "
                         "nats, above the 0.2 cap (kl_cap_total)"]
    v = ev.gate(good_metrics(kl_round_general=0.06), HYPER)
    assert not v.accept and "on the prompt text" in v.reasons[0]
    for missing in (None, float("nan"), float("inf")):
        v = ev.gate(good_metrics(kl_round=missing), HYPER)
        assert not v.accept and "not measured" in v.reasons[0]
    assert ev.gate(good_metrics(kl_round=0.05, kl_total=0.2), HYPER).accept  # at the caps


def test_gate_round_cap_lets_a_long_lived_user_keep_publishing() -> None:
    """Five rounds of the same small drift: the base KL grows, the per-round KL does not.

    The old gate capped only the KL to the base and locked out at about round 5.
    """
    for rnd in range(1, 6):
        v = ev.gate(good_metrics(kl_round=0.02, kl_total=0.02 * rnd), HYPER)
        assert v.accept, (rnd, v.reasons)


def test_gate_rejects_sanity_errors_and_lists_every_reason() -> None:
    v = ev.gate(
        good_metrics(
            sanity_errors=["tensor x has 3 non-finite values out of 8", "scale missing"],
            kl_round=1.0,
            kl_total=1.0,
        ),
        HYPER,
    )
    assert not v.accept
    assert len(v.reasons) == 4
    assert v.reasons[0] == "adapter sanity check failed: tensor x has 3 non-finite values out of 8"


def test_gate_with_too_few_heldout_of_a_class_decides_on_drift_and_sanity() -> None:
    labels = [1] * 3 + [-1] * 9
    v = ev.gate(good_metrics(heldout_scores_new=shifted(labels, -1.0), heldout_labels=labels,
                             heldout_scores_parent=None), HYPER)
    assert v.accept and v.metrics["preference"] == "unmeasured"
    assert v.notes[0] == (
        "too few held-out ratings to judge the preference (3 good, 9 bad; 4 of each needed): "
        "decided on drift and sanity alone"
    )
    v = ev.gate(good_metrics(heldout_labels=labels, kl_round=0.5,
                             heldout_scores_new=[0.0] * 12, heldout_scores_parent=None), HYPER)
    assert not v.accept and "KL to the parent" in v.reasons[0]  # drift still decides


def test_gate_tiny_test_profile_is_explicit_and_keeps_drift() -> None:
    tiny = SimpleNamespace(**{**vars(HYPER), "gate_profile": "tiny-test"})
    v = ev.gate(good_metrics(heldout_scores_new=shifted(LABELS, -5.0, PARENT)), tiny)
    assert v.accept and "gate profile 'tiny-test'" in v.notes[0]
    assert not ev.gate(good_metrics(kl_round=0.5), tiny).accept


def test_gate_without_parent_scores_compares_with_the_base() -> None:
    v = ev.gate(good_metrics(heldout_scores_parent=None,
                             heldout_scores_new=shifted(LABELS, 1.0)), HYPER)
    assert v.accept and v.notes[0].startswith("held-out AUROC 0.500 -> 1.000")
    v = ev.gate(good_metrics(heldout_scores_new=None), HYPER)
    assert v.accept and "not computed" in v.notes[0]


# ---- neutral texts -------------------------------------------------------------------


def test_neutral_texts_are_bundled() -> None:
    texts = ev.load_neutral_texts()
    assert 15 <= len(texts) <= 40
    assert all(t.strip() == t.strip("\n").strip() and t for t in texts)
    assert any("def " in t for t in texts)  # some code, not only prose
    assert all(len(t) < 2000 for t in texts)
