"""The hook program run as a real subprocess, exactly as Claude Code and Codex run it.

argv comes from ``capture.build_command`` (``python -I -S capture.py --home H <event>``),
payloads go on stdin (or as the last argument for Codex ``notify``). Every case
checks the agent-facing promises: exit status 0, no stdout except the documented
block answer, and nothing already captured lost.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rltray.app.hooks import capture, capture_core

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLAUDE = FIXTURES / "claude_code"
CODEX = FIXTURES / "codex"
EXPECTED = json.loads((CLAUDE / "expected.json").read_text())
posix_only = pytest.mark.skipif(os.name != "posix", reason="uses POSIX symlinks/FIFOs/modes")


def fixture(path: Path, **changes: Any) -> dict[str, Any]:
    data = json.loads(path.read_text())
    data.update(changes)
    return data


def run_hook(
    home: Path,
    event: str,
    payload: Any = None,
    *,
    raw: bytes | None = None,
    chain: list[str] | None = None,
    timeout: float = 30,
) -> subprocess.CompletedProcess[bytes]:
    argv = capture.build_command(event, home, python=sys.executable, chain=chain)
    stdin = raw
    if event == "codex-notify":
        argv.append(raw.decode() if raw is not None else json.dumps(payload))
        stdin = b""
    elif stdin is None:
        stdin = json.dumps(payload).encode()
    result = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)
    assert result.returncode == 0, result.stderr
    assert result.stderr == b"", result.stderr
    return result


def spooled(home: Path) -> list[dict[str, Any]]:
    folder = home / "spool" / "incoming"
    if not folder.is_dir():
        return []
    names = sorted(n for n in os.listdir(folder) if not n.startswith("."))
    return [json.loads((folder / n).read_text()) for n in names]


def turns(home: Path) -> list[dict[str, Any]]:
    return [r for r in spooled(home) if r["kind"] == "turn"]


def hook_log(home: Path) -> str:
    log = home / "logs" / "hook.log"
    return log.read_text() if log.exists() else ""


def blocked(result: subprocess.CompletedProcess[bytes]) -> str:
    answer = json.loads(result.stdout)
    assert set(answer) == {"decision", "reason"} and answer["decision"] == "block"
    return answer["reason"]


@pytest.fixture
def home(rltray_home: Path) -> Path:
    return rltray_home


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_bytes((CLAUDE / "transcript.jsonl").read_bytes())
    return path


@pytest.fixture(autouse=True)
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private temp folder for the fallback log, for this process and the hooks it runs
    (no test may write the user's real /tmp/rltray-hook-<uid>.log)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    for name in ("TEMP", "TMP"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


# -- build_command -------------------------------------------------------------------


def test_build_command_is_the_documented_argv(tmp_path: Path) -> None:
    argv = capture.build_command("claude-stop", tmp_path, python="/py")
    assert argv == [
        "/py",
        "-I",
        "-S",
        str(Path(capture.__file__).resolve()),
        "--home",
        str(tmp_path),
        "claude-stop",
    ]
    chained = capture.build_command("codex-notify", tmp_path, python="/py", chain=["n", "--x"])
    assert chained[-3:] == ["--chain", '["n", "--x"]', "codex-notify"]
    with pytest.raises(ValueError, match="unknown hook event"):
        capture.build_command("stop", tmp_path)
    assert capture_core.known_events() == [
        "claude-stop", "claude-prompt", "claude-expand", "claude-start", "codex-stop",
        "codex-prompt", "codex-notify", "codex-start",
        "openclaw-end", "openclaw-sent", "openclaw-react", "openclaw-rl", "openclaw-button",
        "openclaw-loaded",
    ]


def test_hook_imports_nothing_but_the_standard_library(home: Path) -> None:
    """Run under -I -S, the hook could not import rltray even by accident; prove it stays lean."""
    code = (
        "import sys, io\n"
        f"sys.path.insert(0, {str(Path(capture.__file__).parent)!r})\n"
        "import capture_core\n"
        'sys.stdin = io.TextIOWrapper(io.BytesIO(b\'{"session_id": "s", "prompt": "hi"}\'))\n'
        f"capture_core.main(['--home', {str(home)!r}, 'claude-prompt'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('rltray', 're', 'json', 'hashlib', 'subprocess', 'sqlite3', 'datetime'))\n"
        "print(bad)\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_json_fast_path_matches_the_json_module() -> None:
    samples = [
        '{"a": [1, 2.5, -3e2, true, false, null], "b": "x\\u00e9\\ud83d\\ude00"}',
        ' \n{"nested": {"k": ["v", {"z": []}]}}\t',
        '"just a string"',
        "[]",
    ]
    for text in samples:
        assert capture_core.loads(text) == json.loads(text)
        value = json.loads(text)
        assert json.loads(capture_core.dumps(value)) == value
        assert capture_core.dumps(value).isascii()
    for bad in ["", "{", '{"a": 1} trailing', "{'a': 1}", "nul"]:
        with pytest.raises(ValueError):
            capture_core.loads(bad)


# -- Claude Code ------------------------------------------------------------------------


def test_claude_prompt_then_stop_pairs_prompt_and_answer(home: Path, transcript: Path) -> None:
    r = run_hook(
        home, "claude-prompt", fixture(CLAUDE / "prompt.json", transcript_path=str(transcript))
    )
    assert r.stdout == b"" and spooled(home) == []
    r = run_hook(
        home, "claude-stop", fixture(CLAUDE / "stop.json", transcript_path=str(transcript))
    )
    assert r.stdout == b""
    (rec,) = spooled(home)
    assert rec["v"] == 1 and rec["kind"] == "turn" and rec["agent"] == "claude-code"
    assert rec["session"] == EXPECTED["session"]
    assert (rec["prompt"], rec["response"]) == (EXPECTED["p3"], EXPECTED["a3"])
    assert rec["cwd"] == EXPECTED["cwd"] and rec["event"] == "stop"
    assert rec["transcript"] == str(transcript)
    # The transcript has not caught up with P3: all of it is earlier conversation.
    assert rec["context"] == [
        {"role": "user", "content": EXPECTED["p1"]},
        {"role": "assistant", "content": EXPECTED["a1"]},
        {"role": "user", "content": EXPECTED["p2"]},
        {"role": "assistant", "content": EXPECTED["a2"]},
    ]
    assert len(rec["turn"]) == 16 and rec["turn"] != EXPECTED["a2_uuid"]
    assert rec["captured_at"].endswith("+00:00")
    assert hook_log(home) == ""


def test_a_stop_after_a_prompt_records_how_long_the_turn_took(
    home: Path, transcript: Path
) -> None:
    """Needed by notify.ask = "long": the prompt hook's clock starts the turn."""
    prompt = fixture(CLAUDE / "prompt.json", transcript_path=str(transcript))
    run_hook(home, "claude-prompt", prompt)
    time.sleep(0.3)
    run_hook(home, "claude-stop", fixture(CLAUDE / "stop.json", transcript_path=str(transcript)))
    (rec,) = spooled(home)
    assert 0.3 <= rec["duration_s"] < 30
    # A second Stop for the same prompt (no new prompt since) has no duration to claim.
    stop = fixture(CLAUDE / "stop.json", transcript_path=str(transcript))
    stop["last_assistant_message"] = "a later, different answer"
    run_hook(home, "claude-stop", stop)
    assert all("duration_s" not in later for later in spooled(home)[1:])


