"""What every agent installer shares: the registry, entry recognition, JSON style, the manifest."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from rltray.app.errors import UserError
from rltray.app.hooks import hooksjson, jsonfile, registry
from rltray.app.hooks.base import Agent, AgentStatus, InstallReport, is_rltray_command
from rltray.app.hooks.claude_code import ClaudeCode
from rltray.app.hooks.managed import MANIFEST_NAME, Editor, read_config
from rltray.app.paths import Paths

OURS = [
    "/venv/bin/python",
    "-I",
    "-S",
    "/opt/rl tray/app/hooks/capture.py",
    "--home",
    "/d",
    "claude-stop",
]


@pytest.fixture
def paths(rltray_home: Path) -> Paths:
    return Paths.from_env()


# -- registry -------------------------------------------------------------------


def test_registry_lists_agents_by_store_name():
    assert registry.names() == ["claude-code", "codex", "openclaw"]
    agents = registry.all_agents()
    assert [a.name for a in agents] == ["claude-code", "codex", "openclaw"]
    assert [a.display_name for a in agents] == ["Claude Code", "Codex", "OpenClaw"]
    assert all(isinstance(a, Agent) for a in agents)
    assert registry.all_agents()[0] is not agents[0]  # fresh objects, no shared state
    assert registry.get("codex").name == "codex"


def test_unknown_agent_is_a_user_error():
    with pytest.raises(UserError, match="rltray knows: claude-code, codex"):
        registry.get("cursor")


def test_a_third_agent_needs_only_the_interface(paths: Paths, tmp_path: Path):
    class Toy(Agent):
        name = "toy"
        display_name = "Toy"
        executable = "toy"

        def config_home(self) -> Path:
            return tmp_path / ".toy"

        def install(self, paths: Paths) -> InstallReport:
            return InstallReport(self.name, ["ok"])

        def uninstall(self, paths: Paths) -> InstallReport:
            return InstallReport(self.name)

        def status(self, paths: Paths) -> AgentStatus:
            return AgentStatus(self.name, self.display_name, self.detect(), False, {}, [])

    toy = Toy(env={"PATH": ""})
    assert not toy.detect()
    (tmp_path / ".toy").mkdir()
    assert toy.detect() and toy.install(paths).lines == ["ok"]


def test_env_parameter_picks_config_home(tmp_path: Path):
    agent = ClaudeCode(env={"HOME": str(tmp_path), "PATH": ""})
    assert agent.config_home() == tmp_path / ".claude"
    assert ClaudeCode(env={"CLAUDE_CONFIG_DIR": "/x/y"}).config_home() == Path("/x/y")


# -- recognising our entries ----------------------------------------------------


def test_our_commands_are_recognised_in_every_spelling():
    assert is_rltray_command(OURS)
    assert is_rltray_command(shlex.join(OURS))
    assert is_rltray_command(subprocess.list2cmdline(OURS))
    win = [
        r"C:\Py\python.exe",
        "-I",
        "-S",
        r"C:\Program Files\rltray\capture.py",
        "--home",
        "D",
        "claude-stop",
    ]
    assert is_rltray_command(subprocess.list2cmdline(win))


@pytest.mark.parametrize(
    "other",
    ["echo hi", "python mycapture.py --home x", "capture.py", ["notify-send", "done"], 42, None,
     # regression: a user's own capture.py taking --home was taken for ours, replaced on
     # install and deleted on uninstall; ours always ends with one of its events
     "python3 ~/bin/capture.py --home ~/notes/inbox",
     ["python3", "/home/me/bin/capture.py", "--home", "/home/me/notes"]],
)
def test_other_commands_are_not_ours(other):
    assert not is_rltray_command(other)


# -- hooks.json shape -----------------------------------------------------------


def test_strip_removes_only_containers_we_emptied():
    ours = {"type": "command", "command": shlex.join(OURS)}
    doc = {
        "hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": "mine"}, ours]}],
            "UserPromptSubmit": [{"hooks": [ours]}],
            "Notification": [],
        }
    }
    stripped = hooksjson.strip(doc, "f")
    assert stripped == {
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "mine"}]}], "Notification": []}
    }
    assert hooksjson.strip(stripped, "f") is None
    assert hooksjson.strip({"hooks": {"Stop": [{"hooks": [ours]}]}}, "f") == {}


def test_merge_collapses_duplicates_of_ours():
    old = {"type": "command", "command": shlex.join(OURS)}
    doc = {"hooks": {"Stop": [{"hooks": [old]}, {"hooks": [{"command": "x"}, old]}]}}
    new = {"type": "command", "command": "/new/capture.py --home /d claude-stop", "timeout": 10}
    merged = hooksjson.merge(doc, {"Stop": new}, "f")
    assert merged == {"hooks": {"Stop": [{"hooks": [new]}, {"hooks": [{"command": "x"}]}]}}
    assert doc["hooks"]["Stop"][0]["hooks"] == [old]  # input not mutated


# -- JSON style -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("original", "indent"),
    [(b'{\n    "a": 1\n}\n', "    "), (b'{\n\t"a": 1\n}', "\t"), (b'{"a": 1}', "  "), (b"", "  ")],
)
def test_indent_is_detected(original: bytes, indent: str):
    assert jsonfile.detect_indent(original.decode()) == indent


def test_dumps_like_keeps_bom_crlf_and_missing_newline():
    original = '\ufeff{\r\n   "a": "é"\r\n}'.encode()
    out = jsonfile.dumps_like({"a": "é", "b": 1}, original)
    assert out == '\ufeff{\r\n   "a": "é",\r\n   "b": 1\r\n}'.encode()
    assert jsonfile.parse(out, "f") == {"a": "é", "b": 1}


def test_parse_errors_name_the_file_and_position():
    with pytest.raises(
        jsonfile.JSONFileError, match=r"^/x/s.json is not valid JSON \(.* line 2 column 1\)"
    ):
        jsonfile.parse(b'{"a":\n}', "/x/s.json")
    with pytest.raises(jsonfile.JSONFileError, match="JSON object at the top level, not an array"):
        jsonfile.parse_object(b"[]", "/x/s.json")
    assert jsonfile.parse(b"  \n", "f") == {}


@pytest.mark.parametrize(("text", "said"), [
    (b'{"hooks": {"Stop": []}, "hooks": {}}', "has the key 'hooks' twice in one object"),
    (b'{"z": 1e400}', "holds the number 1e400, too large to write back"),
    (b'{"z": NaN}', "holds NaN, which JSON does not allow"),
])  # fmt: skip
def test_a_file_that_would_not_come_back_the_same_is_refused(text: bytes, said: str) -> None:
    """Regression: a duplicate key lost all but its last copy when written back, and a huge
    number came back as Infinity, which Claude Code rejects with the whole file."""
    with pytest.raises(jsonfile.JSONFileError, match=said):
        jsonfile.parse(text, "/x/settings.json")
    assert jsonfile.parse(b'{"n": 1e3, "m": -2.5e-3}', "f") == {"n": 1000.0, "m": -0.0025}


# -- manifest and backups -------------------------------------------------------


def test_missing_backup_falls_back_to_surgical_removal(paths: Paths):
    settings = Path.home() / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"model": "opus"}')
    report = ClaudeCode().install(paths)
    (backup,) = report.backups
    backup.unlink()
    report = ClaudeCode().uninstall(paths)
    assert json.loads(settings.read_text()) == {"model": "opus"}
    assert "backup" in report.lines[0] and "missing" in report.lines[0]


def test_lost_manifest_still_uninstalls_surgically(paths: Paths):
    settings = Path.home() / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"model": "opus"}')
    ClaudeCode().install(paths)
    (paths.backups / MANIFEST_NAME).write_text("not json")
    report = ClaudeCode().uninstall(paths)
    assert json.loads(settings.read_text()) == {"model": "opus"}
    assert "Removed rltray's entries" in report.lines[0]


def test_editor_backups_never_overwrite_each_other(paths: Paths, tmp_path: Path):
    target = tmp_path / "cfg.json"
    editor = Editor(paths, "toy")
    made = []
    for n in range(3):
        target.write_text(f"{n}")
        report = InstallReport("toy")
        editor.install(read_config(target), b"new", pristine=True, report=report)
        made += report.backups
    assert len(set(made)) == 3
    assert sorted(p.read_text() for p in made) == ["0", "1", "2"]
    assert oct(paths.backups.stat().st_mode & 0o777) == "0o700"


def test_a_failed_openclaw_plugin_link_leaves_openclaw_json_as_it_was(
    paths: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the rltray entry (enabled, with conversation access) was written before
    `openclaw plugins install` ran, and stayed when it failed."""
    import os

    from rltray.app.hooks.base import HookInstallError
    from rltray.app.hooks.openclaw import OpenClaw

    program = tmp_path / "bin" / "openclaw"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\necho 'Error: gateway config invalid' >&2\nexit 1\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{program.parent}{os.pathsep}{os.environ['PATH']}")
    config = Path(os.environ["HOME"]) / ".openclaw" / "openclaw.json"
    config.parent.mkdir(parents=True)
    original = b'{\n  "agents": {"defaults": {"model": "x"}}\n}\n'
    config.write_bytes(original)
    agent = OpenClaw()
    agent.accepted = True
    with pytest.raises(HookInstallError, match=r"gateway config invalid.* is as it was"):
        agent.install(paths)
    assert config.read_bytes() == original


