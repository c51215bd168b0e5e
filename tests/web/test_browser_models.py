"""The wizard's model step in a real browser (Chromium): Ollama's models found through its
files while the server is down, a .gguf file, a place that is not there (issue 22)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rltray.app import config

from tests.web.test_browser import page, server, shot  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow


@pytest.fixture
def ollama() -> str:
    """Ollama is not running: its models are found through its own files."""
    return "http://127.0.0.1:9"


def test_the_model_step_offers_ollamas_models_and_gguf_files(
    page, server, service, tmp_path  # noqa: F811
) -> None:
    pytest.importorskip("gguf", reason="needs the gguf package (test extras) to write GGUFs")
    from tests.support.tinygguf import build_tiny_gguf
    from tests.web.test_ollama_models import write_ollama_model

    (tmp_path / "models").mkdir()
    build_tiny_gguf(tmp_path / "models" / "mine.Q8_0.gguf")
    blob = write_ollama_model(Path.home() / ".ollama" / "models", "tiny")
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server.launch_url("setup") + "#model")
    page.wait_for_selector("#model-list >> text=Models Ollama serves")
    page.fill("#model-folder", str(tmp_path / "nothing-here.gguf"))
    page.click("#model-look")
    page.wait_for_selector("#model-look-error >> text=is not on this machine")
    page.fill("#model-folder", "")
    page.check(f"input[name='model-pick'][value='{blob}']")
    assert page.input_value("#ollama-pick") == "tiny:latest"  # the pair follows the choice
    page.click("#model-save")
    page.wait_for_selector("#model-result >> text=trains on the very file Ollama serves")
    shot(page, "wizard-2-model-ollama-gguf", "Setup")
    assert errors == []  # the old step left an uncaught promise rejection here
    current = config.load_config(service.paths)
    assert (current.training.base_model, current.ollama.model) == (str(blob), "tiny:latest")


def test_saving_the_model_step_keeps_the_ollama_model_ollama_does_not_list(
    page, server, service, tmp_path  # noqa: F811
) -> None:
    """Regression: with Ollama down its menu held only "(none)", so saving the step set
    ollama.model to "" and publishing stopped without the user choosing that."""
    from tests.web.webtesting import write_model_folder

    service.set_setting("ollama.model", "qwen2.5-coder:7b")
    folder = write_model_folder(tmp_path / "models" / "tiny-llama")
    page.goto(server.launch_url("setup") + "#model")
    page.wait_for_selector("#model-list >> text=Models Ollama serves")
    page.fill("#model-folder", str(folder.parent))
    page.click("#model-look")
    page.check(f"input[name='model-pick'][value='{folder}']")
    assert page.input_value("#ollama-pick") == "qwen2.5-coder:7b"
    assert "does not list it at the moment" in page.inner_text("#ollama-pick")
    page.click("#model-save")
    page.wait_for_selector("#model-result p")
    shot(page, "wizard-2-model-ollama-down", "Setup")
    current = config.load_config(service.paths)
    assert (current.training.base_model, current.ollama.model) == (str(folder), "qwen2.5-coder:7b")


def test_a_wizard_step_saves_only_what_was_changed_on_it(
    page, server, service  # noqa: F811
) -> None:
    """Regression: Next sent every field of the step as the page had shown it, putting back
    a hand edit of config.toml made while the wizard was open."""
    service.set_setting("training.min_ratings", 32)
    page.goto(server.launch_url("setup"))
    page.wait_for_selector("#agents")
    text = service.paths.config.read_text().replace("min_ratings = 32", "min_ratings = 100")
    service.paths.config.write_text(text)
    page.click("#steps a[href='#schedule']")
    page.wait_for_selector("#schedule:not([hidden])")
    page.click("#next")
    page.wait_for_selector("#notify:not([hidden])")
    assert config.load_config(service.paths).training.min_ratings == 100
