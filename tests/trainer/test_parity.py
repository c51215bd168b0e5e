"""torch (Transformers + PEFT) and MLX backends compute the same numbers.

Both backends load the same tiny Llama folder and the same LoRA weights (an MLX
adapter with nonzero ``B``, written as a PEFT folder and loaded by both as the
parent adapter: that also exercises the name/transpose/alpha conversion), then
see the same right-padded batch.

Tolerances, all in fp32 on CPU (measured values in the comments):

* base and policy log-probs: ``atol 1e-5`` nats (observed max ≈ 1e-6);
* MIS-PO loss and every stat: ``rtol 1e-4, atol 1e-5`` (observed ≈ 3e-7 relative);
* every LoRA gradient, divided by the global gradient norm: ``rtol 1e-4,
  atol 1e-5`` (observed max |Δ| ≈ 1.2e-7 of the norm, 1.4e-6 of a tensor's max);
* LoRA weights after one clipped, bias-corrected AdamW step: ``atol 1e-3 · lr``
  (observed ≈ 1.6e-4 · lr) — Adam divides by |g|, so tiny gradients amplify
  float noise; the bound is still 1000x below the step itself.

The differences come from float32 summation order (matmul kernels, logsumexp),
not from any difference in the maths.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'rltray[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install 'rltray[mlx]')")
torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'rltray[torch]')")
pytest.importorskip("peft", reason="peft is not installed (pip install 'rltray[torch]')")

from rltray.trainer import adapters  # noqa: E402
from rltray.trainer.backends.mlx import MlxBackend  # noqa: E402

pytestmark = pytest.mark.ml

TEXTS = [
    "def add(a, b): return a + b",
    "the test fails because the fixture is missing",
    "good answer: use a context manager",
    "bad: retry forever",
]
LR = 1e-3


def make_hyper(**over: Any) -> SimpleNamespace:
    values: dict[str, Any] = dict(
        rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear", lr=LR,
        warmup_steps=0, weight_decay=0.0, grad_clip=1.0, max_seq_len=64, batch_size=4,
        rho_lo=0.8, rho_hi=1.25, delta_lo=-0.05, delta_hi=0.05, beta=0.05,
    )  # fmt: skip
    values.update(over)
    return SimpleNamespace(**values)


def make_job(model: Path, parent: Path | None) -> SimpleNamespace:
    return SimpleNamespace(
        base_model=str(model), revision=None, parent_adapter=str(parent) if parent else None,
        seed=0, trust_remote_code=False, device="cpu",
    )  # fmt: skip


def make_batch(tokenizer: Any) -> SimpleNamespace:
    rows = [list(tokenizer(t)["input_ids"]) for t in TEXTS]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = np.full((len(rows), width), pad, dtype=np.int64)
    attn = np.zeros_like(ids)
    resp = np.zeros(ids.shape, dtype=np.float32)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        attn[i, : len(r)] = 1
        resp[i, max(1, len(r) // 3) : len(r)] = 1.0
    pos = np.tile(np.arange(width, dtype=np.int64), (len(rows), 1))
    return SimpleNamespace(
        input_ids=ids, attention_mask=attn, response_mask=resp, position_ids=pos,
        example_idx=list(range(len(rows))),
    )  # fmt: skip


@pytest.fixture(scope="module")
def pair(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """(torch backend, mlx backend) holding the same base and the same nonzero LoRA."""
    torch_peft = pytest.importorskip(
        "rltray.trainer.backends.torch_peft", reason="the torch backend has not landed"
    )
    seed_backend = MlxBackend(make_job(tiny_model_dir, None), make_hyper())
    seed_backend.load()
    rng = np.random.default_rng(3)
    for layer in seed_backend.lora.values():
        layer.lora_b = mx.array(rng.normal(0, 0.05, layer.lora_b.shape).astype(np.float32))
    folder = adapters.write_adapter(
        tmp_path_factory.mktemp("parity") / "parent", seed_backend.lora_state(),
        rank=4, alpha=8.0, base_model=str(tiny_model_dir),
    )  # fmt: skip

    tb = torch_peft.TorchPeftBackend(make_job(tiny_model_dir, folder), make_hyper())
    tb.load()
    mb = MlxBackend(make_job(tiny_model_dir, folder), make_hyper())
    mb.load()
    return tb, mb


def torch_lora_grads(backend: Any) -> dict[str, np.ndarray]:
    """PEFT name -> accumulated gradient of the torch backend's LoRA parameters."""
    out = {}
    for name, p in backend.model.named_parameters():
        if (".lora_A." in name or ".lora_B." in name) and p.grad is not None:
            out[name.replace(".default.", ".")] = p.grad.detach().float().cpu().numpy()
    return out


