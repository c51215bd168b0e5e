"""Codex installer: notify in config.toml (with chaining) and hooks.json, on real files."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import tomlkit
from rltray.app.hooks.base import HookInstallError, is_rltray_command
from rltray.app.hooks.codex import TRUST_NOTE, Codex, chained_program
from rltray.app.hooks.managed import MANIFEST_NAME
from rltray.app.paths import Paths

USER_CONFIG = """# my codex settings
model = "gpt-5-codex"  # the good one
approval_policy = "on-request"

[features]
web_search = true

[profiles.fast]
model = "gpt-5-mini"
"""

THEIR_NOTIFY = ["/usr/local/bin/my-notify", "--loud"]


@pytest.fixture
def paths(rltray_home: Path) -> Paths:
    return Paths.from_env()


@pytest.fixture
def codex_home() -> Path:
    folder = Path.home() / ".codex"
    folder.mkdir()
    return folder


def backups(paths: Paths) -> list[Path]:
    if not paths.backups.exists():
        return []
    return sorted(p for p in paths.backups.iterdir() if p.name != MANIFEST_NAME)


def notify_of(config: Path) -> list[str]:
    return tomlkit.parse(config.read_text()).unwrap()["notify"]


def test_fresh_install_writes_notify_and_hooks_and_explains_trust(paths: Paths, codex_home: Path):
    report = Codex().install(paths)
    config, hooks = codex_home / "config.toml", codex_home / "hooks.json"
    skill = codex_home / "skills" / "rl"
    assert report.changed == [config, hooks, skill / "SKILL.md", skill / "agents" / "openai.yaml"]
    assert TRUST_NOTE in report.lines
    assert TRUST_NOTE == (
        "Codex skips user hooks until you trust them: open Codex, type /hooks, and trust the "
        "rltray hooks. Until then rltray still captures turns through `notify`."
    )
    argv = notify_of(config)
    assert argv[-1] == "codex-notify" and is_rltray_command(argv) and "--chain" not in argv
    doc = json.loads(hooks.read_text())
    for event, arg in (("Stop", "codex-stop"), ("UserPromptSubmit", "codex-prompt"),
                       ("SessionStart", "codex-start")):
        (group,) = doc["hooks"][event]
        (handler,) = group["hooks"]
        assert handler["command"].endswith(arg) and handler["timeout"] == 10
    for path in (config, hooks):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    st = Codex().status(paths)
    assert st.installed and st.pieces == {"notify": True, "Stop": True, "UserPromptSubmit": True,
                                          "SessionStart": True, "$rl skill": True}
    assert TRUST_NOTE in st.notes


def test_notify_is_top_level_and_comments_survive(paths: Paths, codex_home: Path):
    config = codex_home / "config.toml"
    config.write_text(USER_CONFIG)
    Codex().install(paths)
    text = config.read_text()
    assert "# my codex settings" in text and "# the good one" in text
    assert text.index("notify = ") < text.index("[features]")
    doc = tomlkit.parse(text).unwrap()
    assert list(doc) == ["model", "approval_policy", "notify", "features", "profiles"]
    assert "notify" not in doc["features"] and "notify" not in doc["profiles"]["fast"]
    # Everything else is byte-identical: only the notify line was added.
    assert (
        text.replace(f"notify = {tomlkit.item(notify_of(config)).as_string()}\n", "") == USER_CONFIG
    )


def test_second_install_changes_nothing(paths: Paths, codex_home: Path):
    (codex_home / "config.toml").write_text(USER_CONFIG)
    Codex().install(paths)
    files = {p: p.read_bytes() for p in codex_home.rglob("*") if p.is_file()}
    made = backups(paths)
    report = Codex().install(paths)
    assert report.changed == [] and any("nothing changed" in line for line in report.lines)
    assert {p: p.read_bytes() for p in codex_home.rglob("*") if p.is_file()} == files
    assert backups(paths) == made


def test_existing_notify_is_chained_recorded_and_restored(paths: Paths, codex_home: Path):
    config = codex_home / "config.toml"
    original = USER_CONFIG.replace(
        'approval_policy = "on-request"\n',
        'approval_policy = "on-request"\n'
        'notify = [ "/usr/local/bin/my-notify",  "--loud" ]  # mine\n',
    ).encode()
    config.write_bytes(original)
    report = Codex().install(paths)
    argv = notify_of(config)
    assert is_rltray_command(argv) and chained_program(argv) == THEIR_NOTIFY
    assert any("my-notify" in line and "still runs" in line for line in report.lines)
    manifest = json.loads((paths.backups / MANIFEST_NAME).read_text())
    assert manifest["files"][str(config)]["chained_notify"] == THEIR_NOTIFY
    assert any("Chains your notify program" in note for note in Codex().status(paths).notes)
    Codex().uninstall(paths)
    assert config.read_bytes() == original
    assert not (codex_home / "hooks.json").exists()


def test_chained_notify_restored_after_user_edits(paths: Paths, codex_home: Path):
    config = codex_home / "config.toml"
    config.write_text(f"notify = {json.dumps(THEIR_NOTIFY)}\n" + USER_CONFIG)
    Codex().install(paths)
    config.write_text(config.read_text() + "\n[tui]\nnotifications = true\n")
    report = Codex().uninstall(paths)
    doc = tomlkit.parse(config.read_text()).unwrap()
    assert doc["notify"] == THEIR_NOTIFY
    assert doc["tui"] == {"notifications": True} and doc["model"] == "gpt-5-codex"
    assert "kept your edits" in " ".join(report.lines)


def test_reinstall_after_path_change_keeps_the_chain(paths: Paths, codex_home: Path):
    config = codex_home / "config.toml"
    original = f"notify = {json.dumps(THEIR_NOTIFY)}\n" + USER_CONFIG
    config.write_text(original)
    Codex(python="/old/venv/bin/python").install(paths)
    assert notify_of(config)[0] == "/old/venv/bin/python"
    assert Codex().status(paths).stale
    Codex().install(paths)
    argv = notify_of(config)
    assert argv[0] != "/old/venv/bin/python" and chained_program(argv) == THEIR_NOTIFY
    hooks = json.loads((codex_home / "hooks.json").read_text())["hooks"]
    assert [len(hooks[e]) for e in ("Stop", "UserPromptSubmit", "SessionStart")] == [1, 1, 1]
    assert not Codex().status(paths).stale
    Codex().uninstall(paths)
    assert config.read_text() == original


def test_malformed_toml_is_refused_before_anything_is_written(paths: Paths, codex_home: Path):
    config = codex_home / "config.toml"
    bad = b'model = "gpt-5\n[features\n'
    config.write_bytes(bad)
    with pytest.raises(HookInstallError) as err:
        Codex().install(paths)
    assert str(config) in str(err.value) and "not valid TOML" in str(err.value)
    assert config.read_bytes() == bad
    assert not (codex_home / "hooks.json").exists()
    assert backups(paths) == []


def test_malformed_hooks_json_is_refused_and_config_untouched(paths: Paths, codex_home: Path):
    (codex_home / "config.toml").write_text(USER_CONFIG)
    (codex_home / "hooks.json").write_text("{oops")
    with pytest.raises(HookInstallError, match=r"hooks\.json is not valid JSON"):
        Codex().install(paths)
    assert (codex_home / "config.toml").read_text() == USER_CONFIG
    assert (codex_home / "hooks.json").read_text() == "{oops"


def test_non_list_notify_is_refused(paths: Paths, codex_home: Path):
    (codex_home / "config.toml").write_text('notify = "my-notify"\n')
    with pytest.raises(HookInstallError, match="not a list of strings"):
        Codex().install(paths)


@pytest.mark.skipif(os.name != "posix", reason="symlinks need privileges on Windows")
def test_symlinked_config_is_refused(paths: Paths, codex_home: Path, tmp_path: Path):
    real = tmp_path / "real-config.toml"
    real.write_text(USER_CONFIG)
    (codex_home / "config.toml").symlink_to(real)
    with pytest.raises(HookInstallError, match="symbolic link"):
        Codex().install(paths)
    assert real.read_text() == USER_CONFIG
    assert not (codex_home / "hooks.json").exists()


def test_user_hooks_in_hooks_json_are_kept(paths: Paths, codex_home: Path):
    hooks = codex_home / "hooks.json"
    theirs = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}}
    hooks.write_text(json.dumps(theirs))
    Codex().install(paths)
    doc = json.loads(hooks.read_text())
    assert doc["hooks"]["Stop"][0] == theirs["hooks"]["Stop"][0]
    assert len(doc["hooks"]["Stop"]) == 2
    Codex().uninstall(paths)
    assert json.loads(hooks.read_text()) == theirs


@pytest.mark.parametrize("flag", ["hooks", "codex_hooks"])
def test_status_sees_hooks_feature_turned_off(paths: Paths, codex_home: Path, flag: str):
    (codex_home / "config.toml").write_text(f"[features]\n{flag} = false\n")
    report = Codex().install(paths)
    st = Codex().status(paths)
    assert st.hooks_disabled and st.installed
    assert any("turned off" in note for note in st.notes)
    assert any("turned off" in line for line in report.lines)
    assert tomlkit.parse((codex_home / "config.toml").read_text())["features"][flag] is False


def test_status_when_nothing_installed(paths: Paths, codex_home: Path):
    st = Codex().status(paths)
    assert st.name == "codex" and not st.installed and not st.hooks_disabled
    assert st.pieces == {"notify": False, "Stop": False, "UserPromptSubmit": False,
                         "SessionStart": False, "$rl skill": False}
    skill = codex_home / "skills" / "rl"
    assert st.config_files == [codex_home / "config.toml", codex_home / "hooks.json",
                               skill / "SKILL.md", skill / "agents" / "openai.yaml"]


def test_codex_home_is_honoured(paths: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    custom = tmp_path / "codex-elsewhere"
    custom.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(custom))
    Codex().install(paths)
    assert (custom / "config.toml").exists() and (custom / "hooks.json").exists()


@pytest.mark.skipif(os.name != "posix", reason="runs the commands through a POSIX shell")
def test_installed_notify_and_stop_hook_capture_one_turn(paths: Paths, codex_home: Path, tmp_path):
    Codex(python=sys.executable).install(paths)
    payload = {
        "type": "agent-turn-complete",
        "thread-id": "thr-1",
        "turn-id": "turn-1",
        "cwd": str(tmp_path),
        "input-messages": ["rename foo"],
        "last-assistant-message": "Renamed.",
    }
    argv = notify_of(codex_home / "config.toml")
    run = subprocess.run([*argv, json.dumps(payload)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    doc = json.loads((codex_home / "hooks.json").read_text())
    (group,) = doc["hooks"]["Stop"]
    stop = {
        "session_id": "thr-1",
        "turn_id": "turn-1",
        "transcript_path": None,
        "cwd": str(tmp_path),
        "hook_event_name": "Stop",
        "model": "gpt-5-codex",
        "permission_mode": "default",
        "stop_hook_active": False,
        "last_assistant_message": "Renamed.",
    }
    run = subprocess.run(
        group["hooks"][0]["command"],
        shell=True,
        input=json.dumps(stop),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0 and run.stdout == "", run.stderr
    records = [json.loads(p.read_text()) for p in sorted(paths.spool_incoming.glob("*.json"))]
    assert {(r["agent"], r["session"], r["turn"]) for r in records} == {
        ("codex", "thr-1", "turn-1")
    }


def test_rl_skill_is_installed_and_uninstall_restores_the_tree(paths: Paths, codex_home: Path):
    """Issue 19: Codex's terminal UI refuses `/rl`; the `rl` skill makes `$rl` known. It never
    loads on its own (policy), and uninstall leaves the user's skills folder as it was."""
    (codex_home / "config.toml").write_text(USER_CONFIG)
    theirs = codex_home / "skills" / "mine" / "SKILL.md"
    theirs.parent.mkdir(parents=True)
    theirs.write_bytes(b"---\nname: mine\n---\nbody\n")
    before = {p: p.read_bytes() for p in codex_home.rglob("*") if p.is_file()}
    Codex().install(paths)
    skill = codex_home / "skills" / "rl"
    assert b"name: rl\n" in (skill / "SKILL.md").read_bytes()
    assert b"allow_implicit_invocation: false" in (skill / "agents" / "openai.yaml").read_bytes()
    Codex().uninstall(paths)
    after = {p: p.read_bytes() for p in codex_home.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in (codex_home / "skills").iterdir()) == ["mine"]
