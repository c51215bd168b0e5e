"""Lessons in the hook program (issue 24), run as the agents run it (a real subprocess).

SessionStart hands the session the text the service wrote for its folder
(``lessonfiles``); the prompt after `/rl bad <why>` tells the agent why, once; `/rl lesson`
spools a lesson and `/rl lessons` shows what a new session is told. Every answer is
checked key by key against the agent's documented output (tests/support/hookschemas.py):
Codex refuses an answer holding any other key.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rltray.app.hooks import capture, capture_core, events_claude, lessonfiles

from tests.app.test_capture import (
    age,
    blocked,
    hook_log,
    notify_payload,
    posix_only,
    run_hook,
    spooled,
    tmpdir_env,  # noqa: F401 (autouse: the fallback log stays in this test's temp folder)
)
from tests.support.hookschemas import problems

AGENTS = [("claude-code", "claude"), ("codex", "codex")]
NOTE = "The user rated your previous answer bad in rltray and said why: "


@pytest.fixture
def home(rltray_home: Path) -> Path:
    return rltray_home


def answer(result: subprocess.CompletedProcess[bytes]) -> dict[str, Any] | None:
    return json.loads(result.stdout) if result.stdout else None


def start(home: Path, prefix: str, cwd: Path, session: str = "s") -> dict[str, Any] | None:
    payload = {"session_id": session, "transcript_path": None, "cwd": str(cwd),
               "hook_event_name": "SessionStart", "source": "startup", "model": "m",
               "permission_mode": "default"}
    return answer(run_hook(home, f"{prefix}-start", payload))


def context(got: dict[str, Any] | None) -> str | None:
    return None if got is None else got["hookSpecificOutput"]["additionalContext"]


def commands(home: Path) -> list[dict[str, Any]]:
    return [r for r in spooled(home) if r["kind"] == "command"]


def answered_turn(home: Path, prefix: str, session: dict[str, str], n: int = 1) -> None:
    run_hook(home, f"{prefix}-prompt", {**session, "prompt": f"question {n}"})
    run_hook(home, f"{prefix}-stop", {**session, "turn_id": f"t{n}",
                                      "last_assistant_message": f"answer {n}"})


# -- SessionStart --------------------------------------------------------------------------


@pytest.mark.parametrize(("agent", "prefix"), AGENTS)
def test_session_start_gives_the_folders_lessons_in_the_agents_documented_shape(
    home: Path, tmp_path: Path, agent: str, prefix: str
) -> None:
    project = tmp_path / "shop"
    assert start(home, prefix, project) is None  # lessons off: no output at all
    lessonfiles.write_all(str(home), agent, {lessonfiles.key(str(project)): "- Run one test.",
                                             lessonfiles.GLOBAL: "- Be brief."})  # fmt: skip
    got = start(home, prefix, project)
    assert problems(agent, "SessionStart", got) == []
    assert context(got) == "- Run one test."
    assert context(start(home, prefix, tmp_path / "elsewhere")) == "- Be brief."
    lessonfiles.write_all(str(home), agent, {})  # on, but nothing to say
    assert start(home, prefix, project) is None
    assert hook_log(home) == ""


def test_claude_code_tells_the_user_only_when_the_lessons_changed(
    home: Path, tmp_path: Path
) -> None:
    project = tmp_path / "shop"
    lessonfiles.write_all(str(home), "claude-code", {lessonfiles.GLOBAL: "- A."})
    first = start(home, "claude", project)
    assert first is not None and first["systemMessage"] == events_claude.LESSONS_CHANGED
    assert problems("claude-code", "SessionStart", first) == []
    again = start(home, "claude", project, session="s2")
    assert again is not None and "systemMessage" not in again and context(again) == "- A."
    lessonfiles.write_all(str(home), "claude-code", {lessonfiles.GLOBAL: "- A.\n- B."})
    changed = start(home, "claude", project, session="s3")
    assert changed is not None and "systemMessage" in changed
    assert "systemMessage" in (start(home, "claude", tmp_path / "other") or {})  # news there
    lessonfiles.write_all(str(home), "claude-code", {})
    assert start(home, "claude", project) is None
    lessonfiles.write_all(str(home), "claude-code", {lessonfiles.GLOBAL: "- A.\n- B."})
    back = start(home, "claude", project)  # gone and back again is a change too
    assert back is not None and "systemMessage" in back


def test_codex_never_gets_a_user_note_at_session_start(home: Path, tmp_path: Path) -> None:
    lessonfiles.write_all(str(home), "codex", {lessonfiles.GLOBAL: "- A."})
    for session in ("s1", "s2"):
        got = start(home, "codex", tmp_path, session=session)
        assert got == {"hookSpecificOutput": {"hookEventName": "SessionStart",
                                              "additionalContext": "- A."}}


def test_a_resumed_codex_thread_is_not_given_the_same_lessons_twice(
    home: Path, tmp_path: Path
) -> None:
    """Codex 0.169.0 runs SessionStart on every `resume` and keeps each start's context in the
    thread: the same text would pile up. Claude Code does not keep it, so it gets it each time."""
    for agent in ("codex", "claude-code"):
        lessonfiles.write_all(str(home), agent, {lessonfiles.GLOBAL: "- A."})
    assert context(start(home, "codex", tmp_path, session="t1")) == "- A."
    assert start(home, "codex", tmp_path, session="t1") is None  # resumed: it has them
    assert context(start(home, "codex", tmp_path, session="t2")) == "- A."  # a new thread
    lessonfiles.write_all(str(home), "codex", {lessonfiles.GLOBAL: "- A.\n- B."})
    assert context(start(home, "codex", tmp_path, session="t1")) == "- A.\n- B."  # news
    for _ in range(2):
        assert context(start(home, "claude", tmp_path, session="t1")) == "- A."


# -- the prompt after a bad rating -----------------------------------------------------------


@pytest.mark.parametrize(("agent", "prefix"), AGENTS)
def test_the_prompt_after_a_bad_rating_with_a_comment_tells_the_agent_why_once(
    home: Path, agent: str, prefix: str
) -> None:
    session = {"session_id": "s", "cwd": "/w"}
    answered_turn(home, prefix, session)
    reason = blocked(run_hook(home, f"{prefix}-prompt",
                              {**session, "prompt": '/rl bad -c "ignored the failing test"'}))
    assert "rated the last answer bad with your comment" in reason
    (command,) = commands(home)
    assert command["comment"] == "ignored the failing test"  # as `rltray bad -c "…"` says it
    other = run_hook(home, f"{prefix}-prompt", {"session_id": "other", "prompt": "hi"})
    assert other.stdout == b""  # another session is told nothing
    got = answer(run_hook(home, f"{prefix}-prompt", {**session, "prompt": "try again"}))
    assert problems(agent, "UserPromptSubmit", got) == []
    assert context(got) == NOTE + "ignored the failing test"
    assert run_hook(home, f"{prefix}-prompt", {**session, "prompt": "and now?"}).stdout == b""


def test_a_low_score_with_a_why_is_told_and_a_rating_taken_back_is_not(home: Path) -> None:
    session = {"session_id": "s"}
    answered_turn(home, "claude", session)

    def rate_then_ask(*typed: str) -> str | None:
        for text in typed:
            blocked(run_hook(home, "claude-prompt", {**session, "prompt": text}))
        told = context(answer(run_hook(home, "claude-prompt", {**session, "prompt": "next"})))
        run_hook(home, "claude-stop", {**session, "last_assistant_message": "an answer"})
        return told

    assert rate_then_ask("/rl 2 wrong file") == (
        "The user rated your previous answer 2 out of 5 (bad) in rltray and said why: wrong file")
    assert rate_then_ask("/rl bad") is None  # no why, nothing to tell
    assert rate_then_ask("/rl 1") is None
    assert rate_then_ask("/rl bad too long", "/rl good") is None  # changed their mind
    assert rate_then_ask("/rl bad too long", "/rl undo") is None  # took it back
    assert rate_then_ask("/rl bad too long", "/rl status") == NOTE + "too long"


def test_a_note_the_service_leaves_reaches_only_that_sessions_next_prompt(home: Path) -> None:
    lessonfiles.note_after_rating(str(home), "claude-code", "s1", "")  # no why: no note
    assert not (home / "spool" / "sessions").exists()
    lessonfiles.note_after_rating(str(home), "claude-code", "s1", "  too\n   long ")
    (note,) = (home / "spool" / "sessions").glob("*.note")
    assert note.stat().st_mode & 0o777 == 0o600
    assert run_hook(home, "claude-prompt", {"session_id": "s2", "prompt": "q"}).stdout == b""
    assert run_hook(home, "codex-prompt", {"session_id": "s1", "prompt": "q"}).stdout == b""
    got = answer(run_hook(home, "claude-prompt", {"session_id": "s1", "prompt": "q"}))
    assert context(got) == NOTE + "too long"
    assert not note.exists()
    lessonfiles.note_after_rating(str(home), "codex", "s1", "x" * 2000, score=2)
    told = context(answer(run_hook(home, "codex-prompt", {"session_id": "s1", "prompt": "q"})))
    assert told is not None and told.endswith("x…") and len(told) < 600


def test_rating_an_older_answer_leaves_no_note_about_the_newest_one(home: Path) -> None:
    """Regression (review 3, finding 4): `rltray rate 1 bad -c …` (or the ratings window) on
    an OLDER turn left "The user rated your previous answer bad …" for the session's next
    prompt, about the answer the agent had just given, which the user did not rate; and
    rating that older turn good again, or editing its comment, took back or rewrote a note
    that was about the newest answer."""
    from rltray.app.paths import Paths
    from rltray.app.service import Service

    session = {"session_id": "s1", "cwd": "/work/shop"}
    answered_turn(home, "claude", session, 1)
    answered_turn(home, "claude", session, 2)

    def next_prompt() -> str | None:
        return context(answer(run_hook(home, "claude-prompt", {**session, "prompt": "go on"})))

    with Service(Paths.from_env(os.environ)) as service:
        service.ingest()
        older, newest = sorted(t.id for t in service.store.list_turns())
        service.rate(older, -1, comment="you edited the wrong file, undo that")
        assert next_prompt() is None
        service.rate(newest, -1, comment="the migration has no down step")
        service.rate(older, 1)  # the older answer changes its rating: not this note's business
        service.rate(older, -1, comment="wrong file after all")
        service.comment(older, "the wrong file, really")
        assert next_prompt() == NOTE + "the migration has no down step"
        assert next_prompt() is None  # once


def test_a_note_goes_with_its_turns_rating_even_after_a_later_turn(home: Path) -> None:
    """Regression (review 4, item 1): the note after a Bad with a why, given while the next
    prompt was already on its way, outlived the user taking the rating back (undo, good,
    delete) once that prompt's answer was captured: the note was taken back only while its
    turn was the session's newest, so the agent was still told "your previous answer was
    rated bad: why". And an undo of an older turn's rating took back the note about the
    newest one. A note names its turn; only that turn's rating takes it back."""
    from rltray.app.paths import Paths
    from rltray.app.service import Service

    def next_prompt(sid: str) -> str | None:
        return context(answer(run_hook(home, "claude-prompt", {"session_id": sid,
                                                                "prompt": "go on"})))

    with Service(Paths.from_env(os.environ)) as service:

        def session_turns(sid: str) -> list[Any]:
            return sorted((t for t in service.store.list_turns() if t.session == sid),
                          key=lambda t: t.id)  # fmt: skip

        def bad_while_the_next_prompt_runs(sid: str) -> int:
            answered_turn(home, "claude", {"session_id": sid}, 1)
            service.ingest()
            (first,) = session_turns(sid)
            run_hook(home, "claude-prompt", {"session_id": sid, "prompt": "question 2"})
            service.rate(first.id, -1, comment="you ignored the failing test")
            run_hook(home, "claude-stop", {"session_id": sid, "turn_id": "t2",
                                           "last_assistant_message": "answer 2"})
            service.ingest()  # the later turn is stored: the rated one is no longer the newest
            return first.id

        service.unrate(bad_while_the_next_prompt_runs("undone"))
        service.rate(bad_while_the_next_prompt_runs("flipped"), 1)
        service.delete_turns([bad_while_the_next_prompt_runs("deleted")], "a test")
        kept = bad_while_the_next_prompt_runs("kept")
        for sid in ("undone", "flipped", "deleted"):
            assert next_prompt(sid) is None, sid
        assert next_prompt("kept") == NOTE + "you ignored the failing test"  # nothing changed

        # `/rl bad` on answer 1, told; answer 2 rated bad with a why in the window; then
        # `/rl undo` (of answer 1, the last rated here) and a withdrawal of answer 1's rating
        # in the CLI: neither is about answer 2, whose note stays
        session = {"session_id": "older"}
        answered_turn(home, "claude", session, 1)
        blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl bad wrong file"}))
        assert next_prompt("older") == NOTE + "wrong file"
        run_hook(home, "claude-stop", {**session, "turn_id": "t2",
                                       "last_assistant_message": "answer 2"})
        service.ingest()
        first, second = session_turns("older")
        assert kept != first.id and first.rating is not None
        service.rate(second.id, -1, comment="the migration has no down step")
        blocked(run_hook(home, "claude-prompt", {**session, "prompt": "/rl undo"}))
        service.ingest()
        assert service.store.active_rating(first.id) is None
        service.rate(first.id, -1)
        service.unrate(first.id)
        assert next_prompt("older") == NOTE + "the migration has no down step"


