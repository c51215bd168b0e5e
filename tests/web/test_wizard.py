"""Setup wizard routes over real parts: agent config files, model folders, an Ollama HTTP server,
the trainer interpreter in a child process, a real venv + pip for the trainer environment."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rltray.app import bundle, config
from rltray.web import models

from tests.web.webtesting import post_json, write_model_folder


def test_the_page_has_six_steps(client, service) -> None:
    page = client.get("/setup").data.decode()
    assert "<title>Setup · rltray</title>" in page
    for step in ("Agents", "Model", "Backend", "Preset", "Schedule", "Notifications"):
        assert f". {step}</h2>" in page
    for preset in ("careful", "balanced", "custom"):
        assert f'value="{preset}"' in page
    assert 'value="aggressive"' not in page  # measured outside issue 20's limits
    assert service.needs_setup()
    assert post_json(client, "/api/setup/finish").get_json()["done"] is True
    assert not service.needs_setup()


def test_a_user_on_a_retired_preset_sees_it_checked_with_why_and_can_switch(
    client, service
) -> None:
    """aggressive is no longer offered, but a config that names it keeps it, and the
    wizard says so instead of showing no preset checked."""
    config.set_value(service.paths, "training.preset", "aggressive")
    page = client.get("/setup").data.decode()
    step = page[page.index('id="preset"') : page.index('id="schedule"')]
    assert 'value="aggressive" checked>' in step
    assert "No longer offered" in step and step.count(" checked>") == 1
    assert post_json(client, "/api/settings", {"training.preset": "balanced"}).status_code == 200
    step = client.get("/setup").data.decode()
    assert 'value="aggressive"' not in step and 'value="balanced" checked>' in step


def test_the_agents_step_asks_for_lessons_per_agent_off_by_default(client, service) -> None:
    """Issue 24: the opt-in says what is sent and where, and nothing is on until asked."""
    page = client.get("/setup").data.decode()
    step = page[page.index('id="agents"') : page.index('id="model"')]
    assert "Lessons (optional, off until you turn them on)" in step
    for name, shown in (("claude-code", "Claude Code"), ("codex", "Codex")):
        assert f'data-lessons-agent="{name}">' in step  # present and not checked
        assert f"puts its text into {shown}&#39;s context at session start" in step
    assert "/lessons/codex/ (one .md file per project" in step
    assert not service.settings().lessons.codex and not service.settings().lessons.claude_code
    post_json(client, "/api/lessons/agents/claude-code", {"on": True})
    assert 'data-lessons-agent="claude-code" checked>' in client.get("/setup").data.decode()
    assert service.settings().lessons.claude_code


def test_agents_install_uninstall_and_first_event(client, service, add_turns) -> None:
    home = Path.home()
    (home / ".claude").mkdir()
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('model = "gpt-5-codex"\n')
    rows = {a["name"]: a for a in post_json(client, "/api/setup/agents").get_json()}
    assert rows["claude-code"]["detected"] and not rows["claude-code"]["installed"]
    done = post_json(client, "/api/setup/agents/claude-code/install").get_json()
    assert done["lines"] and any("settings.json" in line for line in done["lines"])
    rows = {a["name"]: a for a in done["agents"]}
    assert rows["claude-code"]["installed"] and rows["claude-code"]["waiting"]
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert "Stop" in settings["hooks"]
    codex = post_json(client, "/api/setup/agents/codex/install").get_json()
    codex_row = next(a for a in codex["agents"] if a["name"] == "codex")
    assert codex_row["installed"] and any("/hooks" in n for n in codex_row["notes"])
    add_turns(1, agent="claude-code")
    rows = {a["name"]: a for a in post_json(client, "/api/setup/agents").get_json()}
    assert not rows["claude-code"]["waiting"] and rows["claude-code"]["turns"] == 1
    post_json(client, "/api/setup/agents/codex/uninstall")
    assert (home / ".codex" / "config.toml").read_text() == 'model = "gpt-5-codex"\n'
    missing = post_json(client, "/api/setup/agents/nobody/install")
    assert missing.status_code == 400 and "Unknown agent" in missing.get_json()["error"]["message"]


def test_install_refuses_an_agent_that_is_not_there(client) -> None:
    refused = post_json(client, "/api/setup/agents/codex/install")
    assert refused.status_code == 400 and "not found" in refused.get_json()["error"]["message"]


def test_install_refuses_a_hook_program_others_could_replace(
    client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 3, finding 1): the wizard wrote hooks naming a program in /tmp or a
    folder others can write; it refuses as `rltray hooks install` does, and writes nothing."""
    monkeypatch.delenv(bundle.ALLOW_UNSAFE_ENV)  # the suite's switch (tests/conftest.py)
    claude = Path.home() / ".claude"
    claude.mkdir()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    program = shared / "python"
    program.symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(program))  # the interpreter the hooks would run
    refused = post_json(client, "/api/setup/agents/claude-code/install")
    message = refused.get_json()["error"]["message"]
    assert refused.status_code == 400, message
    assert message.startswith(f"Refusing to point agent hooks at {program} because "), message
    assert "~/Applications" in message
    assert not (claude / "settings.json").exists()