@posix_only
def test_files_are_private(home: Path) -> None:
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "p"})
    run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "a"})
    for folder in (home / "spool", home / "spool" / "incoming", home / "spool" / "sessions"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    for file in [
        *(home / "spool" / "incoming").iterdir(),
        *(home / "spool" / "sessions").iterdir(),
    ]:
        assert file.stat().st_mode & 0o777 == 0o600, file


def test_claude_stop_reads_the_transcript_when_the_payload_has_no_answer(
    home: Path, transcript: Path
) -> None:
    run_hook(
        home,
        "claude-stop",
        fixture(CLAUDE / "stop_no_message.json", transcript_path=str(transcript)),
    )
    (rec,) = spooled(home)
    assert rec["prompt"] == EXPECTED["p2"]  # typed text, not the tool results after it
    assert rec["response"] == EXPECTED["a2"]
    assert rec["turn"] == EXPECTED["a2_uuid"]  # uuid of the answer's transcript record
    # thinking, tool_use, tool_result, sidechain, meta, command wrappers and `/rl good` dropped
    assert rec["context"] == [
        {"role": "user", "content": EXPECTED["p1"]},
        {"role": "assistant", "content": EXPECTED["a1"]},
    ]
    blob = json.dumps(rec)
    for absent in ("SUBAGENT", "/rl good", "toolu_", "I should look", "command-name"):
        assert absent not in blob


def test_payload_answer_matching_the_transcript_uses_the_record_uuid(
    home: Path, transcript: Path
) -> None:
    run_hook(
        home,
        "claude-stop",
        fixture(
            CLAUDE / "stop.json",
            transcript_path=str(transcript),
            last_assistant_message=EXPECTED["a2"],
        ),
    )
    (rec,) = spooled(home)
    assert rec["turn"] == EXPECTED["a2_uuid"] and rec["prompt"] == EXPECTED["p2"]


def test_lagging_transcript_takes_the_answer_from_the_payload(home: Path, tmp_path: Path) -> None:
    """The file lacks the newest answer: never pair it with the previous turn's uuid."""
    lagging = tmp_path / "lag.jsonl"
    lagging.write_bytes((CLAUDE / "transcript_lagging.jsonl").read_bytes())
    run_hook(
        home,
        "claude-prompt",
        fixture(CLAUDE / "prompt.json", prompt=EXPECTED["p2"], transcript_path=str(lagging)),
    )
    run_hook(
        home,
        "claude-stop",
        fixture(
            CLAUDE / "stop.json",
            transcript_path=str(lagging),
            last_assistant_message=EXPECTED["a2"],
        ),
    )
    (rec,) = spooled(home)
    assert (rec["prompt"], rec["response"]) == (EXPECTED["p2"], EXPECTED["a2"])
    assert rec["turn"] not in ("a-002", "a-006") and len(rec["turn"]) == 16
    assert [m["content"] for m in rec["context"]] == [EXPECTED["p1"], EXPECTED["a1"]]


def test_stop_hook_active_is_still_recorded(home: Path) -> None:
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "fix the bug"})
    run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "first try"})
    run_hook(
        home,
        "claude-stop",
        {"session_id": "s", "last_assistant_message": "second try", "stop_hook_active": True},
    )
    recs = turns(home)
    assert [(r["prompt"], r["response"]) for r in recs] == [
        ("fix the bug", "first try"),
        ("fix the bug", "second try"),
    ]
    assert recs[0]["turn"] != recs[1]["turn"]


def test_the_same_stop_twice_is_spooled_once(home: Path) -> None:
    payload = {"session_id": "s", "last_assistant_message": "done"}
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "go"})
    run_hook(home, "claude-stop", payload)
    run_hook(home, "claude-stop", payload)
    assert len(turns(home)) == 1


def test_long_text_is_capped(home: Path) -> None:
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "p" * 300_000})
    run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "r" * 250_000})
    (rec,) = spooled(home)
    assert len(rec["prompt"]) == 200_000 and len(rec["response"]) == 200_000


# -- /rl commands ---------------------------------------------------------------------------


def test_rl_good_rates_the_sessions_newest_turn_never_an_older_one(home: Path) -> None:
    session = {"session_id": "s"}
    run_hook(home, "claude-prompt", {**session, "prompt": "first question"})
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "first answer"})
    reason = blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl good"}))
    assert reason == 'rltray: rated the last answer good ("first answer")'
    run_hook(home, "claude-prompt", {**session, "prompt": "second question"})
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "second answer"})
    reason = blocked(
        run_hook(home, "claude-prompt", {**session, "prompt": "  /RL   Bad   too verbose "})
    )
    assert "rated the last answer bad with your comment" in reason and "second answer" in reason
    first, second = turns(home)
    commands = [r for r in spooled(home) if r["kind"] == "command"]
    assert [(c["command"], c["target_turn"], c["comment"]) for c in commands] == [
        ("good", first["turn"], None),
        ("bad", second["turn"], "too verbose"),
    ]
    # The blocked prompts are not recorded as prompts for the next turn.
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "third"})
    assert turns(home)[-1]["prompt"] != "/rl bad too verbose"


def test_rl_after_an_interrupted_turn_rates_nothing_rather_than_the_answer_before(
    home: Path,
) -> None:
    """Regression: Esc in Claude Code runs no Stop hook (an aborted Codex turn sends
    nothing), and `/rl bad why` then rated the earlier, finished answer with the comment
    meant for the one the user just watched go wrong."""
    session = {"session_id": "s"}
    run_hook(home, "claude-prompt", {**session, "prompt": "add a --verbose flag"})
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "Added --verbose."})
    run_hook(home, "claude-prompt", {**session, "prompt": "now delete the old loader"})
    reason = blocked(run_hook(home, "claude-prompt",
                              {**session, "prompt": "/rl bad you deleted the wrong file"}))
    assert "was not captured" in reason and "nothing was rated" in reason
    assert not [r for r in spooled(home) if r["kind"] == "command"]
    assert "nothing to undo" not in blocked(  # undo and status still work on what was rated
        run_hook(home, "claude-prompt", {**session, "prompt": "/rl status"}))
    run_hook(home, "claude-prompt", {**session, "prompt": "try again"})
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "Deleted loader.py."})
    reason = blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl good"}))
    assert reason == 'rltray: rated the last answer good ("Deleted loader.py.")'


def test_rl_with_a_score_and_the_middle_of_the_scale(home: Path) -> None:
    """Issue 22 item 12: `/rl 4` grades the answer; `/rl 3` is refused with the reason."""
    session = {"session_id": "s"}
    run_hook(home, "claude-prompt", {**session, "prompt": "a question"})
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "an answer"})
    reason = blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl 4 nearly"}))
    assert reason == 'rltray: rated the last answer 4/5 with your comment ("an answer")'
    neutral = blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl 3"}))
    assert neutral.startswith("rltray: 3 is the middle of the scale")
    commands = [r for r in spooled(home) if r["kind"] == "command"]
    assert [(c["command"], c["comment"]) for c in commands] == [("4", "nearly")]


def test_rl_undo_targets_the_last_rated_turn(home: Path) -> None:
    run_hook(home, "codex-prompt", {"session_id": "c", "prompt": "q1"})
    run_hook(
        home, "codex-stop", {"session_id": "c", "turn_id": "t1", "last_assistant_message": "a1"}
    )
    blocked(run_hook(home, "codex-prompt", {"session_id": "c", "prompt": "/rl good"}))
    run_hook(home, "codex-prompt", {"session_id": "c", "prompt": "q2"})
    run_hook(
        home, "codex-stop", {"session_id": "c", "turn_id": "t2", "last_assistant_message": "a2"}
    )
    reason = blocked(run_hook(home, "codex-prompt", {"session_id": "c", "prompt": "/rl undo"}))
    assert "a1" in reason
    undo = [r for r in spooled(home) if r["kind"] == "command"][-1]
    assert (undo["command"], undo["target_turn"], undo["agent"]) == ("undo", "t1", "codex")
    assert "withdrew your rating" in reason


