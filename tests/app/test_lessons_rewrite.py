"""A lesson's wording suggested by the user's local model (issue 24), against an HTTP server
that answers ``/api/generate`` as Ollama does (``tests/support/fake_generate.py``).

What is pinned: only the one group's comments and counts are sent, with ``stream: false``;
the suggestion is returned and never saved; each failure is one sentence.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from rltray.app.errors import ExitCode, UserError
from rltray.app.lessons import rewrite
from rltray.app.service import Service

from tests.support.fake_generate import FakeGenerate

SHOP = "/work/shop"
SUITE = "Ran the whole test suite when asked for one test"
AGAIN = "you ran the whole test suite again when I asked for one test"
SAID = "Run only the test I ask for, not the whole suite."


@pytest.fixture
def ollama(service: Service) -> Iterator[FakeGenerate]:
    with FakeGenerate({"tiny:latest": SAID, "other:7b": "Only the named test."}) as fake:
        service.set_setting("ollama.host", fake.url)
        service.set_setting("ollama.model", "tiny")
        yield fake


@pytest.fixture
def lessons(service: Service, make_turn) -> dict[str, str]:
    """A group said three ways (one rated good once), another group, a tag, the user's note."""

    def rate(comment: str | None, value: int = -1, tags: tuple[str, ...] = ()) -> int:
        turn = service.store.add_turn(make_turn(cwd=SHOP))[0]
        service.rate(turn, value, comment=comment, source="cli")
        if tags:
            service.set_tags(turn, tags)
        return turn

    suite = rate(SUITE)
    rate(AGAIN)
    rate(SUITE)
    rate(SUITE.lower(), value=1)
    other = rate("wrong blog theme")
    rate(None, tags=("verbose",))
    note = service.lessons.add("Use pytest -k", SHOP)
    keys = {r["words"]: r["id"] for r in service.lessons.listing()}
    assert f"c{suite}" in keys.values() and f"c{other}" in keys.values()
    return {"suite": f"c{suite}", "other": f"c{other}", "tag": keys["verbose"], "note": note}


def test_one_groups_comments_and_counts_go_to_the_model_and_nothing_is_saved(
    service: Service, ollama: FakeGenerate, lessons: dict[str, str]
) -> None:
    before = service.lessons.get(lessons["suite"])
    got = service.lessons.suggest(lessons["suite"])
    assert got == rewrite.Suggestion(key=lessons["suite"], text=SAID, model="tiny")
    (sent,) = ollama.requests
    assert sent["model"] == "tiny" and sent["stream"] is False
    assert sent["options"] == {"temperature": rewrite.TEMPERATURE} and rewrite.TEMPERATURE <= 0.3
    prompt = sent["prompt"]
    assert prompt.startswith(rewrite.INSTRUCTION)
    assert "one short sentence in the user's own voice" in prompt and "no new claims" in prompt
    assert "rated bad 3 times and good 1 times in all" in prompt
    assert f"- {json.dumps(SUITE)} (bad 2)" in prompt  # each distinct comment, with its counts
    assert f"- {json.dumps(AGAIN)} (bad 1)" in prompt
    assert f"- {json.dumps(SUITE.lower())} (good 1)" in prompt
    assert "wrong blog theme" not in prompt  # another group's words never leave
    assert service.lessons.get(lessons["suite"]) == before  # a suggestion, not a change


def test_a_model_named_for_the_call_wins_over_the_setting(
    service: Service, ollama: FakeGenerate, lessons: dict[str, str]
) -> None:
    got = service.lessons.suggest(lessons["suite"], model="other:7b")
    assert (got.text, got.model) == ("Only the named test.", "other:7b")
    assert ollama.requests[-1]["model"] == "other:7b"


def test_accepting_is_the_ordinary_edit(
    service: Service, ollama: FakeGenerate, lessons: dict[str, str]
) -> None:
    got = service.lessons.suggest(lessons["suite"])
    lesson = service.lessons.edit(got.key, got.text)
    assert lesson.words == SAID and lesson.edited


