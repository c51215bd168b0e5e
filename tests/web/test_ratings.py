"""Ratings browser: filters, the rendered turn, rate / re-rate / unrate / comment / tag, bulk
actions, real deletion and the JSONL export."""

from __future__ import annotations

import html
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.test_browser import SHOTS, server  # noqa: F401 (a fixture)
from tests.web.test_screenshots import take
from tests.web.webtesting import chromium_page, missing_chromium, post_json

needs_chromium = pytest.mark.skipif(
    missing_chromium() is not None, reason=f"needs {missing_chromium()}"
)


@pytest.fixture
def tab(server) -> Iterator[Any]:  # noqa: F811
    """A chromium tab at 800x600 (confirm() answered yes); it must end with no uncaught error."""
    with chromium_page((800, 600)) as (page, problems):
        yield page
        assert [p for p in problems.items if p.startswith("page error")] == []


def test_filters_and_pages(client, add_turns, service) -> None:
    a = add_turns(3, agent="claude-code", cwd="/work/alpha")
    b = add_turns(2, agent="codex", cwd="/work/beta", response="uses a global variable")
    service.store.rate(a[0], 1, "cli")
    service.store.rate(b[0], -1, "cli")
    page = client.get("/ratings")
    assert page.status_code == 200 and b"<title>Ratings \xc2\xb7 rltray</title>" in page.data
    assert b"5 turns" in page.data and page.data.count(b"<tr data-id=") == 5

    def ids(query: str) -> list[int]:
        return [t["id"] for t in client.get("/api/turns?" + query).get_json()["turns"]]

    assert ids("agent=codex") == b[::-1]
    assert ids("project=/work/alpha") == a[::-1]
    assert ids("rating=good") == [a[0]] and ids("rating=bad") == [b[0]]
    assert ids("rating=unrated") == [b[1], a[2], a[1]]
    assert ids("q=GLOBAL+variable") == b[::-1]
    assert ids("since=2030-01-01") == [] and len(ids("until=2030-01-01")) == 5
    filtered = client.get("/ratings?agent=codex&rating=bad")
    assert b"1 turn " in filtered.data and f'data-id="{b[0]}"'.encode() in filtered.data


def test_the_turn_is_rendered_safely_with_code_highlighted(client, add_turns) -> None:
    (turn_id,) = add_turns(
        1,
        prompt="Why does <script>alert(1)</script> run?",
        response="Use this:\n\n```python\ndef f():\n    return 1\n```\n[x](javascript:alert(1))",
    )
    detail = client.get(f"/ratings/turn/{turn_id}").data.decode()
    assert "<script>alert(1)</script>" not in detail and "&lt;script&gt;" in detail
    assert 'class="hl"' in detail and '<span class="k">def</span>' in detail
    assert 'href="javascript' not in detail
    assert "earlier 1" in detail  # the context
    row = client.get("/ratings").data.decode()  # the list's one-line preview, still escaped
    assert "Use this: def f(): return 1 [x](javascript:alert(1))" in row and "```" not in row
    assert "Why does &lt;script&gt;alert(1)&lt;/script&gt; run?" in row


def test_only_web_and_mail_links_in_an_answer_are_links(client, add_turns) -> None:
    """Regression (review2-sec link_schemes): a link of any scheme (smb:, vscode:, an
    app's own handler) became a ``target=_blank`` link, which the window hands to the
    system and so to whatever program claims the scheme. Only http, https and mailto
    links are made; the others (and relative ones) stay the text they were."""
    others = ["smb://attacker.example/share", "vscode://vscode.git/clone?url=https://a.example/r",
              "ssh://attacker.example", "x-my-app:payload", "file:///etc/passwd", "notes.md"]
    lines = [f"[docs {i}]({url})" for i, url in enumerate(others)]
    lines += ["<smb://attacker.example/auto>", "[ref][r]", "", "[r]: vscode://x"]
    good = "[web](https://example.com/a) [mail](mailto:me@example.com) <HTTP://EXAMPLE.COM/b>"
    (turn_id,) = add_turns(1, response=good + "\n\n" + "\n\n".join(lines))
    detail = client.get(f"/ratings/turn/{turn_id}").data.decode()
    hrefs = sorted(h.split('"')[0] for h in detail.split(' href="')[1:])
    made = [h for h in hrefs if not h.startswith("/")]  # the page's own links aside
    assert made == ["HTTP://EXAMPLE.COM/b", "https://example.com/a", "mailto:me@example.com"]
    for i, url in enumerate(others):
        assert f"[docs {i}]({url})" in detail.replace("&amp;", "&"), url
    assert "&lt;smb://attacker.example/auto&gt;" in detail
    assert detail.count('target="_blank" rel="noopener noreferrer"') >= 3