# -- files rltray must not replace ----------------------------------------------


def _settings(text: str = '{"model": "opus"}') -> Path:
    settings = Path.home() / ".claude" / "settings.json"
    settings.parent.mkdir(exist_ok=True)
    settings.write_text(text)
    return settings


def test_a_read_only_config_is_left_alone(paths: Paths):
    """A user who made the file read-only meant to keep it as it is."""
    from rltray.app.hooks.base import HookInstallError

    settings = _settings()
    settings.chmod(0o444)
    with pytest.raises(HookInstallError, match=r"read-only; rltray leaves it alone.*chmod u\+w"):
        ClaudeCode().install(paths)
    assert settings.read_text() == '{"model": "opus"}'
    assert oct(settings.stat().st_mode & 0o777) == "0o444"
    assert not list(paths.backups.glob("*.bak"))


def test_a_hard_linked_config_is_left_alone(paths: Paths, tmp_path: Path):
    """Replacing it would give the other name the old bytes: the link would split silently."""
    from rltray.app.hooks.base import HookInstallError

    settings = _settings()
    twin = tmp_path / "dotfiles-settings.json"
    os.link(settings, twin)
    with pytest.raises(HookInstallError, match="2 hard links"):
        ClaudeCode().install(paths)
    assert settings.read_text() == twin.read_text() == '{"model": "opus"}'
    assert settings.stat().st_ino == twin.stat().st_ino


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root to give the file to another user (chown)")
def test_a_config_owned_by_another_user_is_left_alone(paths: Paths):
    from rltray.app.hooks.base import HookInstallError

    settings = _settings()
    os.chown(settings, 65534, 65534)
    with pytest.raises(HookInstallError, match="belongs to another user"):
        ClaudeCode().install(paths)
    assert settings.stat().st_uid == 65534
    assert settings.read_text() == '{"model": "opus"}'


