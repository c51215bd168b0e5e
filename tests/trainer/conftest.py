"""Trainer test fixtures: one tiny Llama folder per test session.

Building takes about a second, but every ML test needs a model; building it once
keeps the suite fast on a shared 2-core machine. Tests must treat the folder as
read-only (copy it first if a test needs to change files).
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama (default sizes, seed 0) with tokenizer and chat template."""
    from rltray.trainer.tiny import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama") / "model")


@pytest.fixture
def tiny_tokenizer(tiny_model_dir: Path):
    """A fresh Hugging Face tokenizer of the tiny model (tests may change its template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct as a plain fp32 Transformers folder, dequantised from the
    cached Q4_1 GGUF once per session (the trainer's loaders read folders)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src, name = smollm2_gguf.parent, smollm2_gguf.name
    out = tmp_path_factory.mktemp("smollm2") / "model"
    quant = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    cfg = AutoConfig.from_pretrained(src, gguf_file=name)
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # the dequantised copy is plain fp32
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(quant.state_dict())
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src, gguf_file=name).save_pretrained(out)
    return out