@posix_only
def test_an_untaken_note_goes_with_idle_session_state(home: Path) -> None:
    lessonfiles.note_after_rating(str(home), "codex", "gone", "why")
    (note,) = (home / "spool" / "sessions").glob("*.note")
    age(note, 15)
    run_hook(home, "claude-prompt", {"session_id": "s", "prompt": "q"})
    assert not note.exists()


def test_codex_notify_spools_a_lesson_that_reached_the_model_and_leaves_no_note(
    home: Path,
) -> None:
    """Untrusted Codex hooks: `$rl ...` reaches the model and only notify sees it. A lesson is
    still saved; a bad rating leaves no note (the model read the comment itself)."""
    run_hook(home, "codex-notify", notify_payload("th", "t1", ["fix the bug"], "fixed"))
    run_hook(home, "codex-notify", notify_payload("th", "t2", ["$rl lesson Name the file"], "ok"))
    run_hook(home, "codex-notify", notify_payload("th", "t3", ["$rl bad wrong file"], "ok"))
    assert [(c["command"], c["comment"], c["target_turn"]) for c in commands(home)] == [
        ("lesson", "Name the file", "t1"), ("bad", "wrong file", "t1")]
    assert not list((home / "spool" / "sessions").glob("*.note"))


@pytest.mark.parametrize(("typed", "comment"), [
    ('/rl bad -c "ignored the test"', "ignored the test"),
    ("/rl bad --comment='x y'", "x y"),
    ("/rl bad --comment=plain", "plain"),
    ("/rl 2 \u201cwrong file\u201d", "wrong file"),
    ("/rl bad -c", None),
    ("/rl bad said -c twice", "said -c twice"),
    ('/rl bad "quoted" words', '"quoted" words'),
])
def test_a_comment_may_be_given_as_the_cli_takes_it(typed: str, comment: str | None) -> None:
    assert capture_core.rl_command(typed) == (typed.split()[1], comment)


