"""Graded ratings in the ratings browser, in Chromium: keys 1-5 (issue 22 item 12)."""

from __future__ import annotations

import pytest

from tests.web.test_browser import page, server, shot  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow


def test_keys_1_to_5_grade_the_focused_answer(page, server, service, add_turns) -> None:  # noqa: F811
    ids = add_turns(2)  # newest first on the page
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server.launch_url("ratings"))
    page.wait_for_selector("#turns")
    page.keyboard.press("j")
    page.keyboard.press("4")
    page.wait_for_selector(f"tr[data-id='{ids[1]}'] .badge.good >> text=4/5")
    page.keyboard.press("j")
    page.keyboard.press("3")  # the middle of the scale: refused, said, nothing changes
    page.wait_for_selector("#flash >> text=3 is the middle of the scale")
    page.keyboard.press("1")
    page.wait_for_selector(f"tr[data-id='{ids[0]}'] .badge.bad >> text=1/5")
    shot(page, "ratings-graded", "Ratings")
    assert errors == []
    scores = [service.store.active_rating(i).score for i in ids]
    assert scores == [1, 4]