def test_a_file_the_agent_saved_meanwhile_is_not_overwritten(paths: Paths, tmp_path: Path):
    """The agent's save between our read and our write wins; we say to try again."""
    from rltray.app.hooks.base import HookInstallError

    target = tmp_path / "cfg.json"
    target.write_text("ours to read")
    state = read_config(target)
    target.write_text("the agent's save")
    with pytest.raises(HookInstallError, match="changed while rltray was editing it"):
        Editor(paths, "toy").install(state, b"new", pristine=True, report=InstallReport("toy"))
    assert target.read_text() == "the agent's save"


def test_rl_command_removed_without_a_manifest_leaves_a_copy(paths: Paths):
    """With the manifest lost, rltray cannot know whether the user edited the file."""
    _settings()
    ClaudeCode().install(paths)
    command = ClaudeCode().command_file()
    edited = command.read_bytes() + b"\nmy own note\n"
    command.write_bytes(edited)
    (paths.backups / MANIFEST_NAME).unlink()
    report = ClaudeCode().uninstall(paths)
    assert not command.exists()
    assert edited in [b.read_bytes() for b in report.backups]
    assert any("a copy is in" in line for line in report.lines)


def test_backups_are_pruned_but_the_original_is_kept(paths: Paths, tmp_path: Path):
    from rltray.app.hooks.managed import BACKUPS_KEPT

    target = tmp_path / "cfg.json"
    target.write_text("original")
    editor = Editor(paths, "toy")
    editor.install(read_config(target), b"v0", pristine=True, report=InstallReport("toy"))
    for n in range(1, BACKUPS_KEPT + 6):
        editor.install(read_config(target), f"v{n}".encode(), pristine=False,
                       report=InstallReport("toy"))
    kept = sorted(paths.backups.glob("toy-cfg.json-*.bak"))
    texts = [p.read_text() for p in kept]
    assert len(kept) == BACKUPS_KEPT + 1  # the newest ten and the original
    assert "original" in texts
    last = f"v{BACKUPS_KEPT + 4}"
    assert last in texts and "v1" not in texts
    report = InstallReport("toy")
    editor.uninstall(read_config(target), None, report)
    assert target.read_text() == "original"
