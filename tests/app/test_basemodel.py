"""training.base_model is checked offline where it is given and in doctor (issue 22 item C).

Regression pinned: `rltray config set training.base_model /nonexistent/model` was
accepted, doctor showed "✓ training base" for an empty or missing model, and the
mistake surfaced only when a round started.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rltray.app import config
from rltray.app.cli import doctor
from rltray.app.errors import ExitCode
from rltray.app.paths import Paths
from rltray.app.service import Service

from tests.app.test_cli import cli

KEY = "training.base_model"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face cache holding one model, ``org/tiny``."""
    cache = tmp_path / "hf-hub"
    snapshot = cache / "models--org--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "models" / "tiny"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_config_set_accepts_what_the_trainer_can_load(
    rltray_home: Path, tmp_path: Path, hub: Path
) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    for value in (str(model_folder(tmp_path)), str(gguf), "org/tiny", ""):
        code, _, err = cli("config", "set", KEY, value)
        assert code == ExitCode.OK, (value, err)
        assert config.load_config(Paths.from_env()).training.base_model == value


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("/nonexistent/model", "there is no folder or file /nonexistent/model"),
        ("{tmp}/empty-folder", "has no config.json; choose the model's own folder"),
        ("{tmp}/notes.txt", "is a file but not a GGUF model"),
        ("qwen2.5:7b", "qwen2.5:7b looks like an Ollama model name; put it in ollama.model"),
        ("org/missing", "org/missing is not in the local Hugging Face cache"),
    ],
)
def test_config_set_refuses_a_model_the_trainer_cannot_load(
    rltray_home: Path, tmp_path: Path, hub: Path, value: str, said: str
) -> None:
    (tmp_path / "empty-folder").mkdir()
    (tmp_path / "notes.txt").write_text("not a model")
    value = value.format(tmp=tmp_path)
    code, _, err = cli("config", "set", KEY, value)
    assert code == ExitCode.USAGE and said.format(tmp=tmp_path) in err, err
    assert "a model folder (with config.json), a .gguf file, or a Hugging Face id" in err
    assert config.load_config(Paths.from_env()).training.base_model == ""  # nothing saved


def test_a_model_already_set_is_not_checked_again(rltray_home: Path, tmp_path: Path) -> None:
    """The settings page re-sends every field: a model folder on an unplugged disk must not
    make saving another setting fail (doctor flags it instead)."""
    folder = model_folder(tmp_path)
    assert cli("config", "set", KEY, str(folder))[0] == ExitCode.OK
    (folder / "config.json").unlink()
    with Service(Paths.from_env()) as service:
        errors, changed = service.save_settings({KEY: str(folder), "notify.every_nth": "5"})
    assert errors == {} and changed == ["notify.every_nth"]


def test_doctor_flags_an_empty_or_missing_model(rltray_home: Path, tmp_path: Path) -> None:
    with Service(Paths.from_env()) as service:
        empty = doctor._training_base(service)
        assert empty.state == doctor.WARN and "none chosen" in empty.detail
        assert "`rltray config set training.base_model PATH`" in empty.fix
        config.set_value(service.paths, KEY, "/nonexistent/model")  # a hand-edited file
        missing = doctor._training_base(service)
        assert missing.state == doctor.FAIL
        assert missing.detail.startswith("there is no folder or file /nonexistent/model")
        folder = model_folder(tmp_path)
        config.set_value(service.paths, KEY, str(folder))
        found = doctor._training_base(service)
    assert found.state == doctor.OK and found.detail == f"the folder {folder}"


def test_doctor_shows_the_cross_for_a_missing_model(
    rltray_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    config.set_value(Paths.from_env(), KEY, "/nonexistent/model")
    code, out, _ = cli("doctor")
    assert code == ExitCode.NOT_AVAILABLE
    line = next(line for line in out.splitlines() if "training base" in line)
    assert "✗" in line and "/nonexistent/model" in line


def test_train_without_a_model_says_where_to_choose_one(rltray_home: Path) -> None:
    code, _, err = cli("train")
    assert code == ExitCode.USAGE
    assert "No model to train is chosen yet" in err
    assert "`rltray setup`" in err and "`rltray config set training.base_model PATH`" in err