def test_one_turn_by_its_id_with_its_detail_open(client, add_turns) -> None:
    first, second = add_turns(2)
    page = client.get(f"/ratings?turn={second}").data.decode()
    assert f'data-open="{second}"' in page and f'data-id="{first}"' not in page
    assert f"turn {second} only" in page
    assert 'data-open="' not in client.get("/ratings?turn=999").data.decode()  # none to open
    assert client.get("/ratings?turn=x").status_code == 400


def test_rate_rerate_unrate_comment_and_tag(client, add_turns, service) -> None:
    (turn_id,) = add_turns(1)
    url = f"/api/turns/{turn_id}"
    good = post_json(client, url + "/rating", {"value": 1}).get_json()
    assert good["rating"]["value"] == 1
    commented = post_json(client, url + "/comment", {"comment": "clear and short"}).get_json()
    assert commented["rating"] == {**good["rating"], "comment": "clear and short"}
    bad = post_json(client, url + "/rating", {"value": -1}).get_json()
    assert bad["rating"]["value"] == -1 and bad["rating"]["comment"] == "clear and short"
    assert post_json(client, url + "/rating", {"value": 0}).get_json()["rating"] is None
    history = service.store.rating_history(turn_id)
    assert [r.value for r in history] == [1, -1] and all(r.source == "web" for r in history)
    assert all(not r.active for r in history)
    tagged = post_json(client, url + "/tags", {"tags": ["wrong", "too slow"]}).get_json()
    assert tagged["tags"] == ["too slow", "wrong"]
    assert {t["name"] for t in client.get("/api/tags").get_json()} >= {"too slow", "wrong"}
    assert post_json(client, url + "/tags", {"tags": []}).get_json()["tags"] == []


def test_bulk_actions_on_a_selection(client, add_turns, service) -> None:
    ids = add_turns(4)
    sel = ids[:3]
    assert post_json(client, "/api/turns/bulk", {"ids": sel, "action": "good"}).get_json() == {
        "action": "good", "changed": 3}  # fmt: skip
    again = post_json(client, "/api/turns/bulk", {"ids": sel, "action": "good"}).get_json()
    assert again["changed"] == 0  # already good: no new history rows
    tag = {"ids": sel, "action": "tag", "tag": "verbose"}
    assert post_json(client, "/api/turns/bulk", tag).get_json()["changed"] == 3
    post_json(client, "/api/turns/bulk", {"ids": [ids[0]], "action": "untag", "tag": "verbose"})
    assert service.store.tags_of(ids) == {ids[1]: ["verbose"], ids[2]: ["verbose"]}
    post_json(client, "/api/turns/bulk", {"ids": sel[:2], "action": "unrate"})
    assert [service.store.get_turn(i).rating is None for i in ids] == [True, True, False, True]
    explode = post_json(client, "/api/turns/bulk", {"ids": sel, "action": "explode"})
    assert explode.status_code == 400


def test_delete_is_real_and_excluded_from_export(client, add_turns, service) -> None:
    ids = add_turns(3)
    for i in ids:
        service.store.rate(i, 1, "cli")
    post_json(client, f"/api/turns/{ids[1]}/tags", {"tags": ["wrong"]})
    done = post_json(client, "/api/turns/bulk", {"ids": [ids[1]], "action": "delete"})
    assert done.get_json() == {"action": "delete", "changed": 1}
    assert service.store.get_turn(ids[1]) is None
    assert client.get(f"/api/turns/{ids[1]}").status_code == 400
    assert f'data-id="{ids[1]}"'.encode() not in client.get("/ratings").data
    assert {e["turn_id"] for e in service.store.training_examples()} == {ids[0], ids[2]}
    export = client.get("/ratings/export.jsonl")
    assert export.status_code == 200 and export.mimetype == "application/x-ndjson"
    assert "attachment" in export.headers["Content-Disposition"]
    rows = [json.loads(line) for line in export.data.decode().splitlines()]
    assert [r["id"] for r in rows] == [ids[0], ids[2]]
    assert rows[0]["rating"]["value"] == 1 and rows[0]["tags"] == []
    picked = client.get(f"/ratings/export.jsonl?id={ids[2]}").data.decode().splitlines()
    assert [json.loads(line)["id"] for line in picked] == [ids[2]]


