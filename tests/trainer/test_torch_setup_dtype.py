"""``RLTRAY_TRAINER_BF16=weights``: a CPU base stored in bf16, LoRA and AdamW in fp32.

Why: autocast re-casts frozen fp32 weights at every matmul and fp32 weights take
4 bytes per parameter (``torch_setup.cpu_dtype``). The option must keep what makes
bf16 safe to train with: trainable LoRA weights in fp32, log-probs near fp32's,
and an optimizer step that moves them. The model is tiny: bf16 emulated on a CPU
without native bf16 is slow but correct.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from rltray.trainer.backends import torch_setup  # noqa: E402
from rltray.trainer.backends.torch_peft import TorchPeftBackend  # noqa: E402

pytestmark = pytest.mark.ml

TEXTS = ["def add(a, b): return a + b", "the test fails because the fixture is missing"]


def _backend(model: Path) -> TorchPeftBackend:
    hyper = SimpleNamespace(
        rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear", lr=1e-2, warmup_steps=0,
        weight_decay=0.0, grad_clip=1.0, max_seq_len=64, batch_size=2, rho_lo=0.5, rho_hi=2.0,
        delta_lo=-1e9, delta_hi=1e9, beta=0.01,
    )  # fmt: skip
    job = SimpleNamespace(base_model=str(model), revision=None, parent_adapter=None, seed=0,
                          trust_remote_code=False, device="cpu")
    backend = TorchPeftBackend(job, hyper)
    backend.load()
    return backend


def _batch(tok: object) -> SimpleNamespace:
    rows = [list(tok(t)["input_ids"]) for t in TEXTS]  # type: ignore[operator]
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int64)
    attn = np.zeros_like(ids)
    resp = np.zeros((len(rows), width), np.float32)
    for i, r in enumerate(rows):
        ids[i, : len(r)], attn[i, : len(r)], resp[i, len(r) // 2 : len(r)] = r, 1, 1.0
    pos = np.where(attn > 0, np.cumsum(attn, axis=1) - 1, 0)
    return SimpleNamespace(input_ids=ids, attention_mask=attn, response_mask=resp,
                           position_ids=pos, example_idx=[0, 1])


def test_the_dtype_follows_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    for value, dtype in (("weights", torch.bfloat16), ("WEIGHTS", torch.bfloat16),
                         ("auto", torch.float32), ("1", torch.float32), ("0", torch.float32)):
        monkeypatch.setenv("RLTRAY_TRAINER_BF16", value)
        assert torch_setup.choose_device("cpu") == (cpu, dtype)
    monkeypatch.setenv("RLTRAY_TRAINER_BF16", "weights")
    assert torch_setup.cpu_autocast(cpu, torch.bfloat16) is False  # no autocast over bf16


@pytest.mark.slow
def test_bf16_weights_train_fp32_lora_close_to_fp32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rltray.trainer import tiny

    model = tiny.build_tiny_llama(tmp_path / "model", vocab_corpus=TEXTS)
    monkeypatch.setenv("RLTRAY_TRAINER_BF16", "0")
    exact = _backend(model)
    batch = _batch(exact.tokenizer)
    want = exact.logprobs(batch, adapter=False)
    monkeypatch.setenv("RLTRAY_TRAINER_BF16", "weights")
    half = _backend(model)
    assert half.dtype == torch.bfloat16 and not half.autocast
    assert half.model.get_base_model().model.embed_tokens.weight.dtype == torch.bfloat16
    assert half.params and all(p.dtype == torch.float32 for p in half.params)  # LoRA in fp32
    got = half.logprobs(batch, adapter=False)
    mask = batch.response_mask[:, 1:] > 0
    assert got.dtype == np.float32 and np.isfinite(got).all()
    assert np.abs(got - want)[mask].max() < 0.1  # bf16 rounding only
    before = {k: v.copy() for k, v in half.lora_state().items()}
    old = half.logprobs(batch, adapter=True)
    half.accumulate(batch, old, got, np.array([1.0, -1.0], np.float32),
                    np.full(2, 0.5, np.float32))
    half.step()
    after = half.lora_state()
    assert any(not np.array_equal(before[k], after[k]) for k in before)
    assert all(np.isfinite(v).all() for v in after.values())