def test_a_second_rl_undo_has_nothing_to_undo(home: Path) -> None:
    """Bug: a second `/rl undo` targeted the newest turn again, replying "withdrew your rating"."""
    session = {"session_id": "c"}
    run_hook(home, "codex-prompt", {**session, "prompt": "q1"})
    run_hook(home, "codex-stop", {**session, "turn_id": "t1", "last_assistant_message": "a1"})
    blocked(run_hook(home, "codex-prompt", {**session, "prompt": "/rl good"}))
    run_hook(home, "codex-prompt", {**session, "prompt": "q2"})
    run_hook(home, "codex-stop", {**session, "turn_id": "t2", "last_assistant_message": "a2"})
    first = blocked(run_hook(home, "codex-prompt", {**session, "prompt": "/rl undo"}))
    assert first == 'rltray: withdrew your rating of the answer ("a1")'
    before = spooled(home)
    for _ in range(2):
        again = blocked(run_hook(home, "codex-prompt", {**session, "prompt": "/rl undo"}))
        assert "nothing to undo" in again and "withdrew" not in again
    assert spooled(home) == before  # no command that could withdraw another rating
    # Rating again makes the next undo withdraw that rating.
    blocked(run_hook(home, "codex-prompt", {**session, "prompt": "/rl bad"}))
    again = blocked(run_hook(home, "codex-prompt", {**session, "prompt": "/rl undo"}))
    assert again == 'rltray: withdrew your rating of the answer ("a2")'
    commands = [(r["command"], r["target_turn"]) for r in spooled(home) if r["kind"] == "command"]
    assert commands == [("good", "t1"), ("undo", "t1"), ("bad", "t2"), ("undo", "t2")]


def test_first_rl_undo_without_a_rating_here_targets_the_newest_turn(home: Path) -> None:
    """Rated from the tray or CLI, the newest turn is what the first `/rl undo` withdraws; once."""
    session = {"session_id": "s"}
    run_hook(home, "claude-prompt", {**session, "prompt": "q"})
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "answer one"})
    reason = blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl undo"}))
    assert reason == 'rltray: withdrew your rating of the answer ("answer one")'
    (turn,) = turns(home)
    undo = [r for r in spooled(home) if r["kind"] == "command"][-1]
    assert (undo["command"], undo["target_turn"]) == ("undo", turn["turn"])
    reason = blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl undo"}))
    assert "nothing to undo" in reason
    # A newer answer is a new newest turn: the first undo after it targets it.
    run_hook(home, "claude-prompt", {**session, "prompt": "q2"})
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "answer two"})
    reason = blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl undo"}))
    assert reason == 'rltray: withdrew your rating of the answer ("answer two")'


def test_rl_good_then_rl_bad_rates_the_same_newest_turn(home: Path) -> None:
    """Changing your mind: `/rl bad` right after `/rl good` names the same turn, no older one."""
    session = {"session_id": "s"}
    for n in (1, 2):
        run_hook(home, "claude-prompt", {**session, "prompt": f"question {n}"})
        run_hook(home, "claude-stop", {**session, "last_assistant_message": f"answer {n}"})
    good = blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl good"}))
    bad = blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl bad"}))
    assert "answer 2" in good and "answer 2" in bad
    newest = turns(home)[-1]["turn"]
    commands = [(r["command"], r["target_turn"]) for r in spooled(home) if r["kind"] == "command"]
    assert commands == [("good", newest), ("bad", newest)]


def test_rl_without_a_captured_turn_targets_nothing(home: Path) -> None:
    reason = blocked(run_hook(home, "claude-prompt", {"session_id": "new", "prompt": "/rl good"}))
    assert "nothing was rated" in reason
    (rec,) = spooled(home)
    assert rec["kind"] == "command" and rec["target_turn"] is None


@pytest.mark.parametrize("prompt", ["/rl", "/rl train", "/rl  GOODish"])
def test_unknown_rl_subcommand_shows_usage_and_records_nothing(home: Path, prompt: str) -> None:
    reason = blocked(run_hook(home, "claude-prompt", {"session_id": "s", "prompt": prompt}))
    assert reason.startswith("rltray: usage: /rl good")
    assert spooled(home) == []


def test_a_prompt_that_merely_starts_with_rl_is_an_ordinary_prompt(home: Path) -> None:
    r = run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "/rlimit explain this"})
    assert r.stdout == b""
    run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "ok"})
    assert turns(home)[0]["prompt"] == "/rlimit explain this"


def test_rl_status_reads_the_database_read_only(home: Path) -> None:
    reason = blocked(run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "/rl status"}))
    assert "no database yet" in reason and "nothing waiting" in reason
    from rltray.app.paths import Paths
    from rltray.app.store import Store

    with Store.open(Paths(home)) as store:
        a, _ = store.add_turn(
            {
                "agent": "codex",
                "session": "x",
                "turn": "1",
                "prompt": "p",
                "response": "r",
                "captured_at": "2026-01-01T00:00:00Z",
            }
        )
        store.add_turn(
            {
                "agent": "codex",
                "session": "x",
                "turn": "2",
                "prompt": "p",
                "response": "r",
                "captured_at": "2026-01-01T00:00:01Z",
            }
        )
        store.rate(a, 1, "cli")
        before = os.stat(home / "rltray.db").st_mtime_ns
        run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "waiting"})
        reason = blocked(
            run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "/rl status"})
        )
        assert os.stat(home / "rltray.db").st_mtime_ns == before
    assert "2 turn(s) captured, 1 rated good, 0 rated bad, 1 unrated" in reason
    assert "2 record(s) waiting" in reason  # the status record of the first call, and the turn


def test_claude_rl_expansion_is_a_command_and_other_expansions_are_ignored(home: Path) -> None:
    """Issue 19: Claude Code's UserPromptExpansion (fired when `/rl good`, rltray's custom
    command, expands) carries the typed prompt; it rates, and any other command does nothing."""
    session = {"session_id": "s"}
    run_hook(home, "claude-prompt", {**session, "prompt": "question"})
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "answer"})
    expansion = {**session, "hook_event_name": "UserPromptExpansion", "command_name": "rl",
                 "command_args": "good", "expansion_type": "slash_command",
                 "command_source": "userSettings", "prompt": "/rl good"}
    reason = blocked(run_hook(home, "claude-expand", expansion))
    assert reason == 'rltray: rated the last answer good ("answer")'
    other = {**expansion, "command_name": "review", "command_args": "", "prompt": "/review"}
    assert run_hook(home, "claude-expand", other).stdout == b""
    (turn,) = turns(home)
    (command,) = [r for r in spooled(home) if r["kind"] == "command"]
    assert command["target_turn"] == turn["turn"]
    # The expansion of another command did not replace the prompt the next Stop pairs with.
    run_hook(home, "claude-prompt", {**session, "prompt": "next"})
    run_hook(home, "claude-expand", other)
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "next answer"})
    assert turns(home)[-1]["prompt"] == "next"


def test_codex_dollar_rl_is_a_command_with_codex_usage(home: Path) -> None:
    """Codex's terminal UI refuses unknown slash commands; `$rl` (the rltray skill) is typed."""
    session = {"session_id": "c", "turn_id": "t1"}
    run_hook(home, "codex-prompt", {**session, "prompt": "question"})
    run_hook(home, "codex-stop", {**session, "last_assistant_message": "answer"})
    reason = blocked(run_hook(home, "codex-prompt", {**session, "prompt": "$rl bad  wrong"}))
    assert reason == 'rltray: rated the last answer bad with your comment ("answer")'
    usage = blocked(run_hook(home, "codex-prompt", {**session, "prompt": "$rl"}))
    assert usage.startswith("rltray: usage: $rl good")


def test_a_prompt_that_is_an_rl_command_is_never_a_turn(home: Path) -> None:
    """Whatever reached the Stop hook with `/rl bad` as its prompt is not a turn to train on."""
    session = {"session_id": "s"}
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "first answer"})
    state_dir = home / "spool" / "sessions"
    (name,) = [n for n in os.listdir(state_dir) if n.endswith(".json")]
    state = json.loads((state_dir / name).read_text())
    state.update(prompt="/rl bad", prompt_at=time.time() + 1)  # as if the hook missed it
    (state_dir / name).write_text(json.dumps(state))
    run_hook(home, "claude-stop", {**session, "last_assistant_message": "answer to /rl bad"})
    assert [t["response"] for t in turns(home)] == ["first answer"]