# -- /rl lesson, /rl lessons -------------------------------------------------------------------


@pytest.mark.parametrize(("agent", "prefix"), AGENTS)
def test_rl_lesson_spools_the_text_and_rl_lessons_shows_what_sessions_are_told(
    home: Path, tmp_path: Path, agent: str, prefix: str
) -> None:
    project = tmp_path / "shop"
    session = {"session_id": "s", "cwd": str(project)}

    def say(prompt: str) -> str:
        return blocked(run_hook(home, f"{prefix}-prompt", {**session, "prompt": prompt}))

    assert say("/rl lessons") == (
        "rltray: lessons are off for this agent; new sessions are told none "
        f"(`rltray lessons on --agent {agent}` turns them on).")
    assert say("/rl lesson   Run the linter before committing ") == (
        f'rltray: saved the lesson ("Run the linter before committing") for {project}; '
        "lessons are off for this agent, so sessions are not told it yet.")
    answered_turn(home, prefix, session)
    lessonfiles.write_all(str(home), agent, {})
    assert say("/rl lessons") == (
        "rltray: no lessons for this folder yet; new sessions here are told none.")
    assert say("$rl lesson Say which file changed" if prefix == "codex"
               else "/rl lesson Say which file changed") == (
        f'rltray: saved the lesson ("Say which file changed") for {project}.')
    lessonfiles.write_all(str(home), agent, {lessonfiles.key(str(project)): "- Run one test.",
                                             lessonfiles.GLOBAL: "- Be brief."})  # fmt: skip
    assert say("/rl lessons") == "rltray: new sessions in this folder are told:\n- Run one test."
    assert say("/rl lesson").startswith("rltray: usage:")  # a lesson needs its text
    first, second = commands(home)
    assert {k: first[k] for k in ("kind", "agent", "session", "command", "comment", "cwd")} == {
        "kind": "command", "agent": agent, "session": "s", "command": "lesson",
        "comment": "Run the linter before committing", "cwd": str(project)}
    assert first["target_turn"] is None and second["target_turn"] is not None
    assert (second["command"], second["comment"]) == ("lesson", "Say which file changed")
    turns = [r for r in spooled(home) if r["kind"] == "turn"]
    assert [t["prompt"] for t in turns] == ["question 1"]  # no `/rl lesson…` is a turn


