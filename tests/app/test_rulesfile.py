"""Claude Code's opt-in lessons file (issue 24): ``~/.claude/rules/rltray-lessons.md``, written
only when asked, rewritten with the lessons until the user edits it, removed by uninstall."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from rltray.app.errors import ExitCode
from rltray.app.hooks import lessonfiles, rulesfile
from rltray.app.hooks.claude_code import ClaudeCode
from rltray.app.hooks.managed import MANIFEST_NAME
from rltray.app.paths import Paths

from tests.app.test_cli import cli


@pytest.fixture
def paths(rltray_home: Path) -> Paths:
    (Path.home() / ".claude").mkdir()
    return Paths.from_env()


@pytest.fixture
def rules() -> Path:
    return Path.home() / ".claude" / "rules" / rulesfile.NAME


def lessons(paths: Paths, text: str | None) -> None:
    lessonfiles.write_all(str(paths.home), "claude-code", {lessonfiles.GLOBAL: text} if text
                          else {})


def backups(paths: Paths) -> list[str]:
    if not paths.backups.exists():
        return []
    return sorted(p.name for p in paths.backups.iterdir() if p.name != MANIFEST_NAME)


def test_only_on_request_and_rewritten_with_the_lessons_until_the_user_edits_it(
    paths: Paths, rules: Path
) -> None:
    lessons(paths, "- Run one test.")
    ClaudeCode().install(paths)
    assert not rules.exists() and not ClaudeCode().refresh_lessons_file(paths)  # not asked
    report = ClaudeCode().install_lessons_file(paths)
    assert rules.read_bytes() == rulesfile.HEADER + b"- Run one test.\n"
    assert stat.S_IMODE(rules.stat().st_mode) == 0o600
    assert report.changed == [rules] and "Claude Code reads it at session start" in report.lines[0]
    made = backups(paths)
    lessons(paths, "- Be brief.")
    assert ClaudeCode().refresh_lessons_file(paths)
    assert rules.read_bytes() == rulesfile.HEADER + b"- Be brief.\n"
    assert not ClaudeCode().refresh_lessons_file(paths)  # nothing new
    assert backups(paths) == made  # every version was rltray's: nothing to back up
    lessons(paths, None)  # off: the file says nothing more than its header
    assert ClaudeCode().refresh_lessons_file(paths) and rules.read_bytes() == rulesfile.HEADER
    edited = rules.read_bytes() + b"- My own rule.\n"
    rules.write_bytes(edited)
    lessons(paths, "- Something new.")
    assert not ClaudeCode().refresh_lessons_file(paths)
    report = ClaudeCode().install_lessons_file(paths)
    assert rules.read_bytes() == edited and "You edited" in report.lines[0]
    report = ClaudeCode().uninstall(paths)
    assert rules.read_bytes() == edited
    assert any("changed since rltray wrote it; left it alone" in line for line in report.lines)


def test_uninstall_removes_an_untouched_file_and_the_folder_it_made(
    paths: Paths, rules: Path
) -> None:
    ClaudeCode().install(paths)
    report = ClaudeCode().install_lessons_file(paths)
    assert "holds no lessons yet" in report.lines[0]
    ClaudeCode().uninstall(paths)
    assert not rules.parent.exists()
    theirs = rules.parent / "style.md"
    rules.parent.mkdir()
    theirs.write_text("mine\n")
    ClaudeCode().install_lessons_file(paths)
    ClaudeCode().uninstall(paths)
    assert not rules.exists() and theirs.read_text() == "mine\n"


def test_uninstall_without_the_file_says_nothing_about_it(paths: Paths) -> None:
    ClaudeCode().install(paths)
    report = ClaudeCode().uninstall(paths)
    assert not any(rulesfile.NAME in line for line in report.lines)


def test_deleting_the_file_ends_the_opt_in(paths: Paths, rules: Path) -> None:
    ClaudeCode().install_lessons_file(paths)
    rules.unlink()
    lessons(paths, "- New.")
    assert not ClaudeCode().refresh_lessons_file(paths) and not rules.exists()
    assert not ClaudeCode().refresh_lessons_file(paths)


def test_a_users_own_file_of_that_name_is_never_written(paths: Paths, rules: Path) -> None:
    rules.parent.mkdir()
    rules.write_text("my notes\n")
    lessons(paths, "- New.")
    report = ClaudeCode().install_lessons_file(paths)
    assert "is not rltray's; left it alone" in report.lines[0]
    assert not ClaudeCode().refresh_lessons_file(paths)
    ClaudeCode().uninstall(paths)
    assert rules.read_text() == "my notes\n"


def test_claude_config_dir_is_where_the_file_goes(
    paths: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    custom = tmp_path / "claude-elsewhere"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(custom))
    ClaudeCode().install_lessons_file(paths)
    assert (custom / "rules" / rulesfile.NAME).exists()
    assert not (Path.home() / ".claude" / "rules").exists()


def test_the_cli_writes_it_on_request_only(paths: Paths, rules: Path) -> None:
    (Path.home() / ".codex").mkdir()
    code, out, err = cli("hooks", "install")
    assert code == ExitCode.OK, err
    assert not rules.exists()
    code, out, err = cli("hooks", "install", "--lessons-file")
    assert code == ExitCode.OK, err
    assert rules.exists() and f"Wrote {rules}" in " ".join(out.split())
    assert "Codex has no rules folder" in out
    code, out, err = cli("hooks", "uninstall", "--lessons-file")
    assert code == ExitCode.USAGE and "--lessons-file goes with" in err
    assert cli("hooks", "uninstall")[0] == ExitCode.OK
    assert not rules.exists() and not os.path.exists(rules.parent)


def test_a_process_without_claude_config_dir_still_rewrites_the_file_installed_with_it(
    paths: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 3, finding 6): the file was refreshed at the path the refreshing
    process computed from its own CLAUDE_CONFIG_DIR. Installed from a shell that set it, the
    tray (started at login, without it) never rewrote it: a lesson the user deleted stayed
    in the file Claude Code reads as their instruction. The manifest's path is refreshed."""
    custom = tmp_path / "claude-elsewhere"
    custom.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(custom))
    assert cli("lessons", "on", "--agent", "claude-code")[0] == ExitCode.OK
    assert cli("lessons", "add", "--global", "Never print the staging password")[0] == 0
    code, _, err = cli("hooks", "install", "--agent", "claude-code", "--lessons-file")
    assert code == ExitCode.OK, err
    written = custom / "rules" / rulesfile.NAME
    assert b"Never print the staging password" in written.read_bytes()
    monkeypatch.delenv("CLAUDE_CONFIG_DIR")  # the tray's environment
    (key,) = [row["id"] for row in json.loads(cli("lessons", "list", "--json")[1])]
    assert cli("lessons", "delete", key)[0] == ExitCode.OK
    assert written.read_bytes() == rulesfile.HEADER
    assert not (Path.home() / ".claude" / "rules").exists()  # none made where none was asked


