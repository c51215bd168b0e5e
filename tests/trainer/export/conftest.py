"""Export fixtures: a tiny GGUF base + fitting adapter, the fake Ollama server, SmolLM2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.exportkit import FakeOllama, start_fake
from tests.support.tinygguf import build_tiny_adapter, build_tiny_gguf


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gguf(tmp_path_factory.mktemp("tiny-gguf") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_adapter(tmp_path_factory.mktemp("tiny-adapter") / "v0001")


@pytest.fixture
def new_ollama(tmp_path: Path, tiny_gguf: Path) -> FakeOllama:
    fake = start_fake(tmp_path / "ollama-new", "0.35.0", tiny_gguf)
    yield fake
    fake.stop()


@pytest.fixture
def old_ollama(tmp_path: Path, tiny_gguf: Path) -> FakeOllama:
    fake = start_fake(tmp_path / "ollama-old", "0.33.0", tiny_gguf)
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def smollm2_hf(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2's GGUF materialized once per session into an HF folder (about 20 s)."""
    pytest.importorskip("transformers")
    from rltray.trainer import gguf_base

    return gguf_base.materialize(smollm2_gguf, cache=tmp_path_factory.mktemp("gguf-cache"))