def test_tag_list_is_editable(client) -> None:
    assert post_json(client, "/api/tags", {"name": "  needs  tests "}).get_json() == {
        "name": "needs tests"}  # fmt: skip
    assert post_json(client, "/api/tags/delete", {"name": "needs tests"}).status_code == 200
    gone = post_json(client, "/api/tags/delete", {"name": "needs tests"})
    assert gone.status_code == 400 and "no tag" in gone.get_json()["error"]["message"]


def test_a_score_from_1_to_5_through_the_api(client, add_turns, service) -> None:
    """Issue 22 item 12: graded ratings; a 3 is refused with the reason, nothing is lost."""
    (turn_id,) = add_turns(1)
    rated = post_json(client, f"/api/turns/{turn_id}/rating", {"score": 2})
    assert rated.status_code == 200
    assert rated.get_json()["rating"]["value"] == -1 and rated.get_json()["rating"]["score"] == 2
    neutral = post_json(client, f"/api/turns/{turn_id}/rating", {"score": 3})
    assert neutral.status_code == 400
    assert "3 is the middle of the scale" in neutral.get_json()["error"]["message"]
    clash = post_json(client, f"/api/turns/{turn_id}/rating", {"score": 4, "value": -1})
    assert clash.get_json()["error"]["message"] == "A score of 4 is good, not -1."
    empty = post_json(client, f"/api/turns/{turn_id}/rating", {})
    assert empty.status_code == 400
    rating = service.store.active_rating(turn_id)
    assert rating is not None and (rating.value, rating.score) == (-1, 2)
    page = client.get("/ratings").get_data(as_text=True)
    assert ">2/5</span>" in page


# -- review2-web: paging, dates, filters, two windows (the server) ---------------------------


def _shown(page_html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-id="(\d+)"', page_html)]


def _link(page_html: str, text: str) -> str | None:
    found = re.search(rf'<a href="([^"]+)"[^>]*>{text}</a>', page_html)
    return html.unescape(found.group(1)) if found else None


def test_older_continues_after_the_last_turn_shown_as_the_list_shrinks(client, add_turns,
                                                                        service) -> None:
    """Regression (review2-web t1_pager_skip): "older →" linked to page 2 of a filtered list
    that rating page 1 had just shrunk, so triage of "unrated" skipped 50 turns of 120.
    It now links to the turns older than the last one shown, filters kept."""
    ids = add_turns(120)
    seen: list[int] = []
    url: str | None = "/ratings?rating=unrated"
    while url:
        page_html = client.get(url).get_data(as_text=True)
        shown = _shown(page_html)
        assert shown, url
        seen += shown
        for turn in shown:  # triage: every turn on the page is rated before going on
            service.store.rate(turn, 1, "cli")
        url = _link(page_html, "older →")
        assert url is None or "rating=unrated" in url
    assert seen == ids[::-1]


def test_newer_goes_back_and_a_page_says_where_it_is(client, add_turns) -> None:
    ids = add_turns(120)[::-1]  # newest first, as shown
    first = client.get("/ratings").get_data(as_text=True)
    assert _shown(first) == ids[:50] and "120 turns · 1–50 shown" in first
    assert _link(first, "← newer") is None
    second = client.get(_link(first, "older →")).get_data(as_text=True)
    assert _shown(second) == ids[50:100] and "51–100 shown" in second
    assert _shown(client.get(_link(second, "← newer")).get_data(as_text=True)) == ids[:50]
    third = client.get(_link(second, "older →")).get_data(as_text=True)
    assert _shown(third) == ids[100:] and _link(third, "older →") is None
    back = client.get(_link(third, "← newer")).get_data(as_text=True)
    assert _shown(back) == ids[50:100]
    past = client.get(_link(third, "older →") or f"/ratings?before={_place(client, ids[-1])}")
    assert "No more turns this way" in past.get_data(as_text=True)


def _place(client: Any, turn: int) -> str:
    return f"{client.get(f'/api/turns/{turn}').get_json()['captured_at']},{turn}"


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("before=yesterday", "before should be a row's place: the time it was captured, a comma"),
        ("after=2025-03-01,0", "after should be a row's place"),
        ("after=2025-03-01,-3", "after should be a row's place"),
        ("before=a,1&after=a,2", "Give before or after (where the page starts), not both."),
        ("page=2&before=a,1", "Give page or before / after (where the page starts), not both."),
    ],
)
def test_a_bad_place_in_the_list_is_one_sentence(client, query: str, says: str) -> None:
    answer = client.get(f"/ratings?{query}")
    assert answer.status_code == 400 and says in html.unescape(answer.get_data(as_text=True))


