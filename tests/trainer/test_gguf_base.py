"""A GGUF base trains on MLX and torch alike, whatever its activations (issue 20 item 10).

A materialized GGUF base used to be float16 on disk, and MLX computes in the type
it loads: activations beyond 65504 (the Gemma family's) became inf, then NaN
log-probs, and every round was rejected. The GGUF here is a tiny Llama whose MLP
pushes the residual stream to ~1e5 while every weight fits float16.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gguf", reason="needs the gguf package (pip install -e '.[export]')")
mx = pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'rltray[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install 'rltray[mlx]')")
pytest.importorskip("peft")

from rltray.trainer import gguf_base  # noqa: E402
from rltray.trainer.backends.mlx import MlxBackend  # noqa: E402
from rltray.trainer.backends.torch_peft import TorchPeftBackend  # noqa: E402

pytestmark = pytest.mark.ml

HIDDEN, FFN, VOCAB, HEADS, KV_HEADS = 64, 96, 64, 4, 2


def build_gguf(path: Path, *, down_std: float = 3000.0, qk_std: float = 0.1,
               rope_base: float | None = None, embed_peak: float | None = None,
               ffn_norm: bool = True) -> Path:
    """One Llama block, F16 block weights, a byte-ish tokenizer Transformers can read.
    The default ``ffn_down`` is large so the block's output (the residual) reaches ~1e5."""
    import gguf

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(path, "llama")
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name("loud")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    if rope_base is not None:
        w.add_rope_freq_base(rope_base)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([chr(32 + i) for i in range(VOCAB)])
    w.add_token_merges([])
    w.add_token_types([1] * VOCAB)
    w.add_token_scores([0.0] * VOCAB)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    kv = HIDDEN // HEADS * KV_HEADS
    embed = rng.normal(0, 1.0, (VOCAB, HIDDEN)).astype(np.float32)
    if embed_peak is not None:
        embed[3, 5] = embed_peak
    w.add_tensor("token_embd.weight", embed)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(HIDDEN, np.float32))
    for name, shape, std in (
        ("attn_q", (HIDDEN, HIDDEN), qk_std), ("attn_k", (kv, HIDDEN), qk_std),
        ("attn_v", (kv, HIDDEN), 0.1), ("attn_output", (HIDDEN, HIDDEN), 0.1),
        ("ffn_gate", (FFN, HIDDEN), 0.5), ("ffn_up", (FFN, HIDDEN), 0.5),
        ("ffn_down", (HIDDEN, FFN), down_std),
    ):
        w.add_tensor(f"blk.0.{name}.weight", rng.normal(0, std, shape).astype(np.float16))
    if ffn_norm:
        w.add_tensor("blk.0.ffn_norm.weight", np.ones(HIDDEN, np.float32))
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _job(base: Path) -> SimpleNamespace:
    return SimpleNamespace(base_model=str(base), revision=None, parent_adapter=None, seed=0,
                           trust_remote_code=False, device="cpu")


def _hyper() -> SimpleNamespace:
    return SimpleNamespace(
        rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear", lr=1e-3, warmup_steps=0,
        weight_decay=0.0, grad_clip=1.0, max_seq_len=64, batch_size=2, rho_lo=0.5,
        rho_hi=2.0, delta_lo=-1e9, delta_hi=1e9, beta=0.01)


def _batch() -> SimpleNamespace:
    rng = np.random.default_rng(1)
    ids = rng.integers(2, VOCAB, (2, 24)).astype(np.int64)
    resp = np.zeros(ids.shape, np.float32)
    resp[:, 12:] = 1.0
    return SimpleNamespace(
        input_ids=ids, attention_mask=np.ones(ids.shape, np.int64), response_mask=resp,
        position_ids=np.tile(np.arange(ids.shape[1], dtype=np.int64), (2, 1)),
        example_idx=[0, 1])


