"""`rltray use` and `rltray export-model`: files parsed back, undo byte for byte, real exports."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import tomlkit
from rltray.app import config
from rltray.app.cli import main
from rltray.app.errors import ExitCode
from rltray.app.paths import Paths
from rltray.app.store import Store


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _published(
    versions: int = 2, *, tags: bool = True, model: str = "tiny:1m", base: str = "tiny"
) -> Paths:
    """Versions v1..vN trained on ``base`` in the store (folders with a tiny PEFT adapter),
    v2 active, published from ``model`` (ollama.model; "" leaves it unset)."""
    pytest.importorskip("numpy", reason="the tiny adapters are written with numpy")
    from tests.support.tinygguf import build_tiny_adapter

    paths = Paths.from_env()
    if model:
        config.set_value(paths, "ollama.model", model)
    with Store.open(paths) as store:
        for v in range(1, versions + 1):
            folder = build_tiny_adapter(paths.adapters / f"v{v:04d}", seed=v)
            store.add_adapter(base, folder, parent_version=v - 1 or None)
            store.set_adapter_status(v, "active")
            if tags:
                store.set_adapter_publication(
                    v, f"tiny-1m-rltray:v{v}", {"tag": f"tiny-1m-rltray:v{v}", "path": "merged"}
                )
    return paths


def _codex_profile() -> Path:
    return Path(os.environ["HOME"]) / ".codex" / "rltray.config.toml"


def test_use_codex_writes_a_profile_codex_can_read_and_undo_removes_it() -> None:
    _published()
    codex_config = Path(os.environ["HOME"]) / ".codex" / "config.toml"
    codex_config.parent.mkdir()
    hooks = b'notify = ["rltray-hook", "codex"]\n'
    codex_config.write_bytes(hooks)
    code, out, err = cli("use", "codex")
    assert code == ExitCode.OK, err
    profile = tomlkit.parse(_codex_profile().read_text()).unwrap()
    assert profile == {
        "model": "tiny-1m-rltray:latest",
        "model_context_window": 65536,
        "model_provider": "ollama",
    }
    assert "codex --profile rltray" in out
    # Issue 19: `codex --oss -m TAG` fails on Codex 0.169 without a named local provider
    # (tests/agents/ runs this command against the real Codex).
    assert "(or once: codex --oss --local-provider ollama -m tiny-1m-rltray:latest)" in out
    assert codex_config.read_bytes() == hooks  # the hooks' config is never touched
    code, out, _ = cli("use", "codex", "v1")
    assert code == ExitCode.OK
    assert tomlkit.parse(_codex_profile().read_text()).unwrap()["model"] == "tiny-1m-rltray:v1"
    code, out, _ = cli("use", "--undo")
    assert code == ExitCode.OK and "Removed" in out
    assert not _codex_profile().exists()
    assert codex_config.read_bytes() == hooks
    code, _, err = cli("use", "--undo")
    assert code == ExitCode.NOTHING_TO_DO and "nothing" in err


def test_a_remote_ollama_gets_its_own_provider_with_the_responses_api() -> None:
    paths = _published()
    config.set_value(paths, "ollama.host", "http://gpu-box:11434")
    assert cli("use", "codex")[0] == ExitCode.OK
    profile = tomlkit.parse(_codex_profile().read_text()).unwrap()
    assert profile["model_provider"] == "rltray-ollama"
    assert profile["model_providers"]["rltray-ollama"] == {
        "name": "Ollama (rltray)",
        "base_url": "http://gpu-box:11434/v1",
        "wire_api": "responses",
    }


def test_undo_restores_a_file_that_was_there_byte_for_byte() -> None:
    _published()
    _codex_profile().parent.mkdir(parents=True)
    mine = b"# my own profile\r\nmodel = 'gpt-5'\n\xe2\x9c\x93\n"
    _codex_profile().write_bytes(mine)
    assert cli("use", "codex")[0] == ExitCode.OK
    assert cli("use", "codex", "1")[0] == ExitCode.OK  # a second write keeps the first "before"
    assert _codex_profile().read_bytes() != mine
    assert cli("use", "--undo")[0] == ExitCode.OK
    assert _codex_profile().read_bytes() == mine


def test_undo_leaves_a_file_the_user_changed_since() -> None:
    _published()
    assert cli("use", "codex")[0] == ExitCode.OK
    _codex_profile().write_text(_codex_profile().read_text() + "# my note\n")
    code, _, err = cli("use", "--undo")
    assert code == ExitCode.ERROR and "changed since rltray wrote it" in err
    assert _codex_profile().exists()


def test_use_claude_code_prints_the_environment_and_shell_writes_a_launcher() -> None:
    paths = _published()
    code, out, _ = cli("use", "claude-code", "v2")
    assert code == ExitCode.OK
    exports = dict(
        shlex.split(line.removeprefix("export "))[0].split("=", 1)
        for line in out.splitlines()
        if line.startswith("export ")
    )
    assert exports["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:11434"
    assert exports["ANTHROPIC_AUTH_TOKEN"] == "ollama" and exports["ANTHROPIC_API_KEY"] == ""
    for key in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL",
                "CLAUDE_CODE_SUBAGENT_MODEL"):
        assert exports[key] == "tiny-1m-rltray:v2"
    code, out, _ = cli("use", "claude-code", "--shell")
    assert code == ExitCode.OK
    launcher = paths.home / "bin" / "claude-rltray"
    assert os.access(launcher, os.X_OK)
    # run the launcher with a stand-in `claude` that prints what it was given
    fake_bin = Path(os.environ["HOME"]) / "fakebin"
    fake_bin.mkdir()
    (fake_bin / "claude").write_text(
        "#!/bin/sh\necho \"$ANTHROPIC_BASE_URL|$ANTHROPIC_DEFAULT_HAIKU_MODEL|[$ANTHROPIC_API_KEY]"
        "|$*\"\n"
    )
    (fake_bin / "claude").chmod(0o755)
    ran = subprocess.run(
        [str(launcher), "-p", "hi"], capture_output=True, text=True, check=True,
        env={**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}"},
    )
    assert ran.stdout.strip() == (
        "http://127.0.0.1:11434|tiny-1m-rltray:latest|[]|--model tiny-1m-rltray:latest -p hi"
    )
    assert cli("use", "--undo")[0] == ExitCode.OK
    assert not launcher.exists()


def test_use_before_anything_is_published_says_what_to_do() -> None:
    _published(tags=False)
    code, _, err = cli("use", "codex")
    assert code == ExitCode.NOTHING_TO_DO and "No version is published to Ollama yet" in err
    code, _, err = cli("use", "codex", "v1")
    assert code == ExitCode.USAGE and "v1 is not published to Ollama" in err
    code, _, err = cli("use", "codex", "v9")
    assert code == ExitCode.USAGE and "There is no version v9" in err
    assert not _codex_profile().exists()


def test_use_refuses_a_version_whose_tag_prune_deleted(tmp_path: Path) -> None:
    """Regression (review r6): prune deleted v1's tag from Ollama (ollama.keep_versions 1)
    but the store still named it: `rltray versions` showed it as published and `rltray use
    codex 1` wrote a profile for a model Ollama no longer had."""
    pytest.importorskip("gguf", reason="needs the gguf package (pip install -e '.[export]')")
    pytest.importorskip("ollama", reason="needs the ollama client (pip install -e '.[export]')")
    from rltray.app.service import Service

    from tests.support.fake_ollama import serving_tiny

    fake = serving_tiny(tmp_path)
    try:
        paths = _published(tags=False)
        for key, value in (("ollama.model", "tiny:1m"), ("ollama.host", fake.url),
                           ("ollama.keep_versions", 1)):  # fmt: skip
            config.set_value(paths, key, value)
        with Service(paths) as service:
            service.store.set_adapter_status(1, "active")
            service.runner().publisher.published(1)
            service.store.set_adapter_status(2, "active")
            service.runner().publisher.published(2)
            assert "tiny-1m-rltray:v1" not in fake.models
            (v2, v1) = service.versions()
        assert (v1["ollama_tag"], v2["ollama_tag"]) == (None, "tiny-1m-rltray:v2")
        gone = ("not in Ollama any more: tiny-1m-rltray:v1 was removed to keep the newest 1 "
                "versions (ollama.keep_versions)")  # fmt: skip
        assert v1["published"] == gone
        code, _, err = cli("use", "codex", "1")
        assert code == ExitCode.USAGE and f"v1 is {gone}; `rltray versions` shows" in err
        assert "`rltray rollback 1` publishes it again" in err
        assert not _codex_profile().exists()
        code, _, err = cli("use", "codex", "2")
        assert code == ExitCode.OK, err
    finally:
        fake.stop()


def test_export_model_peft_and_the_gguf_formats(tmp_path: Path) -> None:
    pytest.importorskip("gguf", reason="needs the gguf package (pip install -e '.[export]')")
    import gguf

    from tests.support.tinygguf import build_tiny_gguf

    base = tmp_path / "tiny.gguf"
    paths = _published(1, model="", base=str(base))  # trained on the GGUF, set up below
    out = tmp_path / "out"
    code, text, err = cli("export-model", "v1", "--format", "peft", "-o", str(out))
    assert code == ExitCode.OK, err
    assert (out / "rltray-v1-peft" / "adapter_config.json").is_file()
    code, _, err = cli("export-model", "1", "--format", "gguf-adapter", "-o", str(out))
    assert code == ExitCode.USAGE and "need the base model as a GGUF file" in err
    build_tiny_gguf(base)
    config.set_value(paths, "training.base_model", str(base))
    code, text, err = cli("export-model", "1", "--format", "gguf-adapter", "-o", str(out))
    assert code == ExitCode.OK, err
    reader = gguf.GGUFReader(out / "rltray-v1-adapter.gguf")
    assert reader.fields["general.type"].contents() == "adapter"
    assert reader.fields["adapter.lora.alpha"].contents() == 8.0
    code, text, err = cli("export-model", "v1", "--format", "gguf-merged", "-o", str(out))
    assert code == ExitCode.OK, err
    assert "F16 merged layers" in text  # never back onto the Q8_0 base's grid (issue 20)
    merged = gguf.GGUFReader(out / "rltray-v1-merged.gguf")
    assert merged.fields["general.type"].contents() == "model"
    code, _, err = cli("export-model", "v1", "--format", "peft", "-o", str(out))
    assert code == ExitCode.USAGE and "already exists" in err
    assert json.loads((out / "rltray-v1-peft" / "adapter_config.json").read_text())["r"] == 4


def test_use_names_latest_of_the_model_set_up_now() -> None:
    """Regression (review 3 r3): the default tag came from the newest published version's
    tag, so after ollama.model changed (and `rltray rollback 0` pointed the new model's
    ``latest`` at its base) `rltray use codex` still sent the agent to the old model."""
    from rltray.app.training import served

    paths = _published()  # v1, v2 published from tiny:1m
    config.set_value(paths, "ollama.model", "other:1m")
    served.write_served(paths, "other:1m", None)  # what the rollback's publish records
    code, _, err = cli("use", "codex")
    assert code == ExitCode.OK, err
    assert tomlkit.parse(_codex_profile().read_text()).unwrap()["model"] == (
        "other-1m-rltray:latest"
    )
    code, _, err = cli("use", "codex", "2")  # a version named stays that version's tag
    assert code == ExitCode.OK, err
    assert tomlkit.parse(_codex_profile().read_text()).unwrap()["model"] == "tiny-1m-rltray:v2"


def test_use_names_latest_where_the_trainer_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression (review 4): the app bundle carries no trainer, and `rltray use codex`
    failed there with ModuleNotFoundError on the export's naming rule. The name the
    export gave ``latest`` is kept in the served record and read from there."""
    import sys

    from rltray.app.training import served

    paths = _published()
    monkeypatch.setitem(sys.modules, "rltray.trainer.export.ollama_names", None)  # no trainer
    served.write_served(paths, "tiny:1m", 2)  # a record from before the tag was kept
    code, _, err = cli("use", "codex")
    assert code == ExitCode.NOTHING_TO_DO, err
    assert "run `rltray publish` (Ollama running), then this again" in err
    served.write_served(paths, "tiny:1m", 2, "tiny-1m-rltray:latest")
    code, _, err = cli("use", "codex")
    assert code == ExitCode.OK, err
    assert tomlkit.parse(_codex_profile().read_text()).unwrap()["model"] == (
        "tiny-1m-rltray:latest"
    )


