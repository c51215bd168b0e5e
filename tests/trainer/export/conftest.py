"""Export fixtures: a tiny GGUF base + fitting adapter, the fake Ollama server, SmolLM2 pieces."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/ (for fixtures/)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures.fake_ollama import FakeOllama
from tinygguf import GO_TEMPLATE, build_tiny_adapter, build_tiny_gguf

pytest.importorskip("gguf", reason="needs the gguf package (pip install -e '.[export]')")

BASE = "tiny:1m"
BASE_PARAMS = {"stop": ["<|im_end|>"], "temperature": 0.2}


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gguf(tmp_path_factory.mktemp("tiny-gguf") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_adapter(tmp_path_factory.mktemp("tiny-adapter") / "v0001")


def start_fake(root: Path, version: str, gguf: Path, **kw) -> FakeOllama:
    fake = FakeOllama(root, version, **kw).start()
    fake.install(BASE, gguf, template=GO_TEMPLATE, system="Be brief.", parameters=BASE_PARAMS)
    return fake


@pytest.fixture
def new_ollama(tmp_path: Path, tiny_gguf: Path):
    fake = start_fake(tmp_path / "ollama-new", "0.35.0", tiny_gguf)
    yield fake
    fake.stop()


@pytest.fixture
def old_ollama(tmp_path: Path, tiny_gguf: Path):
    fake = start_fake(tmp_path / "ollama-old", "0.33.0", tiny_gguf)
    yield fake
    fake.stop()