def test_models_ollama_pairing_and_memory(client, app, service, ollama, tmp_path) -> None:
    app.extensions["rltray"].options["ollama_host"] = ollama
    write_model_folder(tmp_path / "models" / "tiny-llama")
    write_model_folder(tmp_path / "models" / "broken").joinpath("config.json").write_text("{")
    hf = Path.home() / ".cache" / "huggingface" / "hub" / "models--org--small" / "snapshots" / "abc"
    write_model_folder(hf, layers=4, hidden=128, vocab=1000)
    data = post_json(client, "/api/setup/models").get_json()
    by_name = {m["name"]: m for m in data["models"]}
    assert set(by_name) == {"tiny-llama", "broken", "org/small"}
    assert by_name["org/small"]["source"] == "huggingface" and by_name["org/small"]["layers"] == 4
    assert "no readable config.json" in by_name["broken"]["error"]
    fit = by_name["tiny-llama"]["memory"]
    assert fit["fits"] is True and "this machine has" in fit["message"]
    assert data["ollama"]["running"] and [m["name"] for m in data["ollama"]["models"]] == [
        "tiny:latest", "other:7b"]  # fmt: skip
    tiny = str(tmp_path / "models" / "tiny-llama")
    matched = post_json(client, "/api/setup/model", {"path": tiny, "ollama": "tiny:latest"})
    assert matched.get_json()["mismatches"] == []
    current = config.load_config(service.paths)
    assert current.training.base_model == tiny and current.ollama.model == "tiny:latest"
    other = post_json(client, "/api/setup/model", {"path": tiny, "ollama": "other:7b"}).get_json()
    assert other["mismatches"] == [
        "Architecture differs: the trainable model is llama, Ollama's is qwen2.",
        "The layers differs: 2 in the trainable model, 28 in Ollama's.",
        "The hidden size differs: 64 in the trainable model, 3584 in Ollama's.",
        "The vocabulary differs: 512 in the trainable model, 152064 in Ollama's.",
    ]
    nope = post_json(client, "/api/setup/model", {"path": str(tmp_path)})
    assert nope.status_code == 400


def test_without_ollama_the_wizard_says_so(client) -> None:
    data = post_json(client, "/api/setup/models").get_json()
    assert data["ollama"]["running"] is False
    assert "Ollama does not answer at http://127.0.0.1:9" in data["ollama"]["error"]


def test_memory_fit_figures() -> None:
    big = {"num_hidden_layers": 80, "hidden_size": 8192, "vocab_size": 128256,
           "num_attention_heads": 64, "num_key_value_heads": 8,
           "intermediate_size": 28672}  # fmt: skip
    params = models.estimate_params(big)
    assert params is not None and 70e9 < params < 71e9  # Llama-3-70B's shape
    verdict = models.memory_fit({"params": params}, 16 * 2**30)
    assert verdict["fits"] is False and "does not fit" in verdict["message"]
    assert verdict["need_gib"] > 100 and verdict["have_gib"] == 16.0


def test_a_model_that_fits_only_lean_is_told_so() -> None:
    """Llama-3.2-3B's shape: the default round's 18.7 GB does not fit 80% of a 20 GB
    laptop, the lean round the trainer switches to there does, and the wizard says both."""
    three_b = 3_212_749_824
    verdict = models.memory_fit({"params": three_b}, 20 * 2**30)
    assert verdict["fits"] is True and verdict["lean"] is True
    assert verdict["need_gib"] == 18.7 and verdict["lean_gib"] < 0.8 * 20
    assert verdict["message"].endswith("so it fits in a lean round.")
    assert "in a lean round, about 1.6x slower" in verdict["message"]
    roomy = models.memory_fit({"params": three_b}, 32 * 2**30)
    assert roomy["fits"] is True and roomy["lean"] is False
    assert roomy["message"].endswith("so it fits.") and "lean" not in roomy["message"]
    small = models.memory_fit({"params": three_b}, 12 * 2**30)
    assert small["fits"] is False and small["message"].endswith("so it does not fit.")
    # a measured round on this model is the figure: no estimate of a lean one beside it
    measured = models.memory_fit({"params": three_b}, 20 * 2**30,
                                 {"peak_bytes": 17 * 2**30, "run": "r1"})
    assert measured["fits"] is False and measured["lean"] is False