@pytest.fixture
def berlin() -> Iterator[None]:
    """The process's local time zone is Europe/Berlin for the test (clocks change twice)."""
    if not Path("/usr/share/zoneinfo/Europe/Berlin").exists():
        pytest.skip("needs the time zone database (apt-get install tzdata)")
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_a_day_filter_ends_at_the_next_local_midnight(berlin, client, add_turns) -> None:
    """Regression (review2-web t8_dst_until): "to" ended a local day 24 hours after it began,
    so on the 25-hour day clocks go back a turn at 23:30 was in no day, and on the 23-hour
    day a turn at 00:30 the next morning was in two."""
    autumn, spring = add_turns(1, captured_at="2025-10-26T22:30:00Z")[0], add_turns(
        1, captured_at="2025-03-30T22:30:00Z")[0]  # 23:30 on 26 October; 00:30 on 31 March

    def on(day: str) -> list[int]:
        answer = client.get(f"/api/turns?since={day}&until={day}").get_json()
        return [t["id"] for t in answer["turns"]]

    assert on("2025-10-26") == [autumn] and on("2025-10-27") == []
    assert on("2025-03-30") == [] and on("2025-03-31") == [spring]


def test_tag_filters_are_capped_in_a_sentence_and_a_nul_is_refused(client, add_turns,
                                                                   service) -> None:
    """Regression (review2-web t9_filters): 999 tags answered 500 (SQLite's expression depth),
    and a NUL in the search cut SQLite's pattern at it, so it matched every turn."""
    ids = add_turns(2)
    service.set_tags(ids[0], ["wrong"])

    def tags(names: list[str]) -> str:
        return "&".join(f"tag={n}" for n in names)

    listed = client.get("/api/turns?" + tags(["wrong", "WRONG", "wrong"])).get_json()
    assert [t["id"] for t in listed["turns"]] == [ids[0]]
    fifty = ["wrong"] + [f"t{i}" for i in range(49)]
    assert client.get("/api/turns?" + tags(fifty)).get_json()["total"] == 0
    for url in ("/api/turns?", "/ratings?q=x&rating=good&"):
        many = client.get(url + tags([f"t{i}" for i in range(1000)]))
        assert many.status_code == 400, url
        assert "tag should name at most 50 tags, not 1000." in many.get_data(as_text=True)
    nul = client.get("/api/turns?q=%00")
    assert nul.status_code == 400
    assert nul.get_json()["error"]["message"] == "q should not contain a NUL character."


def test_one_tag_at_a_time_and_a_comment_changed_meanwhile_is_kept(client, add_turns,
                                                                  service) -> None:
    """Regression (review2-web t6_two_tabs): the page sent a turn's whole tag list and its
    comment as the drawer had them, so a drawer drawn before another window's change took
    that change away. A tick adds or removes one tag; a comment says what it replaces."""
    (turn,) = add_turns(1)
    service.rate(turn, -1, source="web", comment="first words")
    service.set_tags(turn, ["wrong"])
    url = f"/api/turns/{turn}"
    assert post_json(client, url + "/tag", {"name": "verbose", "on": True}).get_json()["tags"] == [
        "verbose", "wrong"]  # fmt: skip
    assert post_json(client, url + "/tag", {"name": "wrong", "on": False}).get_json()["tags"] == [
        "verbose"]  # fmt: skip
    mine = post_json(client, url + "/comment", {"comment": "mine", "was": "first words"})
    assert mine.status_code == 200 and mine.get_json()["rating"]["comment"] == "mine"
    stale = post_json(client, url + "/comment", {"comment": "theirs", "was": "first words"})
    assert stale.status_code == 409
    assert stale.get_json() == {"error": {"code": "comment_changed", "message": (
        f"The comment of turn {turn} was changed in another window meanwhile; it now reads "
        "“mine”. Yours is not saved: save it again to replace that one.")}}  # fmt: skip
    assert service.store.active_rating(turn).comment == "mine"
    unchecked = post_json(client, url + "/comment", {"comment": "plain"})  # no ``was``: as before
    assert unchecked.get_json()["rating"]["comment"] == "plain"


# -- review2-web: the page in chromium --------------------------------------------------------


