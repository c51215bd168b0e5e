"""End to end: install hooks into a HOME that already has the user's own hooks,
run the installed commands exactly as each agent would, rate from the CLI,
then uninstall and get the user's files back byte for byte.

The CLI runs as a real subprocess (`python -m rltray.app.cli`), like a user's
terminal; the hooks run through the shell from the command strings that the
installer wrote into the agents' config files.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomlkit

CLAUDE_SETTINGS = """{
    "model": "opus",
    "hooks": {
        "Stop": [
            {"hooks": [{"type": "command", "command": "echo user-stop-hook", "timeout": 5}]}
        ]
    }
}
"""

CODEX_CONFIG = """# my codex settings
model = "gpt-5-codex"
notify = ["{notify}", "--from-codex"]

[features]
hooks = true
"""


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rltray.app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def installed_commands(settings: Path, event: str) -> list[str]:
    data = json.loads(settings.read_text())
    return [
        h["command"]
        for group in data["hooks"].get(event, [])
        for h in group["hooks"]
        if "capture.py" in h["command"]
    ]


@pytest.fixture
def user_home(rltray_home: Path) -> Path:
    return Path(os.environ["HOME"])


@pytest.mark.skipif(os.name != "posix", reason="drives the hooks through a POSIX shell")
def test_install_capture_rate_uninstall(user_home: Path, tmp_path: Path) -> None:
    env = dict(os.environ)
    claude = user_home / ".claude" / "settings.json"
    claude.parent.mkdir()
    claude.write_text(CLAUDE_SETTINGS)
    # The user's own notify program records the payload it was chained with.
    seen = tmp_path / "notify-seen.json"
    notify = tmp_path / "my-notify.sh"
    notify.write_text(f'#!/bin/sh\nprintf "%s" "$2" > {shlex.quote(str(seen))}\n')
    notify.chmod(0o755)
    codex_cfg = user_home / ".codex" / "config.toml"
    codex_cfg.parent.mkdir()
    codex_cfg.write_text(CODEX_CONFIG.format(notify=notify))
    originals = {claude: claude.read_bytes(), codex_cfg: codex_cfg.read_bytes()}

    result = run_cli("hooks", "install", env=env)
    assert result.returncode == 0, result.stderr
    assert "/hooks" in result.stdout  # the Codex trust instruction is shown

    # The user's own hook survives the merge.
    data = json.loads(claude.read_text())
    all_commands = [h["command"] for g in data["hooks"]["Stop"] for h in g["hooks"]]
    assert "echo user-stop-hook" in all_commands

    # Claude Code: prompt then stop, payload on stdin, exactly the installed command line.
    session = "sess-e2e-1"
    (prompt_cmd,) = installed_commands(claude, "UserPromptSubmit")
    (stop_cmd,) = installed_commands(claude, "Stop")
    prompt = {
        "session_id": session,
        "hook_event_name": "UserPromptSubmit",
        "cwd": str(tmp_path),
        "transcript_path": None,
        "prompt": "write a function that adds two numbers",
    }
    r = subprocess.run(
        prompt_cmd, shell=True, input=json.dumps(prompt), capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout == ""
    stop = {
        "session_id": session,
        "hook_event_name": "Stop",
        "cwd": str(tmp_path),
        "transcript_path": None,
        "stop_hook_active": False,
        "last_assistant_message": "def add(a, b):\n    return a + b",
    }
    r = subprocess.run(stop_cmd, shell=True, input=json.dumps(stop), capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == ""

    # Codex: notify program from config.toml, payload as the last argument.
    notify_argv = list(tomlkit.parse(codex_cfg.read_text())["notify"])
    payload = {
        "type": "agent-turn-complete",
        "thread-id": "thr-1",
        "turn-id": "turn-1",
        "cwd": str(tmp_path),
        "input-messages": ["rename foo to bar"],
        "last-assistant-message": "Renamed foo to bar in 3 files.",
    }
    r = subprocess.run(
        [*notify_argv, json.dumps(payload)], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0

    status = run_cli("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    counts = json.loads(status.stdout)
    assert counts["turns"] == 2
    assert counts["unrated"] == 2
    assert set(counts["agents"]) == {"claude-code", "codex"}

    good = run_cli("good", env=env)
    assert good.returncode == 0, good.stderr
    assert "rename foo to bar" in good.stdout  # the newest turn, previewed
    counts = json.loads(run_cli("status", "--json", env=env).stdout)
    assert (counts["good"], counts["unrated"]) == (1, 1)

    # The user's own notify program was chained with the same payload.
    for _ in range(50):
        if seen.exists():
            break
        time.sleep(0.1)
    assert json.loads(seen.read_text())["turn-id"] == "turn-1"

    result = run_cli("hooks", "uninstall", env=env)
    assert result.returncode == 0, result.stderr
    for path, original in originals.items():
        assert path.read_bytes() == original, path
    assert not (user_home / ".codex" / "hooks.json").exists()