# -- Codex ------------------------------------------------------------------------------------


def test_codex_notify_records_the_turn(home: Path) -> None:
    r = run_hook(home, "codex-notify", json.loads((CODEX / "notify.json").read_text()))
    assert r.stdout == b""
    (rec,) = spooled(home)
    assert (rec["agent"], rec["session"], rec["turn"]) == (
        "codex",
        "019a4e2c-7b1d-7f00-9c3e-5d2a1b0c9e8f",
        "12",
    )
    assert rec["prompt"] == "rename fetch_user to get_user everywhere"
    assert rec["context"] == [{"role": "user", "content": "the tests in api/ fail"}]
    assert rec["event"] == "codex-notify" and rec["cwd"] == "/home/dev/api"


def test_codex_notify_and_stop_name_the_same_turn(home: Path) -> None:
    run_hook(home, "codex-prompt", json.loads((CODEX / "prompt.json").read_text()))
    run_hook(home, "codex-notify", json.loads((CODEX / "notify.json").read_text()))
    run_hook(home, "codex-stop", json.loads((CODEX / "stop.json").read_text()))
    notify, stop = turns(home)
    key = lambda r: (r["agent"], r["session"], r["turn"])  # noqa: E731
    assert key(notify) == key(stop)
    assert stop["model"] == "gpt-5-codex" and stop["prompt"] == notify["prompt"]
    # A repeat that adds nothing new is not spooled again.
    run_hook(home, "codex-notify", json.loads((CODEX / "notify.json").read_text()))
    run_hook(home, "codex-stop", json.loads((CODEX / "stop.json").read_text()))
    assert len(turns(home)) == 2


def test_codex_notify_ignores_other_types(home: Path) -> None:
    run_hook(home, "codex-notify", {"type": "approval-requested", "thread-id": "t"})
    assert spooled(home) == [] and hook_log(home) == ""


def test_codex_stop_without_answer_records_nothing(home: Path) -> None:
    run_hook(home, "codex-stop", fixture(CODEX / "stop.json", last_assistant_message=None))
    assert spooled(home) == []


@posix_only
def test_notify_chains_the_previous_program_detached(home: Path, tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    prog = tmp_path / "old-notify.sh"
    prog.write_text(f'#!/bin/sh\nsleep 2\nprintf "%s|%s" "$1" "$2" > "{seen}"\n')
    prog.chmod(0o755)
    payload = json.loads((CODEX / "notify.json").read_text())
    start = time.monotonic()
    run_hook(home, "codex-notify", payload, chain=[str(prog), "--from-codex"])
    assert time.monotonic() - start < 1.8  # the hook did not wait for the 2 s program
    assert len(spooled(home)) == 1
    for _ in range(100):
        if seen.exists() and seen.read_text():
            break
        time.sleep(0.1)
    flag, sent = seen.read_text().split("|", 1)
    assert flag == "--from-codex" and json.loads(sent) == payload


def test_a_missing_chained_program_is_logged_and_capture_still_happens(home: Path) -> None:
    payload = json.loads((CODEX / "notify.json").read_text())
    run_hook(home, "codex-notify", payload, chain=["/nonexistent/notify-program"])
    assert len(spooled(home)) == 1
    assert "chained notify program not started" in hook_log(home)


# -- hardening ---------------------------------------------------------------------------------


@pytest.mark.parametrize("event", ["claude-stop", "claude-prompt", "codex-stop", "codex-prompt"])
@pytest.mark.parametrize("raw", [b"", b"{not json", b"[1, 2]", b"null", b'{"session_id": 5}'])
def test_malformed_payloads_exit_quietly(home: Path, event: str, raw: bytes) -> None:
    r = run_hook(home, event, raw=raw)
    assert r.stdout == b"" and spooled(home) == []


def test_malformed_notify_argument_is_logged(home: Path) -> None:
    run_hook(home, "codex-notify", raw=b"{oops")
    assert "ValueError" in hook_log(home) and spooled(home) == []


def test_invalid_utf8_is_replaced_not_fatal(home: Path) -> None:
    raw = b'{"session_id": "s", "last_assistant_message": "caf\xe9 \xff\xfe ok"}'
    run_hook(home, "claude-stop", raw=raw)
    (rec,) = spooled(home)
    assert rec["response"] == "caf\ufffd \ufffd\ufffd ok"


def test_missing_and_unknown_fields(home: Path) -> None:
    run_hook(home, "claude-stop", {})
    run_hook(home, "claude-prompt", {"prompt": "/rl good"})  # no session: still blocked, told why
    run_hook(home, "codex-notify", {"type": "agent-turn-complete"})
    assert spooled(home) == []
    run_hook(
        home,
        "claude-stop",
        {
            "session_id": "s",
            "last_assistant_message": "a",
            "brand_new_field": {"x": [1]},
            "transcript_path": 42,
        },
    )
    assert len(spooled(home)) == 1


def test_lone_surrogates_survive_as_valid_json(home: Path) -> None:
    run_hook(
        home, "claude-stop", raw=b'{"session_id": "s\\ud800", "last_assistant_message": "x\\udfff"}'
    )
    (rec,) = spooled(home)
    assert rec["response"] == "x\udfff"


def test_huge_transcript_costs_only_its_tail(home: Path, tmp_path: Path) -> None:
    """50 MB of tool output before the exchange: read the last 4 MB only, quickly."""
    big = tmp_path / "big.jsonl"
    filler = (
        json.dumps(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t", "content": "x" * 100_000}
                    ],
                },
            }
        ).encode()
        + b"\n"
    )
    with big.open("wb") as fh:
        for _ in range(500):
            fh.write(filler)
        fh.write((CLAUDE / "transcript.jsonl").read_bytes())
    assert big.stat().st_size > 50_000_000
    start = time.monotonic()
    run_hook(
        home, "claude-stop", fixture(CLAUDE / "stop_no_message.json", transcript_path=str(big))
    )
    elapsed = time.monotonic() - start
    (rec,) = spooled(home)
    assert (rec["prompt"], rec["response"]) == (EXPECTED["p2"], EXPECTED["a2"])
    assert elapsed < 5, elapsed


def test_transcript_tail_starting_mid_line_skips_the_fragment(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    head = json.dumps({"type": "user", "message": {"role": "user", "content": "old " * 2_000_000}})
    tail = (CLAUDE / "transcript.jsonl").read_text()
    path.write_text(head + "\n" + tail)  # the 8 MB first line is cut by the 4 MB tail
    run_hook(
        home, "claude-stop", fixture(CLAUDE / "stop_no_message.json", transcript_path=str(path))
    )
    assert turns(home)[0]["response"] == EXPECTED["a2"]


@posix_only
def test_symlinked_transcript_is_not_followed(home: Path, transcript: Path, tmp_path: Path) -> None:
    link = tmp_path / "link.jsonl"
    link.symlink_to(transcript)
    run_hook(
        home, "claude-stop", fixture(CLAUDE / "stop_no_message.json", transcript_path=str(link))
    )
    assert spooled(home) == []  # nothing to record without the file, and it was not read
    assert "transcript not read" in hook_log(home)
    run_hook(home, "claude-stop", fixture(CLAUDE / "stop.json", transcript_path=str(link)))
    (rec,) = spooled(home)
    assert rec["response"] == EXPECTED["a3"] and rec["context"] == []


@posix_only
def test_fifo_transcript_does_not_hang_the_hook(home: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    run_hook(
        home, "claude-stop", fixture(CLAUDE / "stop.json", transcript_path=str(fifo)), timeout=10
    )
    assert len(spooled(home)) == 1


@posix_only
def test_symlinked_spool_folder_is_refused(home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home / "spool").mkdir(parents=True)
    (home / "spool" / "incoming").symlink_to(elsewhere)
    r = run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "a"})
    assert r.stdout == b"" and list(elsewhere.iterdir()) == []
    assert "refusing" in hook_log(home)