def _eventually(tab: Any, check: Callable[[], bool], seconds: float = 10) -> None:
    """Wait for ``check``, letting the tab's events (its routes) run meanwhile."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        tab.wait_for_timeout(50)


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("action", ["bad", "delete"])
def test_after_back_no_box_is_ticked_the_user_did_not_tick(tab, server, service,  # noqa: F811
                                                           add_turns, action: str) -> None:
    """Regression (review2-web t2_back_restore, t2b_back_delete): Back brought the row boxes
    back ticked by their place on the tab; a turn that arrived meanwhile moved the rows, so
    "Bad" or "Delete" hit a turn the user never picked, while the count said 0 selected."""
    ids = add_turns(60)
    tab.goto(server.launch_url("ratings"))
    tab.wait_for_selector("#turns")
    for turn in ids[:-4:-1]:
        tab.check(f"tr[data-id='{turn}'] .pick")
    assert tab.inner_text("#selected-count") == "3 selected"
    tab.click("nav.pager a:has-text('older')")
    tab.wait_for_selector(f"tr[data-id='{ids[0]}']")
    (new,) = add_turns(1, captured_at="2025-03-02T00:00:00Z")
    tab.go_back()
    tab.wait_for_selector(f"tr[data-id='{new}']")
    ticked = tab.eval_on_selector_all(".pick:checked, #select-all:checked", "bs => bs.length")
    assert ticked == 0 and tab.inner_text("#selected-count") == "0 selected"
    tab.click(f"[data-bulk='{action}']")
    tab.wait_for_selector("#flash >> text=Select turns first")
    assert all(service.store.get_turn(t) is not None for t in [*ids, new])
    assert all(service.store.active_rating(t) is None for t in [*ids, new])



@pytest.mark.slow
@needs_chromium
def test_a_quick_correction_stores_and_shows_the_last_key(tab, server, service,  # noqa: F811
                                                          add_turns) -> None:
    """Regression (review2-web t10_key_race, t10b_key_race): g then b sent two requests at
    once; the server's threads could store them in either order and the row showed the
    answer that arrived last. Here the first request is held until the second key was
    pressed: a turn's changes now go one after another, and only the newest is drawn."""
    (turn,) = add_turns(1)
    tab.goto(server.launch_url("ratings"))
    tab.wait_for_selector("#turns")
    held: list[Any] = []

    def hold_the_first(route: Any) -> None:
        if held:
            route.continue_()
        else:
            held.append(route)

    tab.route("**/api/turns/*/rating", hold_the_first)
    tab.keyboard.press("j")
    tab.keyboard.press("g")
    tab.keyboard.press("b")
    tab.wait_for_timeout(400)  # long enough for "b" to reach the server if it is sent now
    held[0].continue_()
    _eventually(tab, lambda: len(service.store.rating_history(turn)) == 2)
    assert service.store.active_rating(turn).value == -1
    tab.wait_for_selector(f"tr[data-id='{turn}'] .badge.bad")
    tab.wait_for_timeout(400)  # an answer drawn late would show now
    assert tab.inner_text(f"tr[data-id='{turn}'] .badge") == "bad"
    assert tab.inner_text("#flash") == f"Turn {turn} rated bad."


def _open(tab: Any, turn: int) -> None:
    tab.click(f"tr[data-id='{turn}'] td.when")
    tab.wait_for_selector(f"#detail .detail-body[data-id='{turn}']")


