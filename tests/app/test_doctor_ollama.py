"""`rltray doctor`'s Ollama and GGUF-base lines, against the fake Ollama server."""

from __future__ import annotations

from pathlib import Path

import pytest
from rltray.app import config
from rltray.app.cli import doctor
from rltray.app.paths import Paths
from rltray.app.service import Service

pytest.importorskip("gguf", reason="the fake Ollama reads GGUF headers with the gguf package")
from tests.support.fake_ollama import FakeOllama
from tests.support.tinygguf import build_tiny_gguf


@pytest.fixture
def service():
    with Service(Paths.from_env()) as opened:
        yield opened


def test_no_ollama_model_is_fine(service: Service) -> None:
    check = doctor._ollama(service)
    assert check.state == doctor.OK and "not used" in check.detail


@pytest.mark.parametrize(("version", "path"), [("0.35.0", "merged models"),
                                               ("0.33.1", "base + GGUF adapter")])
def test_reachable_server_with_the_model(
    service: Service, tmp_path: Path, version: str, path: str
) -> None:
    with FakeOllama(tmp_path / "o", version) as fake:
        fake.install("tiny:1m", build_tiny_gguf(tmp_path / "t.gguf"))
        config.set_value(service.paths, "ollama.host", fake.url)
        config.set_value(service.paths, "ollama.model", "tiny:1m")
        check = doctor._ollama(service)
        assert check.state == doctor.OK
        assert check.detail == f"{version} at {fake.url}; tiny:1m (Q8_0); versions go in as {path}"
        config.set_value(service.paths, "ollama.model", "qwen2.5-coder:7b")
        missing = doctor._ollama(service)
    assert missing.state == doctor.FAIL and missing.fix == "ollama pull qwen2.5-coder:7b"
    down = doctor._ollama(service)
    assert down.state == doctor.FAIL and "not reachable" in down.detail


def test_gguf_base_says_where_it_is_converted(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = build_tiny_gguf(tmp_path / "t.gguf")
    monkeypatch.setenv("RLTRAY_GGUF_CACHE", str(tmp_path / "cache"))
    config.set_value(service.paths, "training.base_model", str(model))
    check = doctor._training_base(service)
    assert check.state == doctor.OK
    assert check.detail.startswith(f"t.gguf: converted once into {tmp_path / 'cache'} (now 0.0 GB")


@pytest.mark.parametrize("os_name", ["Windows", "MacOS", "Unix"])
def test_doctor_names_the_gguf_cache_the_trainer_uses(
    os_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 item 12: the trainer's cache moved out of the Windows data folder; the
    doctor's copy of the rule (it never imports the trainer) must move with it."""
    import importlib

    import platformdirs.windows
    from rltray.trainer import gguf_base

    monkeypatch.delenv("RLTRAY_GGUF_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(platformdirs.windows, "get_win_folder", lambda _csidl: str(tmp_path))
    kind = importlib.import_module(f"platformdirs.{os_name.lower()}")
    dirs = getattr(kind, os_name)(appname="rltray", appauthor=False)
    assert doctor.gguf_cache(dirs) == gguf_base.default_cache_root(dirs)
    assert Path(dirs.user_data_dir) not in doctor.gguf_cache(dirs).parents
