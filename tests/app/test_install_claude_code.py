"""Claude Code installer against real settings.json files in the test's private HOME."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from rltray.app.hooks.base import HookInstallError, is_rltray_command
from rltray.app.hooks.claude_code import ClaudeCode
from rltray.app.hooks.managed import MANIFEST_NAME
from rltray.app.paths import Paths

USER_SETTINGS = (
    "{\n"
    '    "model": "opus",\n'
    '    "hooks": {\n'
    '        "Stop": [\n'
    '            {"hooks": [{"type": "command", "command": "echo mine", "timeout": 5}]}\n'
    "        ],\n"
    '        "PreToolUse": [{"matcher": "Bash",\n'
    '                        "hooks": [{"type": "command", "command": "lint"}]}]\n'
    "    },\n"
    '    "permissions": {"allow": ["Bash(ls)"]}\n'
    "}\n"
)


@pytest.fixture
def paths(rltray_home: Path) -> Paths:
    return Paths.from_env()


@pytest.fixture
def settings() -> Path:
    folder = Path.home() / ".claude"
    folder.mkdir()
    return folder / "settings.json"


def ours(doc: dict, event: str) -> list[dict]:
    return [
        h
        for g in doc["hooks"].get(event, [])
        for h in g["hooks"]
        if is_rltray_command(h["command"])
    ]


def backups(paths: Paths) -> list[Path]:
    if not paths.backups.exists():
        return []
    return sorted(p for p in paths.backups.iterdir() if p.name != MANIFEST_NAME)


def test_fresh_install_creates_private_settings_with_both_hooks(paths: Paths, settings: Path):
    report = ClaudeCode().install(paths)
    command = settings.parent / "commands" / "rl.md"
    assert report.changed == [settings, command]
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600
    assert stat.S_IMODE(command.stat().st_mode) == 0o600
    doc = json.loads(settings.read_text())
    for event, arg, matcher in (("Stop", "claude-stop", None),
                                ("UserPromptSubmit", "claude-prompt", None),
                                ("UserPromptExpansion", "claude-expand", "rl"),
                                ("SessionStart", "claude-start", None)):
        (group,) = doc["hooks"][event]
        assert group.get("matcher") == matcher
        (handler,) = group["hooks"]
        assert handler["type"] == "command" and handler["timeout"] == 10
        assert handler["command"].endswith(arg) and "capture.py" in handler["command"]
    assert settings.read_text().startswith('{\n  "hooks"')  # 2 spaces for a new file
    assert ClaudeCode().status(paths).installed


def test_install_keeps_user_hooks_keys_order_and_indent(paths: Paths, settings: Path):
    settings.write_text(USER_SETTINGS)
    ClaudeCode().install(paths)
    text = settings.read_text()
    doc = json.loads(text)
    assert list(doc) == ["model", "hooks", "permissions"]
    assert list(doc["hooks"]) == ["Stop", "PreToolUse", "UserPromptSubmit", "UserPromptExpansion",
                                  "SessionStart"]
    assert doc["hooks"]["Stop"][0]["hooks"][0]["command"] == "echo mine"  # theirs stays first
    assert len(ours(doc, "Stop")) == 1 and len(ours(doc, "UserPromptSubmit")) == 1
    assert doc["hooks"]["PreToolUse"] == json.loads(USER_SETTINGS)["hooks"]["PreToolUse"]
    assert doc["permissions"] == {"allow": ["Bash(ls)"]}
    assert '\n    "model"' in text  # their 4-space indentation kept


def test_second_install_changes_nothing(paths: Paths, settings: Path):
    settings.write_text(USER_SETTINGS)
    ClaudeCode().install(paths)
    first = settings.read_bytes()
    made = backups(paths)
    report = ClaudeCode().install(paths)
    assert settings.read_bytes() == first
    assert report.changed == [] and "nothing changed" in report.lines[0]
    assert backups(paths) == made


def test_install_backs_up_original_privately(paths: Paths, settings: Path):
    settings.write_text(USER_SETTINGS)
    report = ClaudeCode().install(paths)
    (backup,) = backups(paths)
    assert report.backups == [backup]
    assert backup.read_text() == USER_SETTINGS
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    manifest = paths.backups / MANIFEST_NAME
    assert stat.S_IMODE(manifest.stat().st_mode) == 0o600
    entry = json.loads(manifest.read_text())["files"][str(settings)]
    assert entry["backup"] == str(backup) and entry["existed"] is True


def test_install_keeps_existing_file_mode(paths: Paths, settings: Path):
    settings.write_text(USER_SETTINGS)
    settings.chmod(0o640)
    ClaudeCode().install(paths)
    assert stat.S_IMODE(settings.stat().st_mode) == 0o640


def test_malformed_json_is_refused_and_untouched(paths: Paths, settings: Path):
    bad = b'{"hooks": {"Stop": [}\n'
    settings.write_bytes(bad)
    with pytest.raises(HookInstallError) as err:
        ClaudeCode().install(paths)
    message = str(err.value)
    assert str(settings) in message and "not valid JSON" in message and "line 1" in message
    assert settings.read_bytes() == bad
    assert backups(paths) == []


def test_wrong_shape_is_refused(paths: Paths, settings: Path):
    settings.write_text('{"hooks": []}')
    with pytest.raises(HookInstallError, match="not a JSON object"):
        ClaudeCode().install(paths)
    assert settings.read_text() == '{"hooks": []}'


@pytest.mark.skipif(os.name != "posix", reason="symlinks need privileges on Windows")
def test_symlinked_settings_are_refused(paths: Paths, settings: Path, tmp_path: Path):
    real = tmp_path / "dotfiles-settings.json"
    real.write_text(USER_SETTINGS)
    settings.symlink_to(real)
    with pytest.raises(HookInstallError, match="symbolic link"):
        ClaudeCode().install(paths)
    assert settings.is_symlink() and real.read_text() == USER_SETTINGS
    with pytest.raises(HookInstallError, match="symbolic link"):
        ClaudeCode().uninstall(paths)


def test_uninstall_restores_original_bytes_exactly(paths: Paths, settings: Path):
    # Formatting json.dumps would never reproduce: tabs, odd spacing, no final newline.
    original = (
        b'{\t"model" :"opus",  "hooks":{"Stop":[{"hooks":[{"type":"command","command":"x"}]}]}}'
    )
    settings.write_bytes(original)
    settings.chmod(0o644)
    ClaudeCode().install(paths)
    assert settings.read_bytes() != original
    report = ClaudeCode().uninstall(paths)
    assert settings.read_bytes() == original
    assert stat.S_IMODE(settings.stat().st_mode) == 0o644
    command = settings.parent / "commands" / "rl.md"
    assert report.changed == [settings, command] and "exactly" in report.lines[0]
    assert not command.parent.exists()  # rltray made commands/ for it, and removes it again
    assert str(settings) not in json.loads((paths.backups / MANIFEST_NAME).read_text())["files"]


def test_uninstall_deletes_a_file_rltray_created(paths: Paths, settings: Path):
    ClaudeCode().install(paths)
    ClaudeCode().uninstall(paths)
    assert not settings.exists()


def test_uninstall_after_user_edits_keeps_their_edits(paths: Paths, settings: Path):
    settings.write_text(USER_SETTINGS)
    ClaudeCode().install(paths)
    doc = json.loads(settings.read_text())
    doc["theme"] = "dark"
    doc["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "echo later"}]})
    settings.write_text(json.dumps(doc, indent=4))
    report = ClaudeCode().uninstall(paths)
    after = json.loads(settings.read_text())
    assert after["theme"] == "dark"
    commands = [h["command"] for g in after["hooks"]["Stop"] for h in g["hooks"]]
    assert commands == ["echo mine", "echo later"]
    assert "UserPromptSubmit" not in after["hooks"]  # emptied by removing ours only
    assert "kept your edits" in " ".join(report.lines)
    assert len(backups(paths)) == 2  # the original and the user's edited version


def test_reinstall_after_python_path_change_replaces_in_place(paths: Paths, settings: Path):
    settings.write_text(USER_SETTINGS)
    ClaudeCode(python="/old/venv/bin/python").install(paths)
    old = json.loads(settings.read_text())
    assert "/old/venv/bin/python" in ours(old, "Stop")[0]["command"]
    assert ClaudeCode().status(paths).stale
    report = ClaudeCode().install(paths)
    assert "Updated" in report.lines[0]
    new = json.loads(settings.read_text())
    for event in ("Stop", "UserPromptSubmit"):
        (handler,) = ours(new, event)
        assert "/old/venv" not in handler["command"]
    assert [len(g["hooks"]) for g in new["hooks"]["Stop"]] == [1, 1]
    assert not ClaudeCode().status(paths).stale
    ClaudeCode().uninstall(paths)
    assert settings.read_text() == USER_SETTINGS  # the first original is still on record


def test_status_reports_pieces_and_disabled_hooks(paths: Paths, settings: Path):
    settings.write_text('{"disableAllHooks": true}')
    st = ClaudeCode().status(paths)
    assert st.name == "claude-code" and not st.installed
    assert st.pieces == {"Stop": False, "UserPromptSubmit": False, "UserPromptExpansion": False,
                         "SessionStart": False, "/rl command": False}
    assert st.hooks_disabled and "disableAllHooks" in st.notes[0]
    assert st.config_files == [settings, settings.parent / "commands" / "rl.md"]


def test_claude_config_dir_is_honoured(paths: Paths, tmp_path: Path, monkeypatch):
    custom = tmp_path / "claude-elsewhere"
    custom.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(custom))
    ClaudeCode().install(paths)
    assert (custom / "settings.json").exists()
    assert not (Path.home() / ".claude").exists()


def test_not_installed_agent_is_left_alone(paths: Paths, monkeypatch):
    monkeypatch.setenv("PATH", "")
    report = ClaudeCode().install(paths)
    assert report.changed == [] and "not found" in report.lines[0]
    assert not (Path.home() / ".claude").exists()


@pytest.mark.skipif(os.name != "posix", reason="runs the command through a POSIX shell")
def test_installed_command_runs_through_the_shell(paths: Paths, settings: Path, tmp_path: Path):
    ClaudeCode(python=sys.executable).install(paths)
    doc = json.loads(settings.read_text())
    session = "s-shell-1"
    prompt = {
        "session_id": session,
        "hook_event_name": "UserPromptSubmit",
        "cwd": str(tmp_path),
        "transcript_path": None,
        "prompt": "add two numbers",
    }
    stop = {
        "session_id": session,
        "hook_event_name": "Stop",
        "cwd": str(tmp_path),
        "transcript_path": None,
        "stop_hook_active": False,
        "last_assistant_message": "def add(a, b): return a + b",
    }
    for event, payload in (("UserPromptSubmit", prompt), ("Stop", stop)):
        (handler,) = ours(doc, event)
        run = subprocess.run(
            handler["command"],
            shell=True,
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert run.returncode == 0 and run.stdout == "", run.stderr
    (spooled,) = list(paths.spool_incoming.glob("*.json"))
    record = json.loads(spooled.read_text())
    assert (record["agent"], record["prompt"]) == ("claude-code", "add two numbers")
    assert record["response"] == "def add(a, b): return a + b"


def test_rl_command_file_is_installed_and_removed_byte_for_byte(paths: Paths, settings: Path):
    """Issue 19: Claude Code answers an unknown `/rl` itself ("Unknown command: /rl"), so the
    install adds a user-level command that makes it known; uninstall takes exactly it away."""
    commands = settings.parent / "commands"
    commands.mkdir()
    mine = commands / "review.md"
    mine.write_bytes(b"Review $ARGUMENTS\n")
    ClaudeCode().install(paths)
    rl = commands / "rl.md"
    assert b"/rl $ARGUMENTS" in rl.read_bytes()
    assert ClaudeCode().status(paths).pieces["/rl command"]
    ClaudeCode().uninstall(paths)
    assert not rl.exists() and mine.read_bytes() == b"Review $ARGUMENTS\n"
    assert sorted(p.name for p in commands.iterdir()) == ["review.md"]  # their folder stays


def test_users_own_rl_command_is_left_alone(paths: Paths, settings: Path):
    rl = settings.parent / "commands" / "rl.md"
    rl.parent.mkdir()
    rl.write_bytes(b"my own rl\n")
    report = ClaudeCode().install(paths)
    assert rl.read_bytes() == b"my own rl\n" and "not rltray's" in " ".join(report.lines)
    st = ClaudeCode().status(paths)
    assert st.installed and "your own /rl command" in " ".join(st.notes)
    ClaudeCode().uninstall(paths)
    assert rl.read_bytes() == b"my own rl\n"


def test_rl_command_edited_by_the_user_survives_uninstall(paths: Paths, settings: Path):
    ClaudeCode().install(paths)
    rl = settings.parent / "commands" / "rl.md"
    rl.write_bytes(rl.read_bytes() + b"my note\n")
    report = ClaudeCode().uninstall(paths)
    assert rl.read_bytes().endswith(b"my note\n") and "left it alone" in " ".join(report.lines)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_folders_made_for_agent_files_are_never_writable_by_others(
    paths: Paths, tmp_path: Path, monkeypatch
):
    """Regression (review2-sec): under umask 000 the parents of an agent's config folder
    that rltray made were 0777, so another user could swap the folder (and the hooks in
    it) for their own."""
    custom = tmp_path / "cfg" / "nested" / "claude"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(custom))
    bin_dir = tmp_path / "bin"  # the agent is installed, its config folder not made yet
    bin_dir.mkdir()
    (bin_dir / "claude").write_text("#!/bin/sh\n")
    (bin_dir / "claude").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    paths.ensure()
    old = os.umask(0)
    try:
        ClaudeCode().install(paths)
    finally:
        os.umask(old)
    assert (custom / "settings.json").exists()
    for folder in (tmp_path / "cfg", tmp_path / "cfg" / "nested"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder
    for folder in (custom, custom / "commands"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