@pytest.mark.slow
@needs_chromium
def test_a_stale_drawer_keeps_what_another_window_saved(tab, server, service,  # noqa: F811
                                                        add_turns) -> None:
    """Regression (review2-web t6_two_tabs): two windows on one turn; the one drawn first
    ticks a tag (it took away the other's new tag) and saves its comment (it replaced the
    other's without a word). Now the tag is added alone, and the comment is refused with
    what the other window saved shown; saving again replaces it on purpose."""
    (turn,) = add_turns(1)
    service.rate(turn, -1, source="web", comment="first words")
    for name in ("wrong", "verbose", "unsafe"):
        service.store.add_tag(name)
    service.set_tags(turn, ["wrong"])
    tab.goto(server.launch_url("ratings"))
    other = tab.context.new_page()
    other.goto(server.base_url + "/ratings")
    for window in (tab, other):
        _open(window, turn)
    other.check("#detail .tagpick input[value='verbose']")
    other.wait_for_selector(f"tr[data-id='{turn}'] .tag >> text=verbose")
    other.fill("#detail textarea", "first words; also it deleted my tests")
    other.click("#detail form.comment button")
    other.wait_for_selector("#flash >> text=comment saved")

    tab.fill("#detail textarea", "first words, and slow")  # typed before the redraw below
    tab.check("#detail .tagpick input[value='unsafe']")
    tab.wait_for_selector(f"tr[data-id='{turn}'] .tag >> text=unsafe")
    assert service.store.tags_of([turn]) == {turn: ["unsafe", "verbose", "wrong"]}
    tab.wait_for_selector("#detail .tagpick input[value='verbose']:checked")  # drawn again
    assert tab.input_value("#detail textarea") == "first words, and slow"
    tab.click("#detail form.comment button")
    note = tab.wait_for_selector("#detail .comment-changed")
    assert "“first words; also it deleted my tests”" in note.inner_text()
    assert "changed in another window meanwhile" in tab.inner_text("#flash")
    assert tab.input_value("#detail textarea") == "first words, and slow"  # not lost
    assert service.store.active_rating(turn).comment == "first words; also it deleted my tests"
    tab.click("#detail form.comment button")  # again: on purpose now
    tab.wait_for_selector("#flash >> text=comment saved")
    assert service.store.active_rating(turn).comment == "first words, and slow"
    other.close()


@pytest.mark.slow
@needs_chromium
def test_enter_on_a_focused_button_presses_it(tab, server, service,  # noqa: F811
                                              add_turns) -> None:
    """Regression (review2-web t5_enter_on_button): once a row was opened, Enter anywhere
    but in a text box reopened the row and was swallowed: Enter on "Save comment" or
    "Bad" did nothing for a keyboard user."""
    ids = add_turns(2)
    service.store.rate(ids[1], 1, "cli")
    tab.goto(server.launch_url("ratings"))
    _open(tab, ids[1])
    tab.fill("#detail textarea", "it ignored my instructions")
    tab.focus("#detail form.comment button[type=submit]")
    tab.keyboard.press("Enter")
    tab.wait_for_selector("#flash >> text=comment saved", timeout=5000)
    assert service.store.active_rating(ids[1]).comment == "it ignored my instructions"
    tab.wait_for_function(  # the drawer is drawn again from the answer (a function, not an
        # expression: polling an expression evals it, which the page's CSP refuses)
        "said => document.querySelector('#detail textarea').defaultValue === said",
        arg="it ignored my instructions")
    tab.focus("#detail button[data-rate='-1']")
    tab.keyboard.press("Enter")
    tab.wait_for_selector(f"tr[data-id='{ids[1]}'] .badge.bad", timeout=5000)
    assert service.store.active_rating(ids[1]).value == -1
    tab.focus("#turns tbody tr")  # on a row, Enter still opens it
    tab.keyboard.press("j")
    tab.keyboard.press("Enter")
    tab.wait_for_selector(f"#detail .detail-body[data-id='{ids[0]}']")


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("size", [(1280, 800), (800, 600)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_list_the_pager_and_a_refused_comment_in_pictures(
    server, service, add_turns, size: tuple[int, int]  # noqa: F811
) -> None:
    """Pictures of the list's second tab (its place and both pager links) and of the
    drawer's note after a comment another window changed (tests/web/screenshots)."""
    SHOTS.mkdir(exist_ok=True)
    prefix = f"ratings-{size[0]}x{size[1]}"
    ids = add_turns(120)
    service.store.add_tag("ignored instructions")
    for i, turn in enumerate(ids[40:80]):
        service.store.rate(turn, 1 if i % 3 else -1, "cli", comment="too long" if i % 5 else None)
    with chromium_page(size) as (tab, problems):
        tab.goto(server.launch_url("ratings"))
        tab.wait_for_selector("#turns tbody tr")
        take(tab, problems, f"{prefix}-first", "Ratings")
        tab.click("nav.pager a:has-text('older')")
        tab.wait_for_selector("nav.pager a:has-text('newer')")
        take(tab, problems, f"{prefix}-older", "Ratings")
        turn = ids[69]
        _open(tab, turn)
        service.comment(turn, "said in another window")
        tab.fill("#detail textarea", "typed here")
        tab.click("#detail form.comment button")
        tab.wait_for_selector("#detail .comment-changed")
        assert [i for i in problems.items if "409" not in i] == []
        problems.items.clear()
        take(tab, problems, f"{prefix}-comment-changed", "Ratings", whole=False)
