"""rltray with the REAL Claude Code and Codex programs (pinned npm releases), not payloads
shaped like their docs: capture, `/rl` in print/exec mode and in both terminal UIs, Codex
with hooks trusted and not, `rltray use`, and uninstall byte for byte.

The agents talk to tests/support/fakemodel.py on 127.0.0.1, which is also their HTTP(S)
proxy: a request for any outside host is refused there (the agents do try telemetry and
feature-flag hosts; those attempts fail, nothing leaves the machine). Marked slow: the
first run installs both agents from npm into a cache outside the repo (skipped, with the
reason, when npm or the registry is not reachable); later runs take about a minute.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from rltray.app import spool
from rltray.app.paths import Paths
from rltray.app.store import Store
from rltray.app.training import served

from tests.support.fakemodel import TOOL_OUTPUT, FakeModel
from tests.support.realagents import (
    CODEX_READY,
    Agents,
    Terminal,
    through_codex_dialogs,
    wait_until,
)

pytestmark = pytest.mark.slow

# (A "model" key would not do: Claude Code 2.1.197 migrates "opus" and rewrites the file, and
# uninstall then rightly keeps that edit and removes only rltray's entries.)
USER_CLAUDE_SETTINGS = b'{\n    "permissions": {"allow": ["Bash(ls)"]},\n    "hooks": {"Stop": [' \
    b'{"hooks": [\n        {"type": "command", "command": "true", "timeout": 5}]}]}\n}\n'
USER_COMMAND = b"Review $ARGUMENTS carefully.\n"


def ingest() -> dict[str, Any]:
    """Every waiting hook record into the database; {prompt: turn} (newest first)."""
    paths = Paths.from_env()
    with Store.open(paths) as store:
        spool.ingest(paths, store)
        return {t.prompt: t for t in store.list_turns()}


def rating(prompt: str) -> int | None:
    turn = ingest()[prompt]
    return None if turn.rating is None else turn.rating.value


def spooled(agents: Agents) -> int:
    folder = agents.rltray_home / "spool" / "incoming"
    return len(list(folder.glob("*.json"))) if folder.is_dir() else 0


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def last_json(out: str) -> dict[str, Any]:
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


# -- Claude Code ---------------------------------------------------------------------------


def test_claude_code_print_mode(agents: Agents, fake_model: FakeModel) -> None:
    claude_dir = agents.home / ".claude"
    (claude_dir / "settings.json").write_bytes(USER_CLAUDE_SETTINGS)
    (claude_dir / "commands").mkdir()
    (claude_dir / "commands" / "review.md").write_bytes(USER_COMMAND)
    agents.rltray("hooks", "install", "--agent", "claude-code")

    session = last_json(agents.claude("-p", "hello there", "--output-format", "json"))
    sid = session["session_id"]
    agents.claude("-p", "--resume", sid, "--allowedTools=Bash", "RUN-TOOL then answer")
    (tool_request,) = [s for s in fake_model.answered("anthropic")
                       if "RUN-TOOL then answer" in s.user_texts and s.answer]
    assert "hello there" in tool_request.user_texts  # the resumed session's context was sent
    turns = ingest()
    assert turns["hello there"].response.startswith("ANSWER")
    tool_turn = turns["RUN-TOOL then answer"]
    assert tool_turn.response.startswith(f"The tool printed {TOOL_OUTPUT}.")
    assert {"role": "user", "content": "hello there"} in tool_turn.context

    asked = len(fake_model.answered())
    out = agents.claude("-p", "--resume", sid, "/rl good")
    assert 'rltray: rated the last answer good ("The tool printed' in out
    assert rating("RUN-TOOL then answer") == 1
    out = agents.claude("-p", "--resume", sid, "/rl bad wrong tool")
    assert "rltray: rated the last answer bad with your comment" in out
    assert rating("RUN-TOOL then answer") == -1
    out = agents.claude("-p", "--resume", sid, "/rl undo")
    assert "rltray: withdrew your rating" in out
    assert rating("RUN-TOOL then answer") is None
    out = agents.claude("-p", "--resume", sid, "/rl status")
    assert "rltray: 2 turn(s) captured" in out
    assert len(fake_model.answered()) == asked  # no `/rl` reached the model
    assert set(ingest()) == {"hello there", "RUN-TOOL then answer"}

    doctor = agents.rltray("doctor")
    assert "2.1.197 (verified)" in doctor
    agents.rltray("hooks", "uninstall", "--agent", "claude-code")
    assert (claude_dir / "settings.json").read_bytes() == USER_CLAUDE_SETTINGS
    assert files(claude_dir / "commands") == {"review.md": USER_COMMAND}


def test_claude_code_terminal_ui(agents: Agents, fake_model: FakeModel, tmux: str,
                                 tmp_path: Path) -> None:
    agents.rltray("hooks", "install", "--agent", "claude-code")
    ui = Terminal([str(agents.bins["claude"])], agents.env(), agents.project,
                  tmp_path / "ui.sock")
    try:
        ui.wait_for("for shortcuts")
        ui.type("tell me something")
        ui.wait_for("ANSWER")
        wait_until(lambda: spooled(agents) >= 1, 30, "the Stop hook's turn record")
        ui.type("/rl good nice one")
        ui.wait_for("rltray: rated the last answer good with your comment")
        assert rating("tell me something") == 1
        ui.type("/rl bad")
        ui.wait_for("rltray: rated the last answer bad")
        assert rating("tell me something") == -1
        ui.type("/rl undo")
        ui.wait_for("rltray: withdrew your rating")
        assert rating("tell me something") is None
        ui.type("/rl status")
        ui.wait_for("rltray: 1 turn(s) captured")
    finally:
        ui.close()
    assert not [s for s in fake_model.answered() if "/rl" in " ".join(s.user_texts)]


# -- Codex -----------------------------------------------------------------------------------


def codex_files(agents: Agents) -> dict[str, bytes]:
    return files(agents.home / ".codex")


def codex_exec(agents: Agents, prompt: str, *, resume: bool = True) -> str:
    head = ["exec", "--skip-git-repo-check"]
    return agents.codex(*head, *(["resume", "--last"] if resume else []), prompt)


def test_codex_exec_with_hooks_not_trusted(agents: Agents, fake_model: FakeModel) -> None:
    before = codex_files(agents)
    agents.rltray("hooks", "install", "--agent", "codex")
    codex_exec(agents, "hello codex", resume=False)
    codex_exec(agents, "RUN-TOOL then answer")
    tool_requests = [s for s in fake_model.answered("responses")
                     if "RUN-TOOL then answer" in s.user_texts]
    assert "hello codex" in tool_requests[0].user_texts  # the resumed thread's context
    assert any(i.get("type") == "function_call_output"
               for s in tool_requests for i in s.body["input"])  # Codex ran the tool
    turns = ingest()
    assert turns["RUN-TOOL then answer"].response.startswith(f"The tool printed {TOOL_OUTPUT}.")
    assert turns["hello codex"].response.startswith("ANSWER")

    # Untrusted hooks: `/rl ...` reaches the model, notify applies it to the turn before.
    codex_exec(agents, "/rl good")
    assert rating("RUN-TOOL then answer") == 1
    codex_exec(agents, "$rl bad")
    assert rating("RUN-TOOL then answer") == -1
    codex_exec(agents, "/rl undo")
    assert rating("RUN-TOOL then answer") is None
    codex_exec(agents, "/rl status")
    assert set(ingest()) == {"hello codex", "RUN-TOOL then answer"}  # none is a training turn
    log = (agents.rltray_home / "logs" / "hook.log").read_text()
    assert log.count("applied from notify") == 4

    agents.rltray("hooks", "uninstall", "--agent", "codex")
    assert (agents.home / ".codex" / "config.toml").read_bytes() == before["config.toml"]
    assert not (agents.home / ".codex" / "hooks.json").exists()
    assert not (agents.home / ".codex" / "skills" / "rl").exists()  # Codex keeps its .system


def test_codex_terminal_ui_untrusted_then_trusted(agents: Agents, fake_model: FakeModel,
                                                  tmux: str, tmp_path: Path) -> None:
    agents.rltray("hooks", "install", "--agent", "codex")
    ui = Terminal([str(agents.bins["codex"]), "--no-daemon"], agents.env(), agents.project,
                  tmp_path / "ui.sock")
    try:
        through_codex_dialogs(ui, hooks="3")  # Continue without trusting (hooks won't run)
        ui.type("first question")
        ui.wait_for("ANSWER")
        wait_until(lambda: "first question" in ingest(), 30, "the turn from notify")
        ui.type("/rl good")  # what the issue saw: the terminal UI refuses it
        ui.wait_for("Unrecognized command '/rl'")
        ui.keys("End", *["BSpace"] * 12)  # the refused text stays in the composer
        ui.type("$rl good")
        wait_until(lambda: rating("first question") == 1, 30, "$rl good applied from notify")
    finally:
        ui.close()
    assert set(ingest()) == {"first question"}  # no `$rl` turn, no thread-title turn

    # Back into the same thread (`codex resume --last`), and this time trust the hooks.
    ui = Terminal([str(agents.bins["codex"]), "--no-daemon", "resume", "--last"], agents.env(),
                  agents.project, tmp_path / "ui2.sock")
    try:
        ui.wait_for("Hooks need review")
        ui.choose("2", "Hooks need review")  # Trust all and continue
        ui.wait_for(CODEX_READY)
        ui.type("$rl bad")
        ui.wait_for("rltray: rated the last answer bad")
        assert rating("first question") == -1
    finally:
        ui.close("/quit")  # so the thread is free for `codex exec resume` below
    # Trusted now (Codex recorded it): `codex exec` runs the prompt hook, which blocks.
    asked = len(fake_model.answered())
    # (`codex exec` 0.169 prints "hook: UserPromptSubmit Blocked" but not the hook's reason.)
    out = codex_exec(agents, "/rl undo")
    assert "UserPromptSubmit Blocked" in out
    assert rating("first question") is None
    out = codex_exec(agents, "/rl status")
    assert "UserPromptSubmit Blocked" in out
    assert len(fake_model.answered()) == asked


# -- rltray use ----------------------------------------------------------------------------


def publish(tag: str, host: str, agents: Agents) -> None:
    paths = Paths.from_env()
    with Store.open(paths) as store:
        folder = paths.adapters / "v0001"
        folder.mkdir(parents=True)
        store.add_adapter("smollm2", folder, parent_version=None)
        store.set_adapter_status(1, "active")
        store.set_adapter_publication(1, tag, {"tag": tag, "path": "merged"})
    agents.rltray("config", "set", "ollama.host", host)
    # what a publish leaves: the model set up, and what its latest serves (served.py)
    agents.rltray("config", "set", "ollama.model", "smollm2:135m")
    served.write_served(paths, "smollm2:135m", 1, tag.rpartition(":")[0] + ":latest")


def test_rltray_use_sends_both_agents_to_the_published_tag(agents: Agents,
                                                           fake_model: FakeModel) -> None:
    tag = "smollm2-135m-rltray:latest"
    fake_model.ollama_models.append(tag)
    publish("smollm2-135m-rltray:v1", fake_model.url, agents)

    out = agents.rltray("use", "codex")
    agents.codex("--profile", "rltray", "exec", "--skip-git-repo-check", "via the profile")
    once = out.split("(or once: ", 1)[1].split(")", 1)[0]
    assert "--local-provider ollama" in once
    agents.run(["sh", "-c", f"{once} exec --skip-git-repo-check 'once only'"])
    models = {s.user_texts[-1]: s.model for s in fake_model.answered("responses")}
    assert models["via the profile"] == tag and models["once only"] == tag

    out = agents.rltray("use", "claude-code")
    exports = dict(line[len("export "):].split("=", 1) for line in out.splitlines()
                   if line.startswith("export "))
    env = {k: shlex.split(v)[0] if v.strip("'\"") else "" for k, v in exports.items()}
    agents.claude("-p", "on the tag", ANTHROPIC_API_KEY="",
                  **{k: v for k, v in env.items() if k != "ANTHROPIC_API_KEY"})
    agents.rltray("use", "claude-code", "--shell")
    launcher = agents.rltray_home / "bin" / "claude-rltray"
    agents.run([str(launcher), "-p", "from the launcher"], ANTHROPIC_API_KEY="")
    main = {s.user_texts[-1]: s.model for s in fake_model.answered("anthropic") if s.answer
            and s.user_texts}
    assert main["on the tag"] == tag and main["from the launcher"] == tag