@posix_only
def test_symlinked_state_file_is_refused(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("do not touch")
    sessions = home / "spool" / "sessions"
    sessions.mkdir(parents=True)
    hook = capture_core.Hook(str(home), "claude-prompt")
    (sessions / hook.state_name("s")).symlink_to(target)
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "p"})
    run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "a"})
    assert target.read_text() == "do not touch"
    assert (sessions / hook.state_name("s")).is_symlink()
    assert "refusing session state file" in hook_log(home)
    assert len(turns(home)) == 1  # the answer is still captured


@posix_only
def test_symlinked_log_is_not_written_through(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "victim.log"
    target.write_text("")
    (home / "logs").mkdir(parents=True)
    (home / "logs" / "hook.log").symlink_to(target)
    run_hook(home, "claude-stop", raw=b"{broken")
    assert target.read_text() == ""


def test_parallel_hooks_lose_nothing(home: Path) -> None:
    procs = []
    for i in range(8):
        event = "codex-notify" if i % 2 else "claude-stop"
        argv = capture.build_command(event, home, python=sys.executable)
        if event == "codex-notify":
            payload = {
                "type": "agent-turn-complete",
                "thread-id": "t",
                "turn-id": str(i),
                "input-messages": [f"p{i}"],
                "last-assistant-message": f"a{i}",
            }
            argv.append(json.dumps(payload))
            stdin = b""
        else:
            stdin = json.dumps({"session_id": "s", "last_assistant_message": f"a{i}"}).encode()
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        procs.append((proc, stdin))
    for proc, stdin in procs:
        out, err = proc.communicate(stdin, timeout=60)
        assert (proc.returncode, out, err) == (0, b"", b"")
    assert sorted(r["response"] for r in turns(home)) == [f"a{i}" for i in range(8)]
    assert not [n for n in os.listdir(home / "spool" / "incoming") if n.startswith(".")]


def test_no_home_anywhere_still_exits_zero(tmp_path: Path) -> None:
    argv = [sys.executable, "-I", "-S", capture.__file__, "claude-stop"]
    env = {k: v for k, v in os.environ.items() if k != "RLTRAY_HOME"}
    r = subprocess.run(argv, input=b"{}", capture_output=True, env=env, timeout=30)
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")


def test_prompt_far_back_in_the_transcript_is_still_found(home: Path, tmp_path: Path) -> None:
    """The first tail read misses the prompt; the hook reads further back, up to 4 MB."""
    path = tmp_path / "long-turn.jsonl"
    records = [json.loads(line) for line in (CLAUDE / "transcript.jsonl").read_text().splitlines()]
    answer_at = next(i for i, r in enumerate(records) if r.get("uuid") == EXPECTED["a2_uuid"])
    result = {
        "type": "user",
        "toolUseResult": {},
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": "y" * 50_000}],
        },
    }
    lines = [json.dumps(r) for r in records[:answer_at]] + [json.dumps(result)] * 20
    lines += [json.dumps(r) for r in records[answer_at:]]
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size > 900_000
    run_hook(
        home, "claude-stop", fixture(CLAUDE / "stop_no_message.json", transcript_path=str(path))
    )
    (rec,) = spooled(home)
    assert (rec["prompt"], rec["response"]) == (EXPECTED["p2"], EXPECTED["a2"])
    assert [m["content"] for m in rec["context"]] == [EXPECTED["p1"], EXPECTED["a1"]]


# -- an unwritable data folder ---------------------------------------------------------------


def test_fallback_log_path_is_per_user_in_the_temp_folder(tmpdir_env: Path) -> None:
    path = Path(capture_core.fallback_log_path())
    assert path.parent == tmpdir_env
    who = str(os.getuid()) if hasattr(os, "getuid") else path.stem.rsplit("-", 1)[-1]
    assert path.name == f"rltray-hook-{who}.log"


def run_in_process(
    home: Path, event: str, payload: Any, monkeypatch: pytest.MonkeyPatch
) -> list[dict[str, Any]]:
    """capture_core.main in this process (to inject failures root cannot get from chmod)."""
    import io

    answers: list[dict[str, Any]] = []
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(payload).encode())))
    assert capture_core.main(["--home", str(home), event], out=answers.append) == 0
    return answers


def deny_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every folder the hook opens fails as on a read-only data folder (EACCES)."""
    import errno

    def denied(home: str, *parts: str) -> Any:
        raise PermissionError(errno.EACCES, "Permission denied", os.path.join(home, *parts))

    monkeypatch.setattr(capture_core, "open_dir", denied)


def test_unwritable_data_folder_logs_to_the_fallback_log(
    home: Path, tmpdir_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug: with spool/ and logs/ unwritable a turn was dropped without a trace anywhere."""
    deny_writes(monkeypatch)
    answers = run_in_process(
        home, "claude-stop", {"session_id": "s", "last_assistant_message": "a"}, monkeypatch
    )
    assert answers == []  # nothing on stdout for a Stop
    fallback = Path(capture_core.fallback_log_path())
    lines = fallback.read_text().splitlines()
    assert "claude-stop: PermissionError: [Errno 13] Permission denied" in lines[-1]
    assert all(f"[data folder {home}: logs/hook.log not writable: " in line for line in lines)
    if os.name == "posix":
        assert fallback.stat().st_mode & 0o777 == 0o600


def test_rl_command_on_an_unwritable_data_folder_names_the_problem(
    home: Path, tmpdir_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug: the block reason pointed at logs/hook.log, which could not be written either."""
    deny_writes(monkeypatch)
    (answer,) = run_in_process(
        home, "claude-prompt", {"session_id": "s", "prompt": "/rl good"}, monkeypatch
    )
    reason = answer["reason"]
    assert answer["decision"] == "block"
    assert reason.startswith("rltray: could not record that command because rltray's data folder")
    assert "is not writable" in reason and str(home / "spool" / "incoming") in reason
    assert reason.endswith(f"; details in {capture_core.fallback_log_path()}.")
    assert reason.count(". ") == 0  # one sentence
    assert "command not recorded" in Path(capture_core.fallback_log_path()).read_text()


@posix_only
def test_blocked_spool_and_logs_fall_back_in_the_real_hook(home: Path, tmpdir_env: Path) -> None:
    """The subprocess as agents run it: spool/ and logs/ are files, not folders."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "spool").write_text("")
    (home / "logs").write_text("")
    r = run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "a"})
    assert r.stdout == b""
    reason = blocked(run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "/rl bad"}))
    fallback = capture_core.fallback_log_path()
    assert reason.startswith("rltray: could not record that command because rltray's data folder")
    assert str(home / "spool") in reason and reason.endswith(f"; details in {fallback}.")
    lines = Path(fallback).read_text().splitlines()
    assert len(lines) == 4 and all("not a plain folder" in line for line in lines)


@posix_only
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores modes")
def test_read_only_data_folder_falls_back(home: Path, tmpdir_env: Path) -> None:
    """The reported case: a read-only data folder (spool/ and logs/ exist but refuse writes)."""
    for sub in ("spool/incoming", "spool/sessions", "logs"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    modes = [(home / sub, 0o500) for sub in ("spool/incoming", "spool/sessions", "logs")]
    for folder, mode in modes:
        folder.chmod(mode)
    try:
        run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "a"})
        reason = blocked(run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "/rl bad"}))
    finally:
        for folder, _ in modes:
            folder.chmod(0o700)
    assert "rltray's data folder is not writable" in reason
    assert "Permission denied" in Path(capture_core.fallback_log_path()).read_text()


@posix_only
def test_fallback_log_is_not_written_through_a_link(
    home: Path, tmpdir_env: Path, tmp_path: Path
) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("")
    Path(capture_core.fallback_log_path()).symlink_to(target)
    home.mkdir(parents=True, exist_ok=True)
    (home / "logs").write_text("")
    run_hook(home, "claude-stop", raw=b"{broken")
    assert target.read_text() == ""


