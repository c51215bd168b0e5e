"""The tiny Llama builder: exact size, loads in transformers and mlx-lm, same numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rltray.trainer.tiny import DEFAULT_VOCAB_SIZE, build_tiny_llama, parameter_count

pytestmark = pytest.mark.ml

# Default sizes: vocab 512, hidden 64, 2 layers, 4 heads (head_dim 16), 2 kv heads,
# intermediate 128, untied lm_head:
#   embed + lm_head 2*512*64 = 65 536
#   per layer q,o 2*64*64 + k,v 2*64*32 + mlp 3*64*128 + 2 norms*64 = 36 992 (x2 = 73 984)
#   final norm 64
DEFAULT_PARAMS = 139_584


def test_exact_parameter_count(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    total = sum(p.numel() for p in model.parameters())
    assert total == DEFAULT_PARAMS
    assert parameter_count(64, 2, 4, 2, 128, DEFAULT_VOCAB_SIZE) == DEFAULT_PARAMS
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["vocab_size"] == DEFAULT_VOCAB_SIZE
    assert cfg["tie_word_embeddings"] is False
    assert (tiny_model_dir / "model.safetensors").is_file()


def test_tokenizer_round_trips_unicode_and_has_chat_template(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = "naïve café 日本語 🙂 \t\r\n  ∑x² — ünïcödé ‰"
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == text
    rendered = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert rendered == (
        "<|bos|><|start|>system\nS<|end|><|start|>user\nhi<|end|><|start|>assistant\n"
    )
    assert tok.eos_token == "<|end|>" and tok.pad_token == "<|pad|>"
    assert tok.pad_token_id != tok.eos_token_id


def test_same_seed_same_weights_other_seed_differs(tmp_path: Path, tiny_model_dir: Path) -> None:
    from safetensors.numpy import load_file

    again = build_tiny_llama(tmp_path / "again", seed=0)
    other = build_tiny_llama(tmp_path / "other", seed=1)
    a = load_file(tiny_model_dir / "model.safetensors")
    b = load_file(again / "model.safetensors")
    c = load_file(other / "model.safetensors")
    assert a.keys() == b.keys() == c.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert any(not np.array_equal(a[k], c[k]) for k in a)


def test_torch_and_mlx_give_same_logits(tiny_model_dir: Path) -> None:
    import mlx.core as mx
    import mlx_lm
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "Fix the bug in store.py, please."},
         {"role": "assistant", "content": "Done: the key is checked first. 🙂"}],
    )["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        t_logits = model(torch.tensor([ids])).logits[0].numpy()
    m_model, _ = mlx_lm.load(str(tiny_model_dir))
    m_logits = np.array(m_model(mx.array([ids]))[0].astype(mx.float32))
    assert t_logits.shape == m_logits.shape == (len(ids), DEFAULT_VOCAB_SIZE)
    np.testing.assert_allclose(m_logits, t_logits, atol=1e-4, rtol=0)
    # Not trivially equal because both are ~0: random init gives real spread.
    assert float(np.std(t_logits)) > 1e-3


def test_custom_sizes_and_corpus(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    corpus = ["alpha beta gamma delta " * 20, "print('hello world')\n" * 20]
    folder = build_tiny_llama(tmp_path / "m", vocab_corpus=corpus, hidden_size=32, layers=1,
                              heads=2, kv_heads=1, intermediate=48)
    cfg = json.loads((folder / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(folder)
    total = sum(p.numel() for p in model.parameters())
    assert total == parameter_count(32, 1, 2, 1, 48, cfg["vocab_size"])


def test_rejects_heads_that_do_not_divide(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="divide"):
        build_tiny_llama(tmp_path / "bad", hidden_size=30, heads=4)
