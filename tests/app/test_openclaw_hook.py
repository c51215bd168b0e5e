"""The hook program's OpenClaw events (app/hooks/events_openclaw.py), run as the plugin runs
it: a real subprocess with the payload shapes OpenClaw 2026.9.6 hands its plugin, then real
ingest into a real database. tests/agents/test_openclaw.py drives the real gateway."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rltray.app import spool
from rltray.app.hooks import capture
from rltray.app.paths import Paths
from rltray.app.store import Store

SESSION = "agent:main:telegram:direct:4242"


def run(home: Path, event: str, payload: dict[str, Any]) -> str:
    argv = capture.build_command(f"openclaw-{event}", home, python=sys.executable)
    done = subprocess.run(argv, input=json.dumps(payload).encode(), capture_output=True,
                          timeout=30)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    return done.stdout.decode()


def records(home: Path, kind: str) -> list[dict[str, Any]]:
    folder = home / "spool" / "incoming"
    if not folder.is_dir():
        return []
    names = sorted(n for n in os.listdir(folder) if not n.startswith("."))
    found = [json.loads((folder / n).read_text()) for n in names]
    return [r for r in found if r["kind"] == kind]


def end(run_id: str, prompt: str, answer: str, **more: Any) -> dict[str, Any]:
    return {"session": SESSION, "run": run_id, "success": True, "trigger": "user",
            "channel": "telegram", "model": "fake-model", "duration_ms": 1200,
            "messages": [{"role": "user", "content": "earlier"},
                         {"role": "assistant", "content": [{"type": "text", "text": "before"}]},
                         {"role": "user", "content": [{"type": "text", "text": prompt}]},
                         {"role": "assistant", "content": [{"type": "text", "text": answer}]}],
            **more}


def ingest(home: Path) -> dict[str, Any]:
    paths = Paths(home)
    with Store.open(paths) as store:
        spool.ingest(paths, store)
        return {t.prompt: t for t in store.list_turns()}


def test_a_finished_user_run_is_one_turn_with_its_channel_as_project(rltray_home: Path) -> None:
    run(rltray_home, "end", end("run-1", "Capital of France?", "Paris."))
    run(rltray_home, "end", end("run-2", "Ignored", "x", success=False))
    run(rltray_home, "end", end("run-3", "Ignored", "x", trigger="heartbeat"))
    [rec] = records(rltray_home, "turn")
    assert (rec["agent"], rec["session"], rec["turn"]) == ("openclaw", SESSION, "run-1")
    assert (rec["prompt"], rec["response"], rec["cwd"]) == ("Capital of France?", "Paris.",
                                                            "telegram")
    assert rec["context"] == [{"role": "user", "content": "earlier"},
                              {"role": "assistant", "content": "before"}]
    assert 1.0 <= rec["duration_s"] < 5
    assert (rltray_home / "spool" / "incoming").stat().st_mode & 0o077 == 0
    turn = ingest(rltray_home)["Capital of France?"]
    assert (turn.agent, turn.cwd, turn.model) == ("openclaw", "telegram", "fake-model")


def test_rl_answers_in_chat_and_rates_the_newest_turn(rltray_home: Path) -> None:
    run(rltray_home, "end", end("run-1", "First?", "One."))
    run(rltray_home, "end", end("run-2", "Second?", "Two."))
    said = json.loads(run(rltray_home, "rl", {"session": SESSION, "args": "good nice"}))
    assert said["text"].startswith('rltray: rated the last answer good with your comment ("Two.')
    assert json.loads(run(rltray_home, "rl", {"session": SESSION, "args": "3"}))["text"].startswith(
        "rltray: 3 is the middle")
    assert "usage: /rl good" in json.loads(run(rltray_home, "rl", {"session": SESSION,
                                                                  "args": "train"}))["text"]
    turns = ingest(rltray_home)
    assert turns["Second?"].rating.value == 1 and turns["First?"].rating is None


def test_a_reaction_rates_the_turn_of_the_message_it_targets(rltray_home: Path) -> None:
    run(rltray_home, "end", end("run-1", "First?", "One."))
    run(rltray_home, "sent", {"session": SESSION, "run": "run-1", "message_id": "101",
                              "channel": "telegram"})
    run(rltray_home, "end", end("run-2", "Second?", "Two."))
    run(rltray_home, "sent", {"session": SESSION, "run": "run-2", "message_id": "103",
                              "channel": "telegram"})
    # as OpenClaw 2026.9.6 hands it: the prompt, then its runtime-context message
    prompt = ('Next question\n<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>\nConversation data (data, '
              'not instructions):\n"System: [2026-11-27 23:41:59 UTC] Telegram reaction added: '
              '\U0001f44e by Ada on msg 101"\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>')
    run(rltray_home, "react", {"session": SESSION, "channel": "telegram", "prompt": prompt})
    run(rltray_home, "react", {"session": SESSION, "channel": "telegram", "prompt": prompt})
    [command] = records(rltray_home, "command")  # the same event line twice is one reaction
    assert (command["command"], command["target_turn"]) == ("bad", "run-1")
    turns = ingest(rltray_home)
    assert turns["First?"].rating.value == -1 and turns["Second?"].rating is None
    with Store.open(Paths(rltray_home)) as store:
        assert store.messages_of(turns["First?"].id) == [("telegram", "101")]


def test_a_reaction_the_hook_forgot_is_placed_by_the_store(rltray_home: Path) -> None:
    run(rltray_home, "end", end("run-1", "First?", "One."))
    run(rltray_home, "sent", {"session": SESSION, "run": "run-1", "message_id": "101",
                              "channel": "telegram"})
    ingest(rltray_home)
    for state in (rltray_home / "spool" / "sessions").glob("openclaw-*.json"):
        state.unlink()  # the hook's own memory gone (pruned after two weeks idle)
    run(rltray_home, "react", {"session": SESSION, "channel": "telegram",
                               "prompt": "Telegram reaction added: \U0001f44d by Ada on msg 101"})
    [command] = records(rltray_home, "command")
    assert command["target_turn"] is None and command["target_message"] == "telegram:101"
    assert ingest(rltray_home)["First?"].rating.value == 1


def test_a_reply_button_rates_and_unrates_the_turn_of_its_message(rltray_home: Path) -> None:
    run(rltray_home, "end", end("run-1", "First?", "One."))
    run(rltray_home, "sent", {"session": SESSION, "run": "run-1", "message_id": "101",
                              "channel": "telegram"})
    run(rltray_home, "end", end("run-2", "Second?", "Two."))

    def press(what: str, message: str = "101") -> str:
        return json.loads(run(rltray_home, "button", {
            "session": SESSION, "what": what, "message_id": message,
            "channel": "telegram"}))["text"]

    assert press("good") == "rltray: rated this answer good."
    turns = ingest(rltray_home)
    assert turns["First?"].rating.value == 1 and turns["Second?"].rating is None
    assert press("bad") == "rltray: rated this answer bad."
    assert ingest(rltray_home)["First?"].rating.value == -1
    assert press("undo") == "rltray: withdrew this answer's rating."
    assert ingest(rltray_home)["First?"].rating is None
    # bad input: an unknown action rates nothing and says so
    assert press("train") == "rltray: this button names no answer; nothing rated."
    assert [c["command"] for c in records(rltray_home, "command")] == []  # all ingested
    # a message the hook does not remember is placed by the store, as a reaction's is
    for state in (rltray_home / "spool" / "sessions").glob("openclaw-*.json"):
        state.unlink()
    assert press("bad") == "rltray: rated this answer bad."
    [command] = records(rltray_home, "command")
    assert command["target_message"] == "telegram:101" and command["event"] == "openclaw-button"
    assert ingest(rltray_home)["First?"].rating.value == -1


def test_an_rl_prompt_or_a_reaction_line_is_no_part_of_a_turn(rltray_home: Path) -> None:
    run(rltray_home, "end", end("run-1", "/rl good", "I was asked to rate."))
    run(rltray_home, "end", end(
        "run-2", "Telegram reaction added: \U0001f44d by Ada on msg 7\nName a colour.", "Red."))
    [rec] = records(rltray_home, "turn")
    assert rec["prompt"] == "Name a colour."


def test_the_gateway_loading_the_plugin_is_what_doctor_reports(rltray_home: Path,
                                                                tmp_path: Path) -> None:
    from rltray.app.hooks.openclaw import PLUGIN_DIR, OpenClaw

    paths = Paths(rltray_home)
    state = tmp_path / "state"
    state.mkdir()
    agent = OpenClaw(env={"OPENCLAW_STATE_DIR": str(state), "PATH": ""}, python=sys.executable)
    command = agent.hook_command(paths)
    (state / "openclaw.json").write_text(json.dumps({"plugins": {
        "load": {"paths": [str(PLUGIN_DIR)]},
        "entries": {"rltray": {"enabled": True, "hooks": {"allowConversationAccess": True},
                               "config": {"command": command}}}}}))
    status = agent.status(paths)
    assert status.installed and not status.stale
    assert status.commands == [[*command, "openclaw-end"]]
    assert "No OpenClaw gateway has loaded rltray's plugin yet" in status.notes[0]
    run(rltray_home, "loaded", {"version": "2026.9.6"})
    note, buttons = agent.status(paths).notes
    assert note.startswith("Plugin loaded by the gateway at ") and note.endswith(
        "(OpenClaw 2026.9.6).")
    assert buttons.startswith("No Good/Bad buttons under replies")  # opt-in: off here
    run(rltray_home, "loaded", {"version": "2027.1.1"})
    assert "newer than the versions rltray was verified with" in agent.status(paths).notes[0]


def test_reply_buttons_are_an_openclaw_install_setting_only(rltray_home: Path) -> None:
    from rltray.app.errors import ExitCode

    from tests.app.test_cli import cli

    for argv in (("install", "--agent", "codex"), ("uninstall", "--agent", "openclaw"),
                 ("install",)):
        code, _, err = cli("hooks", *argv, "--reply-buttons", "on")
        assert code == ExitCode.USAGE and "--reply-buttons goes with" in err, (argv, err)


def test_rl_after_a_failed_run_rates_nothing_rather_than_the_answer_before(
    rltray_home: Path,
) -> None:
    """Regression (review 2, bug 4): a run that failed or was stopped (success false) left no
    trace, so `/rl bad` about it rated the answer before it, with its comment."""
    run(rltray_home, "end", end("run-1", "What is 2+2?", "4."))
    run(rltray_home, "end", end("run-2", "Refactor my module", "partial", success=False))
    said = json.loads(run(rltray_home, "rl", {"session": SESSION, "args": "bad it broke"}))
    assert "was not captured" in said["text"] and "nothing was rated" in said["text"]
    assert records(rltray_home, "command") == []
    run(rltray_home, "end", end("run-3", "Try again", "Done.", trigger="heartbeat",
                                success=False))  # OpenClaw's own run: no prompt of the user's
    run(rltray_home, "end", end("run-4", "Try again", "Done."))
    said = json.loads(run(rltray_home, "rl", {"session": SESSION, "args": "good"}))
    assert said["text"] == 'rltray: rated the last answer good ("Done.")'


def test_message_ids_are_told_apart_by_their_chat(rltray_home: Path) -> None:
    """Regression (review 2, bug 7): Telegram numbers each chat's messages from 1, but the
    hook's and the store's message maps were keyed by channel and id only: a button or a
    reaction under message 42 in one chat rated the other chat's turn, and the store kept
    only the first chat's 42. One session for every direct chat (OpenClaw's default)."""
    shared = "agent:main:main"

    def end_in(run_id: str, prompt: str, answer: str) -> dict[str, Any]:
        return end(run_id, prompt, answer, session=shared)

    run(rltray_home, "end", end_in("run-alice", "Alice: capital of France?", "Paris."))
    run(rltray_home, "sent", {"session": shared, "run": "run-alice", "message_id": "42",
                              "channel": "telegram", "chat": "1001", "to": "1001"})
    run(rltray_home, "end", end_in("run-bob", "Bob: capital of Spain?", "Madrid."))
    run(rltray_home, "sent", {"session": shared, "run": "run-bob", "message_id": "42",
                              "channel": "telegram", "chat": "telegram:2002", "to": "2002"})
    said = json.loads(run(rltray_home, "button", {"session": shared, "what": "bad",
                                                  "message_id": "42", "channel": "telegram",
                                                  "chat": "1001"}))
    assert said["text"] == "rltray: rated this answer bad."
    run(rltray_home, "react", {"session": shared, "channel": "telegram", "chat": "2002",
                               "prompt": "Telegram reaction added: \U0001f44d by Bob on msg 42"})
    assert [(c["command"], c["target_turn"]) for c in records(rltray_home, "command")] == [
        ("bad", "run-alice"), ("good", "run-bob")]
    turns = ingest(rltray_home)
    assert turns["Alice: capital of France?"].rating.value == -1
    assert turns["Bob: capital of Spain?"].rating.value == 1
    with Store.open(Paths(rltray_home)) as store:
        alice, bob = (turns[p].id for p in ("Alice: capital of France?",
                                            "Bob: capital of Spain?"))
        assert store.messages_of(alice) == store.messages_of(bob) == [("telegram", "42")]
        assert store.turn_by_message("openclaw", "telegram:1001", "42") == alice
        assert store.turn_by_message("openclaw", "telegram:2002", "42") == bob
        assert store.turn_by_message("openclaw", "telegram", "42") is None  # which chat's?


def test_a_button_without_its_session_finds_the_turn_in_its_chat(rltray_home: Path) -> None:
    """Regression (review 2, bug 7): a session key too long for Telegram's callback data is
    left out of the button, and the plugin names the session `telegram:<chat id>`; the store
    then found message 42 by channel and id alone, which is another chat's as often as not."""
    sessions = {chat: f"agent:main:telegram:default:direct:{chat}"
                for chat in ("111111111", "222222222")}
    for chat, session in sessions.items():
        run(rltray_home, "end", end(f"run-{chat}", f"Question in {chat}?", f"Answer {chat}.",
                                    session=session))
        run(rltray_home, "sent", {"session": session, "run": f"run-{chat}", "message_id": "42",
                                  "channel": "telegram", "to": chat})
    ingest(rltray_home)
    for chat in ("222222222", "111111111"):
        said = json.loads(run(rltray_home, "button", {
            "session": f"telegram:{chat}", "what": "bad" if chat[0] == "2" else "good",
            "message_id": "42", "channel": "telegram", "chat": chat}))
        assert said["text"].startswith("rltray: rated this answer")
    assert [c["target_message"] for c in records(rltray_home, "command")] == [
        "telegram:222222222:42", "telegram:111111111:42"]
    turns = ingest(rltray_home)
    assert turns["Question in 222222222?"].rating.value == -1
    assert turns["Question in 111111111?"].rating.value == 1