def test_only_a_group_with_comments_can_be_reworded(
    service: Service, ollama: FakeGenerate, lessons: dict[str, str]
) -> None:
    for key, words in ((lessons["note"], "your own note"), (lessons["tag"], "the tag verbose")):
        with pytest.raises(UserError, match=f"Lesson {key} is {words}, with no comments"):
            service.lessons.suggest(key)
    assert ollama.requests == []


def refusal(service: Service, key: str, **kw: Any) -> UserError:
    with pytest.raises(UserError) as caught:
        service.lessons.suggest(key, **kw)
    message = str(caught.value)
    assert message.endswith(".") and "\n" not in message, message
    return caught.value


def test_no_model_set_is_one_sentence(service: Service, lessons: dict[str, str]) -> None:
    error = refusal(service, lessons["suite"])
    assert str(error).startswith("No Ollama model to ask: set ollama.model")
    assert error.exit_code == ExitCode.NOT_AVAILABLE


def test_ollama_not_running_is_one_sentence(service: Service, lessons: dict[str, str]) -> None:
    service.set_setting("ollama.host", "http://127.0.0.1:9")
    error = refusal(service, lessons["suite"], model="tiny")
    assert str(error).startswith("Ollama is not reachable at http://127.0.0.1:9 (")
    assert "`ollama serve`" in str(error) and error.exit_code == ExitCode.NOT_AVAILABLE


def test_a_model_ollama_lacks_is_one_sentence(
    service: Service, ollama: FakeGenerate, lessons: dict[str, str]
) -> None:
    error = refusal(service, lessons["suite"], model="missing:1b")
    assert str(error) == (
        f"Ollama at {ollama.url} has no model 'missing:1b': `ollama pull missing:1b`, "
        "or name another."
    )


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ("", "tiny answered with nothing"),
        ("<think>they want one test</think>\n  ", "tiny answered with nothing"),
        ("x" * 201, "tiny answered with 201 characters, more than the 200 of one short"),
    ],
)
def test_an_empty_or_long_answer_is_refused(
    service: Service, ollama: FakeGenerate, lessons: dict[str, str], answer: str, words: str
) -> None:
    ollama.answers["tiny:latest"] = answer
    assert words in str(refusal(service, lessons["suite"]))


def test_the_answer_is_one_line_without_quotes_or_thinking(
    service: Service, ollama: FakeGenerate, lessons: dict[str, str]
) -> None:
    ollama.answers["tiny:latest"] = '<think>short</think>\n"Run only\n the test I ask for."\n'
    assert service.lessons.suggest(lessons["suite"]).text == "Run only the test I ask for."
    ollama.answers["tiny:latest"] = "x" * 200
    assert service.lessons.suggest(lessons["suite"]).text == "x" * 200


def test_a_slow_model_is_given_up_on_in_one_sentence(
    service: Service, lessons: dict[str, str]
) -> None:
    lesson = service.lessons.get(lessons["suite"])
    assert rewrite.TIMEOUT_S == 60.0
    with FakeGenerate({"tiny:latest": SAID}, delay_s=2.0) as slow:
        url = slow.url
        with pytest.raises(UserError) as caught:
            rewrite.suggest(lesson, url, "tiny", timeout_s=0.3)
    assert str(caught.value) == (
        f"Ollama at {url} did not answer within 0.3 seconds; try again, or a smaller model."
    )


def test_streaming_is_what_ollama_does_unless_told_not_to(lessons: dict[str, str]) -> None:
    """The fake streams like Ollama without ``"stream": false``: a client that forgot it
    would get JSON lines, which is why rewrite asks for the single object."""
    import urllib.request

    with FakeGenerate({"tiny:latest": SAID}) as fake:
        request = urllib.request.Request(
            fake.url + "/api/generate",
            data=json.dumps({"model": "tiny", "prompt": "hi"}).encode(),
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            lines = response.read().decode().splitlines()
    assert len(lines) > 1 and json.loads(lines[-1])["done"] is True
