"""`rltray lessons …` run in process against a real data folder."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from rltray.app.cli import main
from rltray.app.errors import ExitCode
from rltray.app.hooks import lessonfiles
from rltray.app.paths import Paths
from rltray.app.store import Store

SHOP, BLOG = "/work/shop", "/work/blog"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), env=dict(os.environ), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def rated(paths: Paths, make_turn) -> dict[str, str]:
    """Two ratings saying one thing in the shop, one in the blog; their lesson ids."""
    with Store.open(paths) as store:
        ids = [store.add_turn(make_turn(cwd=cwd))[0] for cwd in (SHOP, SHOP, BLOG)]
        store.rate(ids[0], -1, "cli", comment="Ran the whole test suite when asked for one test")
        again = "you ran the whole test suite again when I asked for one test"
        store.rate(ids[1], -1, "cli", comment=again)
        store.rate(ids[2], -1, "cli", comment="wrong blog theme")
    return {"suite": f"c{ids[0]}", "theme": f"c{ids[2]}"}


def listed(key: str) -> dict[str, object]:
    code, out, _ = cli("lessons", "list", "--json")
    assert code == ExitCode.OK
    return {row["id"]: row for row in json.loads(out)}[key]


def test_list_shows_each_lesson_with_its_counts(rated: dict[str, str]) -> None:
    code, out, err = cli("lessons", "list")
    assert code == ExitCode.OK and err == ""
    assert rated["suite"] in out and "Ran the whole test suite" in out and "shop" in out
    row = listed(rated["suite"])
    assert (row["kind"], row["bad"], row["good"], row["status"]) == ("avoid", 2, 0, "told")
    assert row["folders"] == [SHOP] and row["still_happening"] is None


def test_an_empty_list_says_where_lessons_come_from(rltray_home: Path) -> None:
    code, out, _ = cli("lessons", "list")
    assert code == ExitCode.OK and "No lessons yet" in out and "rltray lessons add" in out


def test_preview_prints_exactly_the_text_and_its_size_against_the_budget(
    rated: dict[str, str],
) -> None:
    code, out, err = cli("lessons", "preview", "--agent", "codex", "--project", SHOP)
    assert code == ExitCode.OK
    assert out == (
        "The user's own feedback on earlier answers in this project (from rltray):\n"
        f"- The user rated answers bad twice (last on {out.split('last on ')[1][:10]}) and "
        'commented: "Ran the whole test suite when asked for one test"\n'
    )
    assert f"1 lesson, {len(out) - 1} of 2,000 characters (the hook cuts at 4,000)." in err
    assert "Codex: lessons are off, nothing is sent" in err
    code, out, err = cli("lessons", "preview", "--project", "/somewhere/else")
    assert out == "" and "Nothing would be told to a session in /somewhere/else" in err


def test_on_says_what_goes_where_and_off_takes_it_back(rated: dict[str, str], paths: Paths) -> None:
    folder = lessonfiles.agent_folder(str(paths.home), "codex")
    code, out, _ = cli("lessons", "on", "--agent", "codex")
    assert code == ExitCode.OK
    assert "Lessons are on for Codex: when a Codex session starts, rltray's hook puts" in out
    assert f"{folder}{os.sep}global.md" in " ".join(out.split()) and "context" in out
    assert "2 such files written now" in out  # the shop's and the blog's
    assert "whole test suite" in (lessonfiles.read(str(paths.home), "codex", SHOP) or "")
    code, out, err = cli("lessons", "preview", "--agent", "codex", "--project", SHOP)
    key = lessonfiles.key(SHOP)
    assert f"its hook reads {folder}{os.sep}{key}.md and puts it into Codex's context" in err
    code, out, _ = cli("lessons", "off", "--agent", "codex")
    assert code == ExitCode.OK and "Lessons are off for Codex" in out
    assert not Path(folder).exists()


def test_add_edit_mute_pin_delete(rated: dict[str, str]) -> None:
    code, out, _ = cli("lessons", "add", "Use pytest -k for one test", "--project", BLOG, "--keep")
    assert (code, out.strip()) == (ExitCode.OK, f"Added lesson u1 for {BLOG}.")
    assert listed("u1")["kind"] == "keep" and listed("u1")["status"] == "pinned"
    suite = rated["suite"]
    code, out, _ = cli("lessons", "edit", suite, "Run only the test asked for")
    assert code == ExitCode.OK and "now told as Run only the test asked for" in out
    assert listed(suite)["words"] == "Run only the test asked for"
    code, out, _ = cli("lessons", "edit", suite, "")
    assert "back to your own words" in out and listed(suite)["words"].startswith("Ran the")
    steps = (("mute", "muted", "muted"), ("unmute", "unmuted", "told"),
             ("pin", "pinned", "pinned"), ("unpin", "unpinned", "told"))  # fmt: skip
    for verb, said, status in steps:
        code, out, _ = cli("lessons", verb, suite)
        assert (code, out.strip()) == (ExitCode.OK, f"Lesson {suite} {said}.")
        assert listed(suite)["status"] == status
    code, out, _ = cli("lessons", "delete", suite)
    assert out.strip() == f"Lesson {suite} deleted."
    code, out, _ = cli("lessons", "list", "--json")
    assert suite not in [row["id"] for row in json.loads(out)]


def test_resolve_and_scope(rated: dict[str, str], paths: Paths, make_turn) -> None:
    with Store.open(paths) as store:
        good = store.add_turn(make_turn(cwd=SHOP))[0]
        store.rate(good, 1, "cli", comment="ran the whole test suite")
        store.rate(store.add_turn(make_turn(cwd=SHOP))[0], 1, "cli", comment="whole test suite")
    suite = rated["suite"]
    code, out, _ = cli("lessons", "list")
    assert f"{suite} is not told: rated good and bad equally often (2 each)" in " ".join(
        out.split()
    )
    code, out, _ = cli("lessons", "resolve", suite, "keep")
    assert code == ExitCode.OK and f"Lesson {suite} is told as keep from now on (told)." in out
    code, out, _ = cli("lessons", "scope", suite, "global")
    assert out.strip() == f"Lesson {suite} is told in every project."
    assert listed(suite)["scope"] == "global"


def test_an_unknown_lesson_or_agent_is_one_sentence(rated: dict[str, str], capsys) -> None:
    code, out, err = cli("lessons", "mute", "c999")
    assert code == ExitCode.USAGE and out == ""
    assert err.strip() == (
        "rltray: There is no lesson 'c999'; `rltray lessons list` shows their ids."
    )
    code, _, _ = cli("lessons", "on", "--agent", "vim")
    assert code == ExitCode.USAGE and "invalid choice: 'vim'" in capsys.readouterr().err


# -- suggest: the user's local model rewords a lesson, and nothing changes until they say yes --


class Terminal(io.StringIO):
    """Standard input a person types into: the CLI asks only when it is a terminal."""

    def isatty(self) -> bool:
        return True


def suggest(*argv: str, stdin: io.StringIO | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["lessons", "suggest", *argv], env=dict(os.environ), stdout=out, stderr=err,
                stdin=stdin or io.StringIO(""))  # fmt: skip
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def ollama(rated: dict[str, str]):
    from tests.support.fake_generate import FakeGenerate

    with FakeGenerate({"tiny:latest": "Run only the test I name.", "big:7b": "One test."}) as fake:
        assert cli("config", "set", "ollama.host", fake.url)[0] == ExitCode.OK
        assert cli("config", "set", "ollama.model", "tiny")[0] == ExitCode.OK
        yield fake


def test_suggest_shows_the_suggestion_and_a_yes_uses_it(rated: dict[str, str], ollama) -> None:
    suite = rated["suite"]
    code, out, err = suggest(suite, stdin=Terminal("y\n"))
    assert code == ExitCode.OK and f"reword lesson {suite}" in err
    assert f"Lesson {suite} now:   Ran the whole test suite when asked for one test" in out
    assert "Suggested by tiny: Run only the test I name." in out
    assert "Use it? [y/N] " in out and f"Lesson {suite} now told as Run only the test I name" in out
    assert listed(suite)["words"] == "Run only the test I name."
    (sent,) = ollama.requests
    assert sent["stream"] is False and "wrong blog theme" not in sent["prompt"]


@pytest.mark.parametrize("typed", ["\n", "n\n", "sure\n", ""])
def test_suggest_changes_nothing_unless_the_answer_is_yes(
    rated: dict[str, str], ollama, typed: str
) -> None:
    suite = rated["suite"]
    code, out, _ = suggest(suite, stdin=Terminal(typed))
    assert code == ExitCode.OK and "Use it? [y/N] " in out
    assert f"Lesson {suite} keeps its words (`--yes` takes a suggestion)." in out
    assert listed(suite)["words"].startswith("Ran the whole") and not listed(suite)["edited"]


def test_suggest_from_a_pipe_never_asks_and_never_saves(rated: dict[str, str], ollama) -> None:
    suite = rated["suite"]
    code, out, _ = suggest(suite, stdin=io.StringIO("y\n"))  # not a terminal: "y" is not read
    assert code == ExitCode.OK and "Use it?" not in out and "keeps its words" in out
    assert not listed(suite)["edited"]


def test_suggest_yes_and_model_take_it_without_asking(rated: dict[str, str], ollama) -> None:
    suite = rated["suite"]
    code, out, err = suggest(suite, "--model", "big:7b", "--yes")
    assert code == ExitCode.OK and "Asking big:7b" in err and "Use it?" not in out
    assert "Suggested by big:7b: One test." in out and listed(suite)["words"] == "One test."
    assert ollama.requests[-1]["model"] == "big:7b"


def test_suggest_without_ollama_is_one_sentence(rated: dict[str, str]) -> None:
    code, out, err = suggest(rated["suite"], "--yes")
    assert code == ExitCode.NOT_AVAILABLE and "Suggested" not in out
    assert err.strip().splitlines()[-1].startswith("rltray: No Ollama model to ask:")
    assert cli("config", "set", "ollama.host", "http://127.0.0.1:9")[0] == ExitCode.OK
    code, _, err = suggest(rated["suite"], "--model", "tiny")
    assert code == ExitCode.NOT_AVAILABLE
    assert "rltray: Ollama is not reachable at http://127.0.0.1:9 (" in err
    assert not listed(rated["suite"])["edited"]