def test_a_config_folder_that_is_not_there_now_does_not_end_the_opt_in(
    paths: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 4, item 10): a file installed in a config folder on a drive that
    was not mounted at the next refresh (or a network home that was down) was taken for one
    the user deleted, and the opt-in ended for good: once the drive was back, a lesson the
    user deleted stayed in the file Claude Code reads as their instruction."""
    drive = tmp_path / "usb"
    custom = drive / "claude"
    custom.mkdir(parents=True)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(custom))
    lessons(paths, "- Never print the staging password.")
    ClaudeCode().install_lessons_file(paths)
    written = custom / "rules" / rulesfile.NAME
    assert b"staging password" in written.read_bytes()
    monkeypatch.delenv("CLAUDE_CONFIG_DIR")  # the tray's environment
    drive.rename(tmp_path / "usb-unmounted")  # the drive is away; its mount point stays
    drive.mkdir()
    lessons(paths, "- Be brief.")
    assert not ClaudeCode().refresh_lessons_file(paths)
    drive.rmdir()
    (tmp_path / "usb-unmounted").rename(drive)  # mounted again
    assert ClaudeCode().refresh_lessons_file(paths)
    assert written.read_bytes() == rulesfile.HEADER + b"- Be brief.\n"
    written.unlink()  # the folder is there and the file is gone: the user's, that ends it
    assert not ClaudeCode().refresh_lessons_file(paths)
    written.parent.rmdir()
    lessons(paths, "- Newer.")
    assert not ClaudeCode().refresh_lessons_file(paths) and not written.exists()