# -- credentials and old state in spool/sessions -----------------------------------------------

# Built from pieces so secret scanners do not flag this file; the shapes are real.
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
GHP = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
KNOWN_SECRETS = [
    AWS,
    GHP,
    "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF",
    "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    "sk-ant-" + "api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-AbCdEf",
    "xoxb-" + "1234567890-0987654321-AbCdEfGhIjKlMnOp",
    "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "sk_live_" + "51Habc123DEF456ghi789JKL",
    "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----",
    "Authorization: Bearer abc123DEF456ghi789JKL0mn",
    'password = "hunter2hunter2"',
    "DB_PASSWORD=s3cr3t-v4lue!",
    "postgres://app:pa55w0rd-x@db:5432/app",
    # Formats app/scrub.py learns in its linear rewrite; the hook must let them through too.
    "glpat-" + "xY3kZ9aB7cD5eF1gH2iJ",
    "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "pypi-" + "AgEIcHlwaS5vcmc" + "CJDY2ZmE4ZjQ5LTM3YjItNDU1Ny1hMDYxLTdiZjY1NjcyNzE3ZgACKlsz",
    "https://hooks.slack.com/services/" + "T0ABCDEF1/B0ABCDEF2/aBcDeFgHiJkLmNoPqRsTuVwX",
    "Basic " + "YWRtaW46aHVudGVyMg==",
    "curl -u admin:hunter2 https://example.com",
    # Issue 18 part 5: shapes whose match may hold none of the hints above.
    'curl -H "X-API-Key: 3f9a1c7e5b2d4f60a8c1" https://api.example.com',
    "Authorization: Token 9944b09199c62bcf",
    "mysql -u root -phunter2 app",
    "mariadb -uroot -pr00t",
    "docker login -u ci -p Dh8s7Xq2 registry.example.com",
    "mongosh -u admin -p s3cret",
    "PGPASSWORD=s3cret psql -h db",
    "DB_PASS=hunter2",
    "MYSQL_PWD=r00t mysql",
    "Driver={ODBC};Server=db;Uid=sa;Pwd=hunter2;",
    "SG." + "aB3dE6gH9jK2mN5pQ8sT1v" + "." + "wY4zA7cD0fG3iJ6lM9oP2rS5uV8xZ1bE4hK7nQ0tW3y",
    "AccountKey=" + "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsu==",
    'password = "hunter2"',
    "{'Authorization': 'Token 9944b09199c62bcf'}",
]


def session_files(home: Path) -> str:
    folder = home / "spool" / "sessions"
    return "".join(p.read_text() for p in folder.iterdir() if p.suffix == ".json")


@pytest.mark.parametrize("secret", KNOWN_SECRETS)
def test_every_format_scrub_knows_loads_the_scrubber(secret: str) -> None:
    """The hook skips loading app/scrub.py only for text in which it could find nothing."""
    from rltray.app.scrub import scrub

    text = f"here it is:\n{secret}\nthanks"
    assert capture_core.might_hold_secret(text)
    if scrub(text) == text:  # an older app/scrub.py does not know this format yet
        pytest.skip("app/scrub.py does not redact this format")


def test_plain_text_does_not_load_the_scrubber() -> None:
    for text in ["fix it", "Done: the parser now handles empty tables.", "rename foo to bar"]:
        assert not capture_core.might_hold_secret(text)
    assert capture_core.might_hold_secret("deploy with x9QfT27bLmZp04RcWk")  # any generated key


def test_session_state_keeps_no_credentials(home: Path) -> None:
    """Bug: an AWS key and a ghp_ token in a prompt and an answer stayed unscrubbed in
    spool/sessions/*.json (the raw prompt and the answer's preview) forever."""
    session = {"session_id": "s"}
    run_hook(home, "claude-prompt", {**session, "prompt": f"use {AWS} and {GHP} to deploy"})
    assert AWS not in session_files(home) and GHP not in session_files(home)
    answer = f"{AWS} works; {GHP} too.\nDeployed."
    run_hook(home, "claude-stop", {**session, "last_assistant_message": answer})
    good = blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl good"}))
    undo = blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl undo"}))
    for text in (session_files(home), good, undo):
        assert "AKIA" not in text and "ghp_" not in text
    assert good == 'rltray: rated the last answer good ("[REDACTED:aws-access-key] works; [REDAC…")'
    (rec,) = turns(home)  # the answer is recorded whole; the tray scrubs it at ingest
    assert rec["response"] == answer and rec["prompt"].startswith("use [REDACTED:aws-access-key]")


def test_a_scrubbed_prompt_still_finds_itself_in_the_transcript(home: Path, tmp_path: Path) -> None:
    """The transcript holds the prompt as typed; the state holds it scrubbed: still one turn."""
    secret_prompt = f"deploy with {AWS} please"
    records = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "p1"}},
        {"type": "assistant", "uuid": "a1", "message": {"id": "m1", "content": "a1"}},
        {"type": "user", "uuid": "u2", "message": {"role": "user", "content": secret_prompt}},
        {"type": "assistant", "uuid": "a2", "message": {"id": "m2", "content": "done"}},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    payload = {"session_id": "s", "transcript_path": str(path)}
    run_hook(home, "claude-prompt", {**payload, "prompt": secret_prompt})
    run_hook(home, "claude-stop", {**payload, "last_assistant_message": "done"})
    (rec,) = turns(home)
    assert rec["turn"] == "a2"  # the answer's own record: the prompt was found before it
    assert [m["content"] for m in rec["context"]] == ["p1", "a1"]
    assert AWS not in rec["prompt"] and AWS not in session_files(home)


