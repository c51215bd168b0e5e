"""Lessons (issue 24) with the REAL Claude Code and Codex programs: the text the service
wrote reaches the model's request (the fake model server sees it) in `claude -p`, the
Claude Code terminal UI, `codex exec` and the Codex terminal UI; the why of a bad rating
reaches the next request once; `/rl lesson` and `/rl lessons`; the opt-in rules file;
nothing after uninstall. And tests/support/hookschemas.py, read against the schemas the
pinned programs carry. Marked slow like tests/agents/test_real_agents.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from rltray.app.hooks import events_claude, lessonfiles, rulesfile

from tests.agents.test_real_agents import codex_exec, last_json
from tests.support.fakemodel import FakeModel
from tests.support.hookschemas import SHAPES
from tests.support.realagents import Agents, Terminal, through_codex_dialogs, trust_codex_hooks

pytestmark = pytest.mark.slow

PROJECT = "- LESSON-PROJECT-7: run the one failing test before the whole suite."
GLOBAL = "- LESSON-GLOBAL-3: keep answers short."
NOTE = "The user rated your previous answer bad in rltray and said why: ignored the failing test"


def write_lessons(agents: Agents, agent: str) -> None:
    lessonfiles.write_all(str(agents.rltray_home), agent, {
        lessonfiles.key(str(agents.project)): PROJECT, lessonfiles.GLOBAL: GLOBAL})


def request(model: FakeModel, typed: str) -> str:
    """The body of the one answered request whose newest typed text is ``typed``."""
    (seen,) = [s for s in model.answered() if s.user_texts[-1:] == [typed] and s.answer]
    return json.dumps(seen.body)


def lesson_records(agents: Agents) -> list[dict[str, Any]]:
    folder = agents.rltray_home / "spool" / "incoming"
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    return [r for r in records if r.get("command") == "lesson"]


# -- Claude Code -----------------------------------------------------------------------------


def test_claude_code_print_mode_gets_the_lessons_and_the_why(agents: Agents,
                                                             fake_model: FakeModel) -> None:
    before = (agents.home / ".claude" / "settings.json").exists()
    agents.rltray("hooks", "install", "--agent", "claude-code")
    write_lessons(agents, "claude-code")
    sid = last_json(agents.claude("-p", "hello there", "--output-format", "json"))["session_id"]
    first = request(fake_model, "hello there")
    assert PROJECT in first and GLOBAL not in first  # this folder's own text, word for word

    out = agents.claude("-p", "--resume", sid, '/rl bad -c "ignored the failing test"')
    assert "rltray: rated the last answer bad with your comment" in out
    agents.claude("-p", "--resume", sid, "try again")
    agents.claude("-p", "--resume", sid, "and now")
    assert request(fake_model, "try again").count(NOTE) == 1
    assert request(fake_model, "and now").count(NOTE) == 1  # in the history, not added again
    assert request(fake_model, "and now").count(PROJECT) == 1  # a resume adds no second copy

    asked = len(fake_model.answered())
    out = agents.claude("-p", "--resume", sid, "/rl lesson Name the test you ran")
    assert 'rltray: saved the lesson ("Name the test you ran")' in out
    (record,) = lesson_records(agents)
    assert (record["agent"], record["session"], record["comment"]) == (
        "claude-code", sid, "Name the test you ran")
    out = agents.claude("-p", "--resume", sid, "/rl lessons")
    assert "rltray: new sessions in this folder are told:" in out and PROJECT in out
    assert len(fake_model.answered()) == asked  # neither reached the model

    agents.rltray("hooks", "uninstall", "--agent", "claude-code")
    assert (agents.home / ".claude" / "settings.json").exists() == before
    agents.claude("-p", "after uninstall")
    assert PROJECT not in request(fake_model, "after uninstall")


def test_claude_code_terminal_ui_shows_new_lessons_and_gets_them(
    agents: Agents, fake_model: FakeModel, tmux: str, tmp_path: Path
) -> None:
    agents.rltray("hooks", "install", "--agent", "claude-code")
    write_lessons(agents, "claude-code")
    ui = Terminal([str(agents.bins["claude"])], agents.env(), agents.project,
                  tmp_path / "ui.sock")
    try:
        ui.wait_for("for shortcuts")
        ui.wait_for(events_claude.LESSONS_CHANGED)  # told once: this folder's lessons are new
        ui.type("tell me something")
        ui.wait_for("ANSWER")
        assert PROJECT in request(fake_model, "tell me something")
        ui.type("/rl lessons")
        ui.wait_for("rltray: new sessions in this folder are told:")
    finally:
        ui.close()
    ui = Terminal([str(agents.bins["claude"])], agents.env(), agents.project,
                  tmp_path / "ui2.sock")
    try:
        ui.wait_for("for shortcuts")
        ui.type("again")
        ui.wait_for("ANSWER")
        assert events_claude.LESSONS_CHANGED not in ui.screen()  # nothing new this time
    finally:
        ui.close()
    assert PROJECT in request(fake_model, "again")


def test_claude_code_reads_the_opt_in_lessons_file_when_hooks_are_off(
    agents: Agents, fake_model: FakeModel
) -> None:
    """The fallback: with every hook off, the rules file alone brings the lessons."""
    settings = agents.home / ".claude" / "settings.json"
    settings.write_text('{"disableAllHooks": true}\n')
    lessonfiles.write_all(str(agents.rltray_home), "claude-code", {lessonfiles.GLOBAL: GLOBAL})
    out = agents.rltray("hooks", "install", "--agent", "claude-code", "--lessons-file")
    rules = agents.home / ".claude" / "rules" / rulesfile.NAME
    assert rules.exists() and "disableAllHooks" in agents.rltray("hooks", "status") + out
    agents.claude("-p", "hello there")
    body = request(fake_model, "hello there")
    assert GLOBAL in body and f"Contents of {rules}" in body
    agents.rltray("hooks", "uninstall", "--agent", "claude-code")
    assert not rules.exists() and settings.read_text() == '{"disableAllHooks": true}\n'
    agents.claude("-p", "after uninstall")
    assert GLOBAL not in request(fake_model, "after uninstall")


# -- Codex -------------------------------------------------------------------------------------


def test_codex_exec_gets_the_lessons_and_the_why(agents: Agents, fake_model: FakeModel,
                                                 tmux: str, tmp_path: Path) -> None:
    before = (agents.home / ".codex" / "config.toml").read_bytes()
    agents.rltray("hooks", "install", "--agent", "codex")
    trust_codex_hooks(agents, tmp_path / "trust.sock")  # user hooks run only once trusted
    write_lessons(agents, "codex")
    codex_exec(agents, "hello codex", resume=False)
    first = request(fake_model, "hello codex")
    assert PROJECT in first and GLOBAL not in first
    out = codex_exec(agents, '/rl bad -c "ignored the failing test"')
    assert "UserPromptSubmit Blocked" in out
    codex_exec(agents, "try again")
    codex_exec(agents, "and now")
    assert request(fake_model, "try again").count(NOTE) == 1
    assert request(fake_model, "and now").count(NOTE) == 1
    assert request(fake_model, "and now").count(PROJECT) == 1  # resumed: not given twice
    out = codex_exec(agents, "/rl lesson Name the test you ran")
    assert "UserPromptSubmit Blocked" in out
    (record,) = lesson_records(agents)
    assert (record["agent"], record["comment"]) == ("codex", "Name the test you ran")

    agents.rltray("hooks", "uninstall", "--agent", "codex")
    assert not (agents.home / ".codex" / "hooks.json").exists()
    after = (agents.home / ".codex" / "config.toml").read_bytes()
    assert after.startswith(before)  # only Codex's own trust records were added after ours
    codex_exec(agents, "after uninstall", resume=False)
    assert PROJECT not in request(fake_model, "after uninstall")


def test_codex_terminal_ui_gets_the_lessons_and_the_why(agents: Agents, fake_model: FakeModel,
                                                        tmux: str, tmp_path: Path) -> None:
    agents.rltray("hooks", "install", "--agent", "codex")
    write_lessons(agents, "codex")
    ui = Terminal([str(agents.bins["codex"]), "--no-daemon"], agents.env(), agents.project,
                  tmp_path / "ui.sock")
    try:
        through_codex_dialogs(ui, hooks="2")  # Trust all and continue
        ui.type("first question")
        ui.wait_for("ANSWER")
        assert PROJECT in request(fake_model, "first question")
        ui.type('$rl bad -c "ignored the failing test"')
        ui.wait_for("rltray: rated the last answer bad")
        ui.type("second question")
        ui.wait_for("second question", count=2)  # typed, then the answer's echo
        ui.type("$rl lessons")
        ui.wait_for("rltray: new sessions in this folder are told:")
    finally:
        ui.close("/quit")
    assert request(fake_model, "second question").count(NOTE) == 1


# -- the schemas the pinned programs carry --------------------------------------------------


def embedded_schema(binary: bytes, title: str) -> dict[str, Any]:
    """One of the JSON schemas compiled into the Codex program, by its title."""
    at = binary.index(f'"title": "{title}"'.encode())
    start = binary.rindex(b'{\n  "$schema"', 0, at)
    schema, _ = json.JSONDecoder().raw_decode(binary[start:].decode("utf-8", "replace"))
    return schema


def test_the_schema_table_is_what_the_pinned_programs_accept(agent_bins: dict[str, Path]) -> None:
    modules = agent_bins["codex"].parents[1]
    (codex,) = modules.glob("@openai/codex-*/vendor/*/bin/codex")
    binary = codex.read_bytes()
    for event, title in (("SessionStart", "session-start.command.output"),
                         ("UserPromptSubmit", "user-prompt-submit.command.output")):
        schema = embedded_schema(binary, title)
        top, specific = SHAPES[("codex", event)]
        assert schema["additionalProperties"] is False
        assert set(schema["properties"]) == set(top)
        (inner,) = [d for name, d in schema["definitions"].items() if "HookSpecific" in name]
        assert inner["additionalProperties"] is False and set(inner["properties"]) == set(specific)
        assert inner["properties"]["hookEventName"]["const"] == event
    claude = agent_bins["claude"].resolve().read_bytes()
    for event in ("SessionStart", "UserPromptSubmit"):
        top, specific = SHAPES[("claude-code", event)]
        found = re.search(rb'hookEventName:\w+\.literal\("' + event.encode() + rb'"\),(.{0,600}?)'
                          rb"\}\)", claude)
        assert found is not None
        keys = set(re.findall(rb"(?:^|,)(\w+):\w+\.", found.group(1)))
        assert {k.decode() for k in keys} | {"hookEventName"} == set(specific)
    for key in top:
        if key != "hookSpecificOutput":
            assert re.search(key.encode() + rb":\w+\.(?:string|boolean|enum)\(", claude), key