def test_a_gguf_and_the_models_ollama_serves_can_be_chosen(client, service, tmp_path) -> None:
    """Issue 22: the model step listed only Hugging Face folders; a .gguf path got "is not a
    folder" and Ollama's own models (the README's headline) could not be chosen."""
    pytest.importorskip("gguf", reason="needs the gguf package (test extras) to write GGUFs")
    from tests.support.tinygguf import build_tiny_gguf
    from tests.web.test_ollama_models import write_ollama_model

    (tmp_path / "models").mkdir()
    mine = build_tiny_gguf(tmp_path / "models" / "mine.Q8_0.gguf")
    blob = write_ollama_model(Path.home() / ".ollama" / "models", "tiny")  # Ollama is down
    data = post_json(client, "/api/setup/models").get_json()
    assert [m["name"] for m in data["models"]] == ["mine.Q8_0.gguf"]
    assert data["models"][0]["layers"] == 2 and data["models"][0]["memory"]["fits"] is True
    assert data["ollama"]["running"] is False
    (served,) = data["ollama"]["models"]
    assert served["name"] == "tiny:latest" and served["blob"] == str(blob)

    chose = post_json(client, "/api/setup/model", {"path": str(blob), "ollama": "tiny:latest"})
    assert chose.status_code == 200 and chose.get_json()["same_file"] is True
    current = config.load_config(service.paths)
    assert (current.training.base_model, current.ollama.model) == (str(blob), "tiny:latest")

    paired = post_json(client, "/api/setup/model", {"path": str(mine), "ollama": "tiny:latest"})
    assert paired.get_json()["mismatches"] == [] and paired.get_json()["same_file"] is False
    looked = post_json(client, "/api/setup/models", {"folder": str(mine)}).get_json()
    assert str(mine) in [m["path"] for m in looked["models"]]


def test_the_model_step_says_what_is_wrong_with_a_place(client, tmp_path) -> None:
    missing = post_json(client, "/api/setup/models", {"folder": str(tmp_path / "nope.gguf")})
    assert missing.status_code == 400
    assert missing.get_json()["error"]["message"].endswith("nope.gguf is not on this machine.")
    (tmp_path / "empty").mkdir()
    empty = post_json(client, "/api/setup/models", {"folder": str(tmp_path / "empty")})
    assert "holds no model rltray can train" in empty.get_json()["error"]["message"]
    (tmp_path / "notes.txt").write_text("hi")
    chose = post_json(client, "/api/setup/model", {"path": str(tmp_path / "notes.txt")})
    assert "notes.txt is a file but not a GGUF model" in chose.get_json()["error"]["message"]


def test_a_crafted_gguf_in_the_scanned_folder_is_listed_with_its_problem(
    client, tmp_path
) -> None:
    """Regression (review2-sec gguf_bomb): a GGUF header of arrays nested 5000 deep, or an
    array of 2**62 numbers, made the model step answer 500 for the whole folder."""
    import struct

    folder = tmp_path / "downloads"
    folder.mkdir()
    key = struct.pack("<Q", 1) + b"x" + struct.pack("<I", 9)
    bodies = {"deep.gguf": struct.pack("<IQ", 9, 1) * 5000 + struct.pack("<IQ", 0, 0),
              "huge.gguf": struct.pack("<IQ", 10, 2**62)}  # fmt: skip
    for name, body in bodies.items():
        (folder / name).write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + key + body)
    looked = post_json(client, "/api/setup/models", {"folder": str(folder)})
    assert looked.status_code == 200, looked.data
    errors = {m["name"]: m.get("error") for m in looked.get_json()["models"]}
    assert errors == {"deep.gguf": "a header array nests implausibly deep.",
                      "huge.gguf": "the file ends inside its header."}  # fmt: skip