def test_a_gguf_base_past_float16_range_trains_on_mlx_and_torch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gguf_base.CACHE_ENV, str(tmp_path / "cache"))
    gguf = build_gguf(tmp_path / "loud.gguf")
    batch = _batch()

    mlx = MlxBackend(_job(gguf), _hyper())
    mlx.load()
    assert "bfloat16" in mlx.device_name or "float32" in mlx.device_name
    mlx_lp = mlx.logprobs(batch, adapter=False)
    assert np.isfinite(mlx_lp).all(), "MLX computed the base in float16: inf, then NaN"

    torch_backend = TorchPeftBackend(_job(gguf), _hyper())
    torch_backend.load()  # the same cached folder, loaded as torch loads any folder
    torch_lp = torch_backend.logprobs(batch, adapter=False)
    assert np.isfinite(torch_lp).all()
    # bf16 against fp32 compute on the same weights: the same model, to rounding
    mask = batch.response_mask[:, 1:] > 0
    assert np.abs(mlx_lp[mask] - torch_lp[mask]).mean() < 0.5


def test_mlx_runs_a_gguf_base_with_the_gguf_rope_base(tmp_path: Path) -> None:
    """Transformers 5 saves the RoPE base only inside ``rope_parameters``; mlx-lm read
    none and ran base 10000 where SmolLM2's GGUF says 100000: another model than the
    one torch trains and Ollama serves (2.4 nats per token apart here)."""
    import torch
    from mlx_lm.utils import load_model
    from transformers import AutoModelForCausalLM

    gguf = build_gguf(tmp_path / "rope.gguf", down_std=0.05, qk_std=1.0, rope_base=1e5)
    folder = gguf_base.materialize(gguf, cache=tmp_path / "cache")
    ids = _batch().input_ids
    model, _ = load_model(folder)
    assert model.model.layers[0].self_attn.rope.base == pytest.approx(1e5)
    model.apply(lambda x: x.astype(mx.float32))  # compare the models, not the roundings
    got = np.array(nn_log_softmax(model(mx.array(ids))))
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert ref.config.rope_parameters["rope_theta"] == pytest.approx(1e5)
    with torch.no_grad():
        want = torch.log_softmax(ref(input_ids=torch.tensor(ids)).logits, -1).numpy()
    assert np.abs(got - want).max() < 1e-3


def nn_log_softmax(logits: Any) -> Any:
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def test_a_tensor_beyond_float16_range_is_stored_in_bfloat16(tmp_path: Path) -> None:
    """Materialized weights are float16 (torch on a CPU keeps their precision); one
    that float16 would turn into inf is stored in bfloat16 instead."""
    import torch
    from safetensors.torch import load_file

    gguf = build_gguf(tmp_path / "big.gguf", down_std=0.05, embed_peak=1e5)
    folder = gguf_base.materialize(gguf, cache=tmp_path / "cache")
    weights = load_file(folder / "model.safetensors")
    embed = weights.pop("model.embed_tokens.weight")
    assert embed.dtype == torch.bfloat16 and float(embed[3, 5]) == pytest.approx(1e5, rel=1e-2)
    assert {w.dtype for w in weights.values()} == {torch.float16}


def test_a_gguf_missing_a_weight_is_refused_not_filled_with_fresh_values(tmp_path: Path) -> None:
    """Transformers fills a weight it cannot find with a fresh initialisation and only
    warns; training would then start from another model than the one Ollama serves."""
    import torch

    gguf = build_gguf(tmp_path / "holed.gguf", down_std=0.05, ffn_norm=False)
    link = tmp_path / "link" / "model.gguf"
    link.parent.mkdir()
    link.symlink_to(gguf)
    out = tmp_path / "out"
    out.mkdir()
    assert gguf_base._convert_streamed(link, out, torch.float16) is False  # falls back ...
    with pytest.raises(gguf_base.GGUFBaseError, match="post_attention_layernorm"):
        gguf_base._convert_whole(link, out, torch.float16)  # ... and the fallback refuses
    with pytest.raises(gguf_base.GGUFBaseError, match=r"training\.base_model"):
        gguf_base.materialize(gguf, cache=tmp_path / "cache")