def test_without_the_scrubber_no_possible_credential_is_kept(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: text that may hold a credential is dropped from state, plain text kept."""
    import io

    def missing() -> Any:
        raise FileNotFoundError("scrub.py")

    monkeypatch.setattr(capture_core, "load_scrubber", missing)
    for prompt in (f"use {AWS}", "fix it"):
        payload = json.dumps({"session_id": "s", "prompt": prompt}).encode()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(payload)))
        capture_core.main(["--home", str(home), "claude-prompt"], out=pytest.fail)
        state = json.loads(session_files(home))
        assert state["prompt"] == ("" if "AKIA" in prompt else prompt)
    assert "credential scrubber not loaded" in hook_log(home)


def age(path: Path, days: float) -> None:
    when = time.time() - days * 86400
    os.utime(path, (when, when), follow_symlinks=False)


@posix_only
def test_idle_session_state_is_pruned_at_most_once_a_day(home: Path, tmp_path: Path) -> None:
    """Bug: session state files (with prompts in them) were never deleted."""
    sessions = home / "spool" / "sessions"
    sessions.mkdir(parents=True)
    old, fresh, stray = (
        sessions / "claude-code-old.json",
        sessions / "codex-new.json",
        sessions / ".x.tmp",
    )
    for path in (old, fresh, stray):
        path.write_text("{}")
    age(old, 15)
    age(stray, 15)
    outside = tmp_path / "outside.json"
    outside.write_text("keep")
    age(outside, 30)
    link = sessions / "claude-code-link.json"
    link.symlink_to(outside)
    age(link, 30)
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "hi"})
    assert not old.exists() and not stray.exists() and fresh.exists()
    assert link.is_symlink() and outside.read_text() == "keep"
    # The stamp marks the scan: another idle file waits for tomorrow's.
    old.write_text("{}")
    age(old, 20)
    run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "a"})
    assert old.exists()
    age(sessions / capture_core.PRUNE_STAMP, 1.1)
    run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "b"})
    assert not old.exists() and fresh.exists()


def test_a_resumed_session_keeps_its_own_idle_state(home: Path) -> None:
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "q"})
    run_hook(home, "claude-stop", {"session_id": "s", "last_assistant_message": "old answer"})
    sessions = home / "spool" / "sessions"
    (own,) = [p for p in sessions.iterdir() if p.suffix == ".json"]
    age(own, 20)
    (sessions / capture_core.PRUNE_STAMP).unlink()
    reason = blocked(run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "/rl good"}))
    assert "old answer" in reason


def notify_payload(thread: str, turn: str, inputs: list[str], answer: str) -> dict[str, Any]:
    return {"type": "agent-turn-complete", "thread-id": thread, "turn-id": turn,
            "cwd": "/w", "client": "codex-tui", "input-messages": inputs,
            "last-assistant-message": answer}


@pytest.mark.parametrize("typed", ["/rl bad too long", "$rl bad too long"])
def test_codex_notify_applies_an_rl_command_to_the_previous_turn(home: Path, typed: str) -> None:
    """Issue 19: with Codex's hooks not trusted, `/rl bad` reaches the model and only notify
    sees it. It is not a turn to train on; it rates the turn before it, and the log says so."""
    run_hook(home, "codex-notify", notify_payload("th", "t1", ["fix the bug"], "fixed"))
    run_hook(home, "codex-notify", notify_payload("th", "t2", [typed], "rltray: noted"))
    (turn,) = turns(home)
    assert turn["prompt"] == "fix the bug"
    (command,) = [r for r in spooled(home) if r["kind"] == "command"]
    assert (command["command"], command["target_turn"], command["comment"]) == (
        "bad", "t1", "too long")
    assert command["event"] == "codex-notify"
    assert 'applied from notify' in hook_log(home) and '("fixed")' in hook_log(home)


def test_codex_notify_skips_codex_naming_its_thread(home: Path) -> None:
    """Codex's terminal UI asks the model for a thread title in a thread of its own, and
    notify reports that turn too (seen with Codex 0.169.0): it is Codex's, never a turn."""
    title = ("Generate a concise, single-line task title of at most 36 characters and under "
             "five words where possible.\n\nUser prompt:\nfix the bug")
    run_hook(home, "codex-notify", notify_payload("title-thread", "t9", [title], "Fix the bug"))
    assert spooled(home) == []


def test_a_new_agent_is_one_events_module_beside_the_core(tmp_path: Path) -> None:
    """The hook knows an agent from its events module alone: a copy of the hook program
    with an events_demo.py beside it records demo-stop turns as agent "demo"."""
    import json
    import shutil
    import subprocess
    import sys

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("capture.py", "capture_core.py"):
        shutil.copy(Path(capture.__file__).resolve().parent / name, hooks / name)
    (hooks / "events_demo.py").write_text(
        'core = None\nAGENT = "demo"\nEVENTS = ("stop", "prompt")\nUSAGE = "usage"\n\n'
        "def stop(hook, payload):\n"
        '    session = core.session_of(payload, "sid")\n'
        "    state, folder = hook.load_state(session)\n"
        "    core.record_turn(hook, session, state, folder, {\n"
        '        "turn": payload["id"], "prompt": payload["q"], "response": payload["a"],\n'
        '        "context": [], "cwd": None, "model": None, "event": "stop",\n'
        '        "transcript": None})\n'
    )
    home = tmp_path / "home"
    payload = json.dumps({"sid": "s1", "id": "t1", "q": "why?", "a": "because."})
    argv = [sys.executable, "-I", "-S", str(hooks / "capture.py"), "--home", str(home)]
    done = subprocess.run([*argv, "demo-stop"], input=payload.encode(), capture_output=True)
    assert done.returncode == 0
    (record,) = (home / "spool" / "incoming").glob("*.json")
    stored = json.loads(record.read_text())
    assert (stored["agent"], stored["prompt"], stored["response"]) == ("demo", "why?", "because.")
    other = subprocess.run([*argv, "demo-notify"], input=b"{}", capture_output=True)
    assert other.returncode == 0  # not one of its events: logged, never the agent's problem
    assert len(list((home / "spool" / "incoming").glob("*.json"))) == 1


# -- review 2: a rating that is wrong or lost ----------------------------------------------


def codex_prompt(home: Path, turn: str, text: str) -> subprocess.CompletedProcess[bytes]:
    return run_hook(home, "codex-prompt", {"session_id": "th", "turn_id": turn, "cwd": "/w",
                                           "prompt": text})


def codex_stop(home: Path, turn: str, answer: str) -> None:
    run_hook(home, "codex-stop", {"session_id": "th", "turn_id": turn, "cwd": "/w",
                                  "model": "gpt-5", "stop_hook_active": False,
                                  "last_assistant_message": answer})


def codex_state(home: Path) -> Path:
    return home / "spool" / "sessions" / capture_core.state_file_name("codex", "th")


def test_codex_stop_never_pairs_its_answer_with_an_older_prompt(home: Path) -> None:
    """Regression (review 2, bug 1): notify of turn 1, fire-and-forget, saved the state it had
    read before the prompt hook of turn 2 saved, so turn 2's prompt was lost and Stop stored
    answer two with prompt one; the store keeps the first prompt it gets, so notify's right
    one never repaired it. The state write is replayed here as the race left it."""
    codex_prompt(home, "1", "task one")
    codex_stop(home, "1", "answer one")
    stale = codex_state(home).read_bytes()  # what notify of turn 1 read
    codex_prompt(home, "2", "task two")
    codex_state(home).write_bytes(stale)  # ... and saved last: prompt two gone
    run_hook(home, "codex-notify", notify_payload("th", "1", ["task one"], "answer one"))
    codex_stop(home, "2", "answer two")
    assert [t["prompt"] for t in turns(home) if t["turn"] == "2"] == []  # left to notify
    assert "prompt hook did not see" in hook_log(home)
    run_hook(home, "codex-notify", notify_payload("th", "2", ["task two"], "answer two"))
    assert [(t["turn"], t["prompt"]) for t in turns(home)] == [("1", "task one"),
                                                               ("2", "task two")]


def test_a_notify_that_brings_nothing_new_leaves_the_state_file_alone(home: Path) -> None:
    """Regression (review 2, bug 1): notify saved the whole session state even when it spooled
    nothing, and a save from an older read wiped the prompt just recorded."""
    codex_prompt(home, "1", "task one")
    codex_stop(home, "1", "answer one")
    run_hook(home, "codex-notify", notify_payload("th", "1", ["task one"], "answer one"))
    before = codex_state(home).stat()
    run_hook(home, "codex-notify", notify_payload("th", "1", ["task one"], "answer one"))
    after = codex_state(home).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


@posix_only
def test_two_hooks_of_one_session_change_its_state_one_after_the_other(home: Path) -> None:
    """Regression (review 2, bug 1): the state was read, changed and written without a lock,
    so of two hooks of one session running together the later save undid the other's. A
    hook now waits for the session's lock (held here as another hook would hold it)."""
    codex_prompt(home, "1", "task one")
    state_file = codex_state(home)
    lock = os.open(str(state_file)[: -len(".json")] + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.lockf(lock, os.F_LOCK, 0)
        state = json.loads(state_file.read_text())  # the holder's read
        argv = capture.build_command("codex-prompt", home, python=sys.executable)
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"session_id": "th", "turn_id": "2",
                                     "prompt": "task two"}).encode())
        proc.stdin.close()
        time.sleep(0.5)  # a hook that does not wait has read and saved by now
        state["other_hook"] = "saved"  # the holder's save, of what it read
        state_file.write_text(json.dumps(state))
    finally:
        os.close(lock)  # releases the lock
    assert proc.wait(timeout=30) == 0
    assert proc.stdout is not None and proc.stderr is not None
    assert (proc.stdout.read(), proc.stderr.read()) == (b"", b"")
    state = json.loads(state_file.read_text())
    assert (state["prompt"], state["other_hook"]) == ("task two", "saved")