def test_same_base_and_policy_logprobs(pair: tuple[Any, Any]) -> None:
    tb, mb = pair
    batch = make_batch(mb.tokenizer)
    assert tb.tokenizer(TEXTS[0])["input_ids"] == mb.tokenizer(TEXTS[0])["input_ids"]
    valid = batch.attention_mask[:, 1:] > 0
    for adapter in (False, True):
        t = tb.logprobs(batch, adapter=adapter)
        m = mb.logprobs(batch, adapter=adapter)
        assert t.shape == m.shape
        assert np.abs(t - m)[valid].max() <= 1e-5, adapter
    drift = np.abs(tb.logprobs(batch, adapter=True) - tb.logprobs(batch, adapter=False))
    assert drift[valid].max() > 1e-3  # the shared LoRA really changes the model


def test_drift_sums_give_the_policy_logprobs_from_their_own_forward(
    pair: tuple[Any, Any]
) -> None:
    """The gate's held-out scores come from the drift forward: the same numbers as
    ``logprobs(adapter=True)``, and asking for them leaves the KL sums unchanged."""
    batch = make_batch(pair[1].tokenizer)
    valid = batch.attention_mask[:, 1:] > 0
    for backend in pair:
        plain = backend.drift_sums(batch, None)
        both = backend.drift_sums(batch, None, logprobs=True)
        assert "logprobs" not in plain
        assert {k: both[k] for k in plain} == pytest.approx(plain, rel=1e-6)
        want = backend.logprobs(batch, adapter=True)
        assert both["logprobs"].shape == want.shape
        assert np.abs(both["logprobs"] - want)[valid].max() <= 1e-6, backend.name


def test_kept_reference_logits_give_the_same_drift_as_fresh_forwards(
    pair: tuple[Any, Any]
) -> None:
    """The round start keeps the base's and the parent's logits of the drift turns; after
    the policy moved, drift from them equals drift from fresh forwards (both backends)."""
    from rltray.trainer.backends.reference_logits import ReferenceLogits

    batch = make_batch(pair[1].tokenizer)
    rows = [batch.input_ids[r, : int(n)] for r, n in enumerate(batch.attention_mask.sum(1))]
    for backend in pair:
        parent = adapters.load_adapter_tensors(backend.job.parent_adapter)
        start = backend.lora_state()
        backend.set_lora_state(parent)
        backend.reference = store = ReferenceLogits()
        assert backend.reference_width < backend.vocab_size  # hidden states, not logits
        store.want(rows, ["base", "parent"], backend.reference_width)
        store.parent_loaded = True  # the round start, as train() marks it
        backend.logprobs(batch, adapter=False)
        backend.logprobs(batch, adapter=True)
        store.parent_loaded = False
        assert store.kept == 2 * len(rows)
        moved = {k: v * 1.5 for k, v in parent.items()}
        try:
            backend.set_lora_state(moved)
            kept = backend.drift_sums(batch, parent)
            assert store.hits == 2  # base and parent both from the kept rows
            backend.reference = ReferenceLogits()
            fresh = backend.drift_sums(batch, parent)
        finally:
            backend.set_lora_state(start)
            backend.reference = ReferenceLogits()
        assert fresh["resp_round"] > 0
        assert kept == pytest.approx(fresh, rel=1e-5), backend.name


def test_drift_from_hidden_states_equals_drift_from_the_whole_models_logits(
    pair: tuple[Any, Any]
) -> None:
    """Drift and log-probs from the last hidden state and the head, a few positions at a
    time (what the store keeps), equal the same numbers from the whole model's logits
    (the path a model without that split takes), on both backends."""
    batch = make_batch(pair[1].tokenizer)
    valid = batch.attention_mask[:, 1:] > 0
    for backend in pair:
        parent = adapters.load_adapter_tensors(backend.job.parent_adapter)
        start = backend.lora_state()
        split = backend._split
        try:
            backend.set_lora_state({k: v * 1.5 for k, v in parent.items()})
            by_head = backend.drift_sums(batch, parent, logprobs=True)
            lp_head = backend.logprobs(batch, adapter=True)
            backend._split = None  # the whole model's logits
            assert backend.reference_width == backend.vocab_size
            whole = backend.drift_sums(batch, parent, logprobs=True)
            lp_whole = backend.logprobs(batch, adapter=True)
        finally:
            backend._split = split
            backend.set_lora_state(start)
        assert by_head["resp_round"] > 0
        for k in ("resp_round", "resp_total", "prompt_round", "prompt_total"):
            assert by_head[k] == pytest.approx(whole[k], rel=1e-4, abs=1e-7), (backend.name, k)
        assert by_head["resp_count"] == whole["resp_count"]
        assert np.abs(by_head["logprobs"] - whole["logprobs"])[valid].max() <= 1e-5
        assert np.abs(lp_head - lp_whole)[valid].max() <= 1e-5, backend.name