def test_finish_says_plainly_whether_training_can_start(client, tmp_path) -> None:
    waits = post_json(client, "/api/setup/finish").get_json()
    assert waits["trainable"] is False and "training waits until you choose a model" in waits[
        "message"]  # fmt: skip
    write_model_folder(tmp_path / "models" / "tiny-llama")
    post_json(client, "/api/setup/model", {"path": str(tmp_path / "models" / "tiny-llama")})
    ready = post_json(client, "/api/setup/finish").get_json()
    assert ready["trainable"] is True and "train on its own" in ready["message"]


def test_backend_asks_the_trainer_interpreter(client, service) -> None:
    data = post_json(client, "/api/setup/backend").get_json()
    info = data["info"]
    assert data["python"] == info["executable"] and info["python"].count(".") == 2
    assert info["torch"] is True  # the test environment has the torch extra
    assert data["backend"]["name"] in ("cpu", "cuda", "mps")
    config.set_value(service.paths, "training.python", "/nonexistent/python")
    broken = post_json(client, "/api/setup/backend").get_json()
    assert broken["backend"]["name"] is None and "could not be run" in broken["backend"]["message"]


def test_a_bundles_backend_step_asks_for_a_trainer_environment_without_probing(
    client, service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 3, finding 4): in a bundle with no training.python the step probed
    the bundle's own executable, which is no Python, and showed an argparse error with the
    probe's source. It says what to do instead, and names where the environment will be."""
    from rltray.web import machine

    monkeypatch.setattr(sys, "frozen", True, raising=False)  # as PyInstaller marks a bundle
    data = post_json(client, "/api/setup/backend").get_json()
    assert data["backend"] == {"name": None, "message": machine.NO_TRAINER}
    assert data["python"] == str(service.paths.home / "trainer-env" / "bin" / "python")
    assert "usage:" not in json.dumps(data) and "import importlib" not in json.dumps(data)
    config.set_value(service.paths, "training.python", sys.executable)  # once it is set up
    ready = post_json(client, "/api/setup/backend").get_json()
    assert ready["python"] == sys.executable and ready["info"]["torch"] is True


def wait_job(client: Any, job: dict[str, Any], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while job["status"] == "running":
        assert time.monotonic() < deadline, job
        time.sleep(0.5)
        job = client.get(f"/api/jobs/{job['id']}").get_json()
    return job


@pytest.mark.slow
def test_trainer_environment_is_built_proven_and_recorded(client, app, service) -> None:
    """The wizard runs `rltray trainer-env create` (the one implementation) as a job."""
    app.extensions["rltray"].options.update(
        env_cli_args=["--backend", "cpu", "--torch-index", "none"]
    )
    job = post_json(client, "/api/setup/trainer-env").get_json()
    assert job["status"] == "running"
    again = post_json(client, "/api/setup/trainer-env").get_json()
    assert again["id"] == job["id"]  # one at a time
    job = wait_job(client, job, 900)
    assert job["status"] == "done", job
    python = job["result"]["python"]
    assert python == str(service.paths.home / "trainer-env" / "bin" / "python")
    assert config.load_config(service.paths).training.python == python
    assert any(line.startswith("Ready: one training step took") for line in job["log"]), job
    out = subprocess.run([python, "-c", "import torch, rltray.trainer; print(torch.__version__)"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.startswith("2.13.0")


def test_a_failing_environment_build_fails_the_job_with_its_reason(client, app, service) -> None:
    app.extensions["rltray"].options.update(env_cli_args=["--python", "/nonexistent/python3"])
    job = wait_job(client, post_json(client, "/api/setup/trainer-env").get_json(), 120)
    assert job["status"] == "failed" and "failed (exit code" in job["error"]
    assert any("/nonexistent/python3" in line for line in job["log"]), job["log"]
    assert config.load_config(service.paths).training.python == ""  # nothing recorded
    assert client.get("/api/jobs/nope").status_code == 400


def test_test_notification_reports_what_happened(client) -> None:
    result = post_json(client, "/api/setup/test-notification").get_json()
    assert isinstance(result["shown"], bool)
    if not result["shown"]:  # no notification server on this machine: say why
        assert result["message"].startswith("The test notification was not shown: ")
        assert len(result["message"]) > len("The test notification was not shown: ") + 5


def test_snooze_needs_a_running_service(client) -> None:
    refused = post_json(client, "/api/snooze", {"until": "hour"})
    assert refused.status_code == 400 and "not running" in refused.get_json()["error"]["message"]