@pytest.mark.parametrize(("agent", "prefix"), AGENTS)
def test_rl_lesson_as_a_sessions_first_prompt_is_told_in_that_folder_only(
    home: Path, agent: str, prefix: str
) -> None:
    """Regression (review 3, finding 1): `/rl lesson` typed before the session had a turn (its
    first prompt, or after /clear) spooled no folder, and the service made it a pinned lesson
    for every project and every agent. The record carries the folder; the reply says it."""
    from rltray.app.paths import Paths
    from rltray.app.service import Service

    shop, blog = Path.home() / "shop", Path.home() / "blog"
    with Service(Paths.from_env(os.environ)) as service:
        for each, _ in AGENTS:
            service.lessons.switch(each, True)
        assert start(home, prefix, shop, "s1") is None
        typed = "/rl lesson never push to origin/main in this repo"
        said = blocked(run_hook(home, f"{prefix}-prompt",
                                {"session_id": "s1", "cwd": str(shop), "prompt": typed}))
        assert said == 'rltray: saved the lesson ("never push to origin/main in this repo") ' \
                       "for ~/shop."  # fmt: skip
        assert service.ingest().commands == 1
        (row,) = service.lessons.listing()
        assert (row["scope"], row["folders"]) == ("project", [str(shop)])
        for each_prefix in ("claude", "codex"):  # another project, another agent: nothing
            assert start(home, each_prefix, blog, f"s2-{each_prefix}") is None
        assert "never push to origin/main" in (context(start(home, prefix, shop, "s3")) or "")
    long = "/rl lesson " + "word " * (lessonfiles.MAX_LESSON_CHARS // 4)
    said = blocked(run_hook(home, f"{prefix}-prompt", {"session_id": "s4", "cwd": str(shop),
                                                        "prompt": long}))  # fmt: skip
    assert said.startswith(f"rltray: a lesson is at most {lessonfiles.MAX_LESSON_CHARS} "
                           "characters and this one has ")  # not "saved", then refused
    assert commands(home) == []  # the first was ingested; the long one never spooled


@pytest.mark.parametrize("prefix", ["claude", "codex"])
def test_the_usage_names_the_lesson_commands(home: Path, prefix: str) -> None:
    reason = blocked(run_hook(home, f"{prefix}-prompt", {"session_id": "s", "prompt": "/rl"}))
    assert "lesson <text>" in reason and "lessons" in reason.split("lesson <text>")[1]


def test_without_lessonfiles_beside_it_the_hook_still_works_and_says_nothing(
    tmp_path: Path,
) -> None:
    """A hook program copied without lessonfiles.py (an older bundle's file list): no lessons,
    no note, one log line; prompts are still recorded and `/rl` still answers."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    source = Path(capture.__file__).resolve().parent
    for name in ("capture.py", "capture_core.py", "events_claude.py"):
        shutil.copy(source / name, hooks / name)
    home = tmp_path / "home"
    lessonfiles.write_all(str(home), "claude-code", {lessonfiles.GLOBAL: "- A."})
    argv = [sys.executable, "-I", "-S", str(hooks / "capture.py"), "--home", str(home)]

    def run(event: str, payload: dict[str, Any]) -> bytes:
        done = subprocess.run([*argv, event], input=json.dumps(payload).encode(),
                              capture_output=True)
        assert done.returncode == 0 and done.stderr == b""
        return done.stdout

    assert run("claude-start", {"session_id": "s", "cwd": "/w"}) == b""
    assert "lessonfiles.py is not beside the hook program" in hook_log(home)
    assert run("claude-prompt", {"session_id": "s", "prompt": "q"}) == b""
    assert any(n.endswith(".json") for n in os.listdir(home / "spool" / "sessions"))
    reason = json.loads(run("claude-prompt", {"session_id": "s", "prompt": "/rl lessons"}))
    assert reason["reason"].startswith("rltray: lessons are off")