def test_same_loss_gradients_and_adamw_step(pair: tuple[Any, Any]) -> None:
    tb, mb = pair
    batch = make_batch(mb.tokenizer)
    f = tb.logprobs(batch, adapter=False)
    n = tb.logprobs(batch, adapter=True)
    # o a little off the policy so both token-band edges and the KL term are active
    rng = np.random.default_rng(0)
    o = (n + rng.normal(0, 0.15, n.shape)).astype(np.float32)
    adv = np.array([1.5, -1.0, 0.5, -2.0], dtype=np.float32)
    weight = np.array([0.4, 0.2, 0.3, 0.1], dtype=np.float32)

    ts = tb.accumulate(batch, o, f, adv, weight)
    ms = mb.accumulate(batch, o, f, adv, weight)
    assert 0 < ms["masked_tokens"] < 1  # the band really masks some tokens
    for key in ts:
        assert ms[key] == pytest.approx(ts[key], rel=1e-4, abs=1e-5), key

    tg, mg = torch_lora_grads(tb), mb.lora_gradients()
    assert tg.keys() == mg.keys() and len(tg) == 2 * len(mb.lora)
    norm = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in tg.values()))
    assert norm > 0
    for name, g in tg.items():
        np.testing.assert_allclose(mg[name] / norm, g / norm, rtol=1e-4, atol=1e-5, err_msg=name)

    before = mb.lora_state()
    t_out, m_out = tb.step(), mb.step()
    assert m_out["grad_norm"] == pytest.approx(t_out["grad_norm"], rel=1e-4)
    assert m_out["lr"] == pytest.approx(t_out["lr"])
    t_after, m_after = tb.lora_state(), mb.lora_state()
    moved = max(float(np.abs(m_after[k] - before[k]).max()) for k in before)
    assert moved == pytest.approx(LR, rel=1e-2)  # bias-corrected first step: ±lr
    for name in t_after:
        np.testing.assert_allclose(m_after[name], t_after[name], rtol=0, atol=1e-3 * LR)


def test_a_drift_estimate_from_every_fourth_position_is_within_its_stated_error(
    pair: tuple[Any, Any]
) -> None:
    """``DriftSet.estimate`` takes the KL at every fourth position only; the exact drift
    of the same turns lies within its stated bound (estimate + 3 standard errors), and
    the estimate is left where the gate would reuse a measurement (``last`` is None)."""
    from rltray.trainer import data
    from rltray.trainer.drift import DriftSet
    from rltray.trainer.job import example_from_dict

    words = " ".join(TEXTS)
    enc = {}
    for i in range(4):
        ex = example_from_dict({"id": f"e{i}", "rated_at": "2026-01-01T00:00:00Z",
                                "prompt": f"{i} please explain: " + words,
                                "response": words + f" and {i} more " + words,
                                "rating": 1 - 2 * (i % 2)})
        enc[i] = data.encode(pair[1].tokenizer, ex, 512, index=i)
    hyper = make_hyper(batch_size=4)
    for backend in pair:
        parent = adapters.load_adapter_tensors(backend.job.parent_adapter)
        start = backend.lora_state()
        ds = DriftSet(enc, [0, 1, 2, 3], "held-out", parent, ratings={0: 1, 1: -1, 2: 1, 3: -1})
        try:
            backend.set_lora_state({k: v * 1.5 for k, v in parent.items()})
            exact = ds.measure(backend, hyper, 0)
            got = ds.estimate(backend, hyper, 0)
        finally:
            backend.set_lora_state(start)
        assert got is not None and ds.last is None
        drift, upper = got
        for k, v in exact.items():
            assert v > 0 and drift[k] != v, (backend.name, k)  # a sample, not the whole
            assert abs(drift[k] - v) <= upper[k] - drift[k], (backend.name, k, drift[k], v)