def test_codex_rl_that_reached_the_model_is_no_turn_and_rates_the_one_before(home: Path) -> None:
    """Regression (review 2, bug 2): with the Stop hook trusted and the prompt hook not
    taking `$rl bad`, Stop stored the model's reply to `$rl bad` under the previous prompt,
    and notify then rated that reply."""
    codex_prompt(home, "1", "task one")
    codex_stop(home, "1", "answer one")
    run_hook(home, "codex-notify", notify_payload("th", "1", ["task one"], "answer one"))
    codex_stop(home, "2", "Noted, I'll do better.")
    run_hook(home, "codex-notify", notify_payload("th", "2", ["$rl bad"], "Noted, I'll do better."))
    assert [(t["turn"], t["response"]) for t in turns(home)] == [("1", "answer one")]
    (command,) = [r for r in spooled(home) if r["kind"] == "command"]
    assert (command["command"], command["target_turn"]) == ("bad", "1")


def test_codex_rl_whose_reply_stop_took_for_a_turn_does_not_rate_that_reply(home: Path) -> None:
    """Regression (review 2, bug 2): a Stop that took an unanswered earlier prompt for the
    turn's (a prompt hook without turn ids) recorded the reply to `$rl bad` as the newest
    turn; notify's `$rl bad` then rated it. It is not the turn meant: here the prompt before
    it was interrupted, so nothing is rated, as a typed `$rl` after an interrupted turn."""
    run_hook(home, "codex-prompt", {"session_id": "th", "prompt": "task one"})
    codex_stop(home, "1", "answer one")
    run_hook(home, "codex-prompt", {"session_id": "th", "prompt": "task two"})  # interrupted
    codex_stop(home, "2", "Noted, I'll do better.")  # the reply to `$rl bad`
    run_hook(home, "codex-notify", notify_payload("th", "2", ["$rl bad"], "Noted, I'll do better."))
    assert not [r for r in spooled(home) if r["kind"] == "command"]
    assert "was not captured" in hook_log(home)
    assert "was not captured" in blocked(codex_prompt(home, "3", "$rl good"))  # it stays so


def test_a_late_notify_keeps_an_interrupted_turn_unrated(home: Path) -> None:
    """Regression (review 2, bug 3): notify of turn 1 arriving after the prompt of turn 2
    (then interrupted: Codex sends nothing) moved the session's last answer time, so
    `$rl bad` about turn 2 rated answer one again."""
    codex_prompt(home, "1", "task one")
    codex_stop(home, "1", "answer one")
    codex_prompt(home, "2", "task two")
    run_hook(home, "codex-notify", notify_payload("th", "1", ["earlier", "task one"],
                                                  "answer one"))
    reason = blocked(codex_prompt(home, "3", "$rl bad it went wrong"))
    assert "was not captured" in reason
    assert not [r for r in spooled(home) if r["kind"] == "command"]


def test_codex_notify_without_a_turn_id_is_the_turn_stop_recorded(home: Path) -> None:
    """Regression (review 2, bug 8): a notify without turn-id got a hash for an id, and the
    turn Stop had recorded under its turn_id was stored a second time."""
    codex_prompt(home, "12", "task")
    codex_stop(home, "12", "answer")
    payload = notify_payload("th", "12", ["earlier", "task"], "answer")
    del payload["turn-id"]
    run_hook(home, "codex-notify", payload)
    assert [(t["turn"], t["event"]) for t in turns(home)] == [("12", "stop"),
                                                              ("12", "codex-notify")]
    other = notify_payload("th", "13", ["another task"], "answer")
    del other["turn-id"]
    run_hook(home, "codex-notify", other)  # another prompt: another turn
    assert len({t["turn"] for t in turns(home)}) == 2


def claude_records(path: Path, *records: tuple[str, Any, str]) -> None:
    with path.open("a") as f:
        for kind, content, uuid in records:
            message: dict[str, Any] = {"role": kind, "content": content}
            if kind == "assistant":
                message.update(id="m-" + uuid, content=[{"type": "text", "text": content}])
            f.write(json.dumps({"type": kind, "message": message, "uuid": uuid,
                                **({"isMeta": True} if uuid.startswith("meta") else {})}) + "\n")


def test_claude_reply_to_an_rl_that_reached_the_model_is_no_turn(home: Path,
                                                                 tmp_path: Path) -> None:
    """Regression (review 2, bug 5): `/rl good` that the prompt hook did not block (it timed
    out) reached the model through rltray's command file; Stop recorded the model's reply
    as a turn, paired with the prompt before, since the command's records are no prompt."""
    path = tmp_path / "t.jsonl"
    claude_records(path, ("user", "task one", "u1"), ("assistant", "answer one", "a1"))
    stop = {"session_id": "s", "transcript_path": str(path), "stop_hook_active": False}
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "task one"})
    run_hook(home, "claude-stop", {**stop, "last_assistant_message": "answer one"})
    reply = "rltray's hooks did not run, so nothing was rated."
    claude_records(
        path,
        ("user", "<command-message>rl</command-message>\n<command-name>/rl</command-name>\n"
                 "<command-args>good</command-args>", "u2"),
        ("user", [{"type": "text", "text": "The user typed `/rl good`, an rltray command."}],
         "meta-u3"),
        ("assistant", reply, "a2"))
    run_hook(home, "claude-stop", {**stop, "last_assistant_message": reply})
    assert [t["response"] for t in turns(home)] == ["answer one"]
    assert "rltray command; nothing recorded" in hook_log(home)
    # the same when the `/rl` itself is in the transcript, and the turn before interrupted
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "task two"})
    claude_records(path, ("user", "task two", "u4"), ("user", "/rl bad", "u5"),
                   ("assistant", "Sorry about that.", "a3"))
    run_hook(home, "claude-stop", {**stop, "last_assistant_message": "Sorry about that."})
    assert [t["response"] for t in turns(home)] == ["answer one"]


def test_claude_stop_without_an_answer_and_a_lagging_transcript_records_nothing(
    home: Path, tmp_path: Path
) -> None:
    """Regression (review 2, bug 6): Claude Code before 2.1.47 sends no
    last_assistant_message; when the transcript had not caught up with the new prompt,
    Stop paired it with the previous answer, and `/rl bad` then rated that pair."""
    path = tmp_path / "t.jsonl"
    claude_records(path, ("user", "task one", "u1"), ("assistant", "answer one", "a1"))
    stop = {"session_id": "s", "transcript_path": str(path), "stop_hook_active": False}
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "task one"})
    run_hook(home, "claude-stop", stop)
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "task two"})
    run_hook(home, "claude-stop", stop)  # the transcript is not written yet
    assert [(t["prompt"], t["response"]) for t in turns(home)] == [("task one", "answer one")]
    assert "transcript lags" in hook_log(home)
    claude_records(path, ("user", "task two", "u2"), ("assistant", "answer two", "a2"))
    run_hook(home, "claude-stop", stop)  # a later Stop finds it
    assert [(t["prompt"], t["response"]) for t in turns(home)][-1] == ("task two", "answer two")


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_folders_the_hook_makes_for_its_home_are_never_writable_by_others(
    tmp_path: Path,
) -> None:
    """The hook often runs before the tray ever did, and makes the data folder's parents
    (~/.local/share): under umask 000 they came out 0777, so another user could swap the
    data folder for their own (review2-sec swap_datafolder)."""
    home = tmp_path / "user" / ".local" / "share" / "rltray"
    (tmp_path / "user").mkdir()
    argv = capture.build_command("claude-prompt", home, python=sys.executable)
    payload = {"session_id": "s", "prompt": "hello", "hook_event_name": "UserPromptSubmit"}
    subprocess.run(argv, input=json.dumps(payload).encode(), capture_output=True, timeout=30,
                   preexec_fn=lambda: os.umask(0))
    assert home.is_dir()
    assert stat.S_IMODE(home.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(home.parent.parent.stat().st_mode) == 0o755
    assert not stat.S_IMODE(home.stat().st_mode) & 0o077
