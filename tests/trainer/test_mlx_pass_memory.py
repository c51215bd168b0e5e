"""The MLX training pass in less memory (issue 25): the output head's logits only a chunk
at a time with none kept for the backward, and a lean round whose decoder blocks are
recomputed in the backward. Both leave the loss and the gradients as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'rltray[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install 'rltray[mlx]')")

from rltray.trainer.backends import mlx as mlx_backend  # noqa: E402
from rltray.trainer.backends import mlx_pass_memory  # noqa: E402

from tests.trainer.test_backend_mlx import CORPUS, loaded, make_batch, randomise_b  # noqa: E402

pytestmark = pytest.mark.ml

VOCAB = 32768  # wide enough that a batch's logits outweigh everything else in a pass


@pytest.fixture(scope="module")
def wide_vocab_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama with its embedding and head grown to :data:`VOCAB` rows (the
    tokenizer uses the first few hundred), so the logits are what a pass's memory is."""
    import torch
    from rltray.trainer.tiny import build_tiny_llama
    from transformers import AutoModelForCausalLM

    folder = build_tiny_llama(tmp_path_factory.mktemp("wide") / "model")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    torch.manual_seed(0)
    model.resize_token_embeddings(VOCAB, mean_resizing=False)
    model.save_pretrained(folder)
    return folder


def one_pass(backend: Any, batch: Any) -> tuple[dict[str, float], dict[str, np.ndarray], int]:
    """Loss stats, LoRA gradients and the peak memory of one training pass."""
    old = backend.logprobs(batch, adapter=True)
    n = batch.input_ids.shape[0]
    adv = np.linspace(-1.0, 1.0, n).astype(np.float32)
    weight = np.full(n, 1.0 / n, np.float32)
    mx.clear_cache()
    mx.reset_peak_memory()
    stats = backend.accumulate(batch, old, old - 0.05, adv, weight)
    peak = int(mx.get_peak_memory())
    grads = backend.lora_gradients()
    backend.zero_grad()
    return stats, grads, peak


def assert_same(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    assert a[0] == pytest.approx(b[0], rel=1e-4, abs=1e-6)
    assert a[1].keys() == b[1].keys() and a[1]
    for key in a[1]:
        np.testing.assert_allclose(a[1][key], b[1][key], rtol=1e-3, atol=1e-6, err_msg=key)


def test_the_head_keeps_no_logits_for_the_backward(wide_vocab_model: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mlx_backend, "HEAD_CHUNK_BYTES", 2**20)  # 8 positions a chunk
    backend = loaded(wide_vocab_model, max_seq_len=128)
    assert backend._head_weight is not None  # an untied nn.Linear head is plain
    randomise_b(backend)
    batch = make_batch(backend.tokenizer, CORPUS * 2)
    trained = int((batch.response_mask[:, 1:] > 0).sum())
    assert trained > 2 * backend._head_chunk()  # several chunks
    chunked = one_pass(backend, batch)
    backend._head_weight = None  # the plain path: the head over the trained columns
    plain = one_pass(backend, batch)
    assert_same(chunked, plain)
    logits = trained * VOCAB * 4  # one fp32 copy of the trained positions' logits
    # the plain pass holds ~3.5 such copies more (measured 30.0 vs 68.9 MB); chunks made
    # all at once, as MLX would without the chunk-to-chunk dependency, hold 2.6 more
    assert chunked[2] < plain[2] - 3 * logits, (chunked[2], plain[2], logits)


def test_a_quantized_or_biased_head_is_not_taken_for_a_plain_one() -> None:
    import mlx.nn as nn

    assert mlx_pass_memory.head_weight(nn.Linear(8, 32, bias=False)) is not None
    assert mlx_pass_memory.head_weight(nn.Linear(8, 32, bias=True)) is None
    embed = nn.Embedding(32, 8)
    assert mlx_pass_memory.head_weight(embed.as_linear) is embed.weight
    assert mlx_pass_memory.head_weight(nn.QuantizedLinear(64, 32, bias=False)) is None
    assert mlx_pass_memory.head_weight(lambda h: h) is None


def test_a_lean_pass_recomputes_every_block_to_the_same_gradients(
        tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = loaded(tiny_model_dir)
    randomise_b(backend)
    batch = make_batch(backend.tokenizer, CORPUS)
    monkeypatch.setenv("RLTRAY_TRAINER_RECOMPUTE", "0")
    kept = one_pass(backend, batch)
    calls = []
    real = mx.checkpoint

    def counted(fn: Any) -> Any:
        calls.append(fn)
        return real(fn)

    monkeypatch.setattr(mx, "checkpoint", counted)
    monkeypatch.setenv("RLTRAY_TRAINER_RECOMPUTE", "1")
    block_class = type(backend._blocks()[0])
    plain_call = block_class.__dict__["__call__"]
    lean = one_pass(backend, batch)
    assert len(calls) == len(backend._blocks()) == backend.config["num_hidden_layers"]
    assert_same(lean, kept)
    assert block_class.__dict__["__call__"] is plain_call  # put back after the pass
    calls.clear()
    monkeypatch.setenv("RLTRAY_TRAINER_RECOMPUTE", "auto")
    assert not backend.recomputes(64)  # a tiny model leaves any machine room
    backend._lean.available_at_start = 1
    assert backend.recomputes(64)
    backend.sequences_per_pass(64, 4)
    assert backend.tight  # the round tells the user it runs lean
