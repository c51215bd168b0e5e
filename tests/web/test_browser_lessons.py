"""The Lessons page and the wizard's lessons opt-in in Chromium (issue 24): keys, inline edit,
every action, the turns behind a lesson, adding, the preview's budget bar and the switches.

``fill_lessons`` is also what tests/web/test_screenshots.py shows on the page.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from rltray.app.hooks import lessonfiles

from tests.web.test_browser import SHOTS, server  # noqa: F401 (a fixture)
from tests.web.webtesting import chromium_page, missing_chromium

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(missing_chromium() is not None, reason=f"needs {missing_chromium()}"),
]
SHOP, BLOG = "/work/shop", "/work/blog"
SUITE = "Ran the whole test suite when asked for one test"


def fill_lessons(service: Any, add_turns: Any) -> dict[str, str]:
    """Lessons of every kind: told, contradicted, suggested global, retired, the user's own;
    lessons on for Codex, which was rated once since. Returns their ids by name."""
    now = datetime.now(timezone.utc)

    def rate(comment: str, value: int = -1, cwd: str = SHOP, days: int = 1) -> str:
        (turn,) = add_turns(1, cwd=cwd, prompt=f"Please look at {cwd}: {comment[:20]}")
        service.store.rate(turn, value, "cli", comment=comment, at=now - timedelta(days=days))
        return f"c{turn}"

    keys = {"suite": rate(SUITE, days=9)}
    rate("you ran the whole test suite again", days=6)
    keys["mixed"] = rate("added type hints to every function", days=5)
    rate("added type hints to every function", value=1, days=3)
    keys["wall"] = rate("answered with a wall of text", days=4)
    rate("answered with a wall of text again", cwd=BLOG, days=2)
    keys["tabs"] = rate("used tabs for indentation", cwd=BLOG, days=80)
    keys["note"] = service.lessons.add("Use pytest -k to run one test", SHOP, kind="keep")
    service.lessons.switch("codex", True)
    (turn,) = add_turns(1, cwd=SHOP, agent="codex")
    service.rate(turn, -1, comment="ran the whole test suite again", source="cli")
    return keys


def card(page: Any, key: str) -> str:
    return f".lesson[data-key='{key}']"


def clean(problems: Any) -> None:
    assert problems.items == []


def picture(page: Any, name: str) -> None:
    """The whole page from the top (scrolled, the sticky header lands mid-picture)."""
    page.evaluate("scrollTo(0, 0)")
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_the_lessons_page_in_chromium(server, service, add_turns) -> None:  # noqa: F811
    SHOTS.mkdir(exist_ok=True)
    keys = fill_lessons(service, add_turns)
    home = str(service.paths.home)
    with chromium_page((800, 600)) as (page, problems):
        page.goto(server.launch_url("lessons"))
        page.wait_for_selector("#lessons")
        page.wait_for_selector("#budget-words >> text=of 2,000 characters")
        assert page.title() == "Lessons · rltray"
        picture(page, "lessons-800x600")

        # keys: j moves, e edits; Enter saves, Esc cancels, empty goes back to the comment
        suite = card(page, keys["suite"])
        page.keyboard.press("j")
        assert page.get_attribute(".lesson.current", "data-key") == keys["suite"]
        page.keyboard.press("e")
        page.fill(f"{suite} .words input", "Run only the test I name")
        page.keyboard.press("Enter")
        page.wait_for_selector(f"{suite} .words >> text=Run only the test I name")
        assert '"Run only the test I name"' in lessonfiles.read(home, "codex", SHOP)
        page.keyboard.press("e")
        page.fill(f"{suite} .words input", "Something else")
        page.keyboard.press("Escape")
        page.wait_for_selector(f"{suite} .words:not(:has(input))")
        assert page.inner_text(f"{suite} .words") == "Run only the test I name"
        page.click(f"{suite} .words")
        page.fill(f"{suite} .words input", "")
        page.keyboard.press("Enter")
        page.wait_for_selector(f"{suite} .words >> text=test suite")
        assert service.lessons.get(keys["suite"]).edited is False

        # m mutes and p pins the focused lesson; the buttons say the way back
        page.keyboard.press("m")
        page.wait_for_selector(f"{suite} .badge.state >> text=muted")
        assert page.inner_text(f"{suite} [data-act='mute']") == "Unmute"
        assert "test suite" not in (lessonfiles.read(home, "codex", SHOP) or "")
        page.click(f"{suite} [data-act='mute']")
        page.wait_for_selector(f"{suite} .badge.state >> text=active")
        page.keyboard.press("p")
        page.wait_for_selector(f"{suite} .badge.state >> text=pinned")
        assert service.lessons.get(keys["suite"]).pinned

        # a contradiction is resolved, a suggestion accepted, the turns behind one listed
        mixed, wall = card(page, keys["mixed"]), card(page, keys["wall"])
        page.click(f"{mixed} [data-act='resolve'][data-kind='keep']")
        page.wait_for_selector(f"{mixed} .badge.state >> text=active")
        assert service.lessons.get(keys["mixed"]).polarity == 1
        page.click(f"{wall} .suggest button")
        page.wait_for_selector(f"{wall} .where >> text=every project")
        assert "wall of text" in lessonfiles.read(home, "codex", "/anywhere")
        page.click(f"{wall} details summary")
        again = "answered with a wall of text again"
        page.wait_for_selector(f"{wall} .turns-behind li >> text={again}")
        assert page.locator(f"{wall} .turns-behind li").count() == 2
        picture(page, "lessons-800x600-actions")

        # delete asks first (the dialog is accepted), then the card is gone
        page.click(f"{card(page, keys['tabs'])} [data-act='delete']")
        page.wait_for_selector(card(page, keys["tabs"]), state="detached")
        assert keys["tabs"] not in [r["id"] for r in service.lessons.listing()]

        # adding one for every project, then the preview of a folder with the budget bar
        page.fill("#add-text", "Answer in English")
        page.click("#add-lesson button[type=submit]")
        page.wait_for_selector(".lesson .words >> text=Answer in English")
        page.select_option("#preview-agent", "codex")
        page.select_option("#preview-folder", SHOP)
        expected = lessonfiles.read(home, "codex", SHOP)
        page.wait_for_function(
            "text => document.getElementById('preview-text').textContent === text", arg=expected
        )
        words = page.inner_text("#budget-words")
        assert words.startswith(f"{len(expected):,} of 2,000 characters"), words
        width = page.evaluate("parseFloat(document.querySelector('.budget-bar .fill').style.width)")
        assert width == pytest.approx(100 * len(expected) / 4000)
        assert "goes into Codex's context at session start" in page.inner_text("#preview-where")

        # the switch: Claude Code on, said beside it, the preview follows
        page.select_option("#preview-agent", "claude-code")
        page.wait_for_selector("#preview-where >> text=Claude Code's lessons are off")
        page.check("[data-lessons-agent='claude-code']")
        line = ".lesson-switch[data-agent='claude-code'] [data-lessons-state]"
        page.wait_for_selector(f"{line} >> text=lesson files written")
        page.wait_for_selector("#preview-where >> text=Claude Code's lessons are on")
        assert service.settings().lessons.claude_code is True
        clean(problems)


def test_an_added_lessons_words_cannot_be_emptied_in_chromium(server, service) -> None:  # noqa: F811
    key = service.lessons.add("Use pytest -k to run one test", SHOP)
    with chromium_page((800, 600)) as (page, problems):
        page.goto(server.launch_url("lessons"))
        page.click(f"{card(page, key)} [data-act='edit']")
        page.fill(f"{card(page, key)} .words input", "")
        page.keyboard.press("Enter")
        page.wait_for_selector("#flash.error >> text=give it new words, or delete it")
        assert page.locator(f"{card(page, key)} .words input").count() == 1  # still editing
        url = f"{server.base_url}/api/lessons/{key}/words"
        # the refusal, and chromium's console line of it: nothing else went wrong
        assert sorted(problems.items) == [
            f"HTTP 400: {url}",
            "console error: Failed to load resource: the server responded with a status of "
            f"400 (BAD REQUEST) at {url}",
        ]


def test_the_wizard_turns_lessons_on_per_agent(server, service) -> None:  # noqa: F811
    with chromium_page((800, 600)) as (page, problems):
        page.goto(server.launch_url("setup"))
        page.wait_for_selector("#wizard-lessons")
        assert not page.is_checked("[data-lessons-agent='codex']")
        assert "into Codex's context at session start" in page.inner_text("#wizard-lessons")
        picture(page, "wizard-1-agents-lessons-800x600")
        page.check("[data-lessons-agent='codex']")
        line = ".lesson-switch[data-agent='codex'] [data-lessons-state]"
        page.wait_for_selector(f"{line} >> text=On:")
        assert service.settings().lessons.codex is True
        assert service.settings().lessons.claude_code is False
        page.uncheck("[data-lessons-agent='codex']")
        page.wait_for_selector(f"{line} >> text=Off:")
        assert service.settings().lessons.codex is False
        clean(problems)


def test_suggest_wording_then_discard_or_accept_in_chromium(server, service, add_turns) -> None:  # noqa: F811
    """The user's local model (a fake Ollama) offers words; Discard keeps the lesson as it
    was, Accept saves them through the words route and the agent is told them."""
    from tests.support.fake_generate import FakeGenerate

    keys = fill_lessons(service, add_turns)
    said = "Run only the test I name, not the whole suite."
    home = str(service.paths.home)
    with FakeGenerate({"tiny:latest": said}) as ollama:
        service.set_setting("ollama.host", ollama.url)
        service.set_setting("ollama.model", "tiny")
        with chromium_page((800, 600)) as (page, problems):
            suite = card(page, keys["suite"])
            page.goto(server.launch_url("lessons"))
            assert page.locator(f"{card(page, keys['note'])} [data-act='suggest']").count() == 0
            page.click(f"{suite} [data-act='suggest']")
            page.wait_for_selector(f"{suite} .suggestion q >> text={said}")
            assert page.inner_text(f"{suite} .suggestion").startswith("tiny suggests: ")
            picture(page, "lessons-800x600-suggested")
            assert service.lessons.get(keys["suite"]).edited is False  # shown, not saved
            page.click(f"{suite} .suggestion [data-suggestion='discard']")
            page.wait_for_selector(f"{suite} .suggestion", state="hidden")
            assert service.lessons.get(keys["suite"]).edited is False
            page.click(f"{suite} [data-act='suggest']")
            page.click(f"{suite} .suggestion [data-suggestion='accept']")
            page.wait_for_selector(f"{suite} .words >> text={said}")
            page.wait_for_selector("#flash >> text=reworded as tiny suggested")
            assert service.lessons.get(keys["suite"]).words == said
            assert '"Run only the test I name, not the whole suite' in lessonfiles.read(
                home, "codex", SHOP
            )
            assert [r["model"] for r in ollama.requests] == ["tiny", "tiny"]
            clean(problems)


def test_a_turn_behind_a_lesson_opens_in_the_ratings_browser(server, service, add_turns) -> None:  # noqa: F811
    keys = fill_lessons(service, add_turns)
    with chromium_page((1280, 800)) as (page, problems):
        page.goto(server.launch_url("lessons"))
        wall = card(page, keys["wall"])
        page.click(f"{wall} details summary")
        link = page.locator(f"{wall} .turns-behind li a").first
        link.wait_for()
        turn = link.inner_text().removeprefix("turn ")
        link.click()
        page.wait_for_url(f"**/ratings?turn={turn}")
        page.wait_for_selector(f"#detail:not([hidden])[data-id='{turn}']")
        assert page.locator("#turns tbody tr").count() == 1  # that turn only, said so
        assert page.inner_text("#filters").strip().endswith(f"turn {turn} only")
        assert "wall of text" in page.input_value("#detail textarea")  # its comment
        picture(page, "ratings-one-turn-from-a-lesson")
        clean(problems)
