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