def test_use_without_a_model_set_up_says_so() -> None:
    _published(model="")
    code, _, err = cli("use", "codex")
    assert code == ExitCode.USAGE
    assert err.strip() == (
        "rltray: No version is served by Ollama: ollama.model is empty; set it (`rltray "
        "config set ollama.model MODEL`) and rltray publishes each version there."
    )
    assert not _codex_profile().exists()
    config.set_value(Paths.from_env(), "ollama.model", "other:1m")  # nothing published there
    code, _, err = cli("use", "claude-code")
    assert code == ExitCode.NOTHING_TO_DO
    assert "No version is published to Ollama yet for other:1m" in err


def test_the_tag_names_the_app_imports_are_standard_library_only() -> None:
    """`rltray use` names tags with the export's own rule (trainer/export/ollama_names.py),
    the one trainer module the app may import (pyproject's import-linter contract); it must
    stay light: nothing of the trainer's stack, nothing outside the standard library."""
    import sys

    probe = (
        "import json, sys; before = set(sys.modules)\n"
        "import rltray.trainer.export.ollama_names\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)  # fmt: skip
    loaded = json.loads(ran.stdout)
    ours = {"rltray", "rltray.trainer", "rltray.trainer.export",
            "rltray.trainer.export.ollama_names"}
    assert [m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names
            and m not in ours] == []  # fmt: skip


def test_export_model_refuses_a_version_of_another_base_model(tmp_path: Path) -> None:
    """Regression (review 3 r10): `export-model N --format gguf-merged` merged a version
    onto the model set up now although it was trained on another one (rollback refuses
    that pairing; same-shaped siblings load without a complaint)."""
    paths = _published(1, model="")
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "config.json").write_text("{}")
    config.set_value(paths, "training.base_model", str(other))
    for fmt in ("gguf-merged", "gguf-adapter"):
        code, _, err = cli("export-model", "1", "--format", fmt, "-o", str(tmp_path / "out"))
        assert code == ExitCode.USAGE
        assert err.startswith(
            f"rltray: v1 was trained on tiny, but the model set up now is {other}:"
        )
        assert "Set training.base_model back to tiny first, or export it with --format peft." in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    code, _, err = cli("export-model", "1", "--format", "peft", "-o", str(tmp_path / "out"))
    assert code == ExitCode.OK, err  # the PEFT folder is the adapter alone, for any base
