"""Lessons page and its JSON routes over a real data folder (issue 24: the user stays in control).

What an agent would be told is read back with ``lessonfiles.read``, the hook's own
reader, so each change made on the page is checked where it matters.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rltray.app.hooks import lessonfiles

from tests.web.webtesting import post_json

SHOP, BLOG = "/work/shop", "/work/blog"
SUITE = "Ran the whole test suite when asked for one test"


def told(service, folder: str | None, agent: str = "codex") -> str | None:
    return lessonfiles.read(str(service.paths.home), agent, folder)


def rated(service, add_turns, comment: str, value: int = -1, cwd: str = SHOP, **kw) -> int:
    (turn,) = add_turns(1, cwd=cwd, **kw)
    service.rate(turn, value, comment=comment, source="web")
    return turn


def lessons(client) -> dict[str, dict]:
    return {row["id"]: row for row in client.get("/api/lessons").get_json()["lessons"]}


def assert_refused(response, status: int, words: str) -> None:
    assert response.status_code == status, response.data
    error = response.get_json()["error"]
    assert words in error["message"] and error["message"].endswith("."), error


def test_the_page_lists_each_lesson_with_counts_scope_and_status(client, service, add_turns):
    first = rated(service, add_turns, SUITE)
    rated(service, add_turns, "you ran the whole test suite again")
    page = client.get("/lessons").data.decode()
    assert "<title>Lessons · rltray</title>" in page
    assert '<a href="/lessons" aria-current="page">Lessons</a>' in page
    card = page[page.index(f'data-key="c{first}"') :]
    card = card[: card.index("</article>")]
    (row,) = lessons(client).values()
    assert '<span class="words"' in card and f">{row['words']}</span>" in card
    assert ">avoid</span>" in card and ">active</span>" in card
    assert "bad 2" in card and "good 0" in card and "last seen 2" in card
    assert '<span title="/work/shop">shop</span>' in card
    assert "2 rated turns behind it" in card
    assert (row["bad"], row["good"], row["kind"], row["scope"]) == (2, 0, "avoid", "project")
    assert row["folders"] == [SHOP] and not row["muted"] and not row["pinned"]


def test_an_empty_page_says_where_lessons_come_from(client) -> None:
    page = client.get("/lessons").data.decode()
    assert 'id="no-lessons"' in page and "comments and tags" in page


def test_rewording_and_empty_words_go_back_to_the_users_comment(client, service, add_turns):
    service.lessons.switch("codex", True)
    key = f"c{rated(service, add_turns, SUITE)}"
    url = f"/api/lessons/{key}/words"
    reworded = post_json(client, url, {"text": "Run only the test I name"}).get_json()
    assert reworded["words"] == "Run only the test I name" and reworded["edited"]
    assert 'their own note on it: "Run only the test I name"' in (told(service, SHOP) or "")
    back = post_json(client, url, {"text": ""}).get_json()
    assert back["words"] == SUITE and not back["edited"]
    assert "run only the test" not in (told(service, SHOP) or "")


def test_an_added_lesson_cannot_be_emptied(client, service) -> None:
    added = post_json(client, "/api/lessons", {"text": "Use pytest -k", "folder": BLOG}).get_json()
    refused = post_json(client, f"/api/lessons/{added['id']}/words", {"text": " "})
    assert_refused(refused, 400, "is yours")
    assert lessons(client)[added["id"]]["words"] == "Use pytest -k"


def test_mute_pin_scope_and_delete_change_what_is_told(client, service, add_turns) -> None:
    service.lessons.switch("codex", True)
    key = f"c{rated(service, add_turns, SUITE)}"
    base = f"/api/lessons/{key}"
    muted = post_json(client, base + "/mute", {"on": True}).get_json()
    assert muted["status"] == "muted" and muted["muted"] and told(service, SHOP) is None
    assert "Unmute</button>" in client.get("/lessons/list").data.decode()
    post_json(client, base + "/mute", {"on": False})
    pinned = post_json(client, base + "/pin", {"on": True}).get_json()
    assert pinned["status"] == "pinned" and pinned["pinned"]
    assert "Unpin</button>" in client.get("/lessons/list").data.decode()
    everywhere = post_json(client, base + "/scope", {"scope": "global"}).get_json()
    assert everywhere["scope"] == "global" and "whole test suite" in (told(service, BLOG) or "")
    post_json(client, base + "/scope", {"scope": "project"})
    assert told(service, BLOG) is None
    assert post_json(client, base + "/delete").get_json() == {"deleted": key}
    assert lessons(client) == {} and told(service, SHOP) is None
    assert_refused(post_json(client, base + "/pin", {"on": True}), 400, f"no lesson '{key}'")


def test_a_contradiction_is_flagged_with_a_choice_and_resolved(client, service, add_turns):
    service.lessons.switch("codex", True)
    key = f"c{rated(service, add_turns, SUITE)}"
    rated(service, add_turns, SUITE, value=1)
    page = client.get("/lessons").data.decode()
    assert "Not told: rated good and bad equally often" in page and ">avoid or keep?</span>" in page
    assert 'data-act="resolve" data-kind="avoid"' in page and told(service, SHOP) is None
    resolved = post_json(client, f"/api/lessons/{key}/resolve", {"kind": "avoid"}).get_json()
    assert resolved["status"] == "told" and resolved["kind"] == "avoid"
    assert "; they count it as bad) and commented: " in (told(service, SHOP) or "")
    assert_refused(post_json(client, f"/api/lessons/{key}/resolve", {"kind": "note"}), 400, "kind")


def test_a_lesson_rated_in_two_projects_is_suggested_global_and_accepted(
    client, service, add_turns
) -> None:
    key = f"c{rated(service, add_turns, SUITE)}"
    rated(service, add_turns, SUITE, cwd=BLOG)
    row = lessons(client)[key]
    assert row["suggested_global"] and row["scope"] == "project"
    assert "Rated in 2 projects: tell it in every project?" in client.get("/lessons").data.decode()
    accepted = post_json(client, f"/api/lessons/{key}/scope", {"scope": "global"}).get_json()
    assert accepted["scope"] == "global" and not accepted["suggested_global"]
    assert "Rated in 2 projects" not in client.get("/lessons").data.decode()


def test_retired_and_still_happening_are_shown(client, service, add_turns) -> None:
    now = datetime.now(timezone.utc)
    old = add_turns(1, cwd=BLOG)[0]
    service.store.rate(old, -1, "cli", comment="wrote tabs", at=now - timedelta(days=70))
    first = add_turns(1, agent="codex")[0]
    service.store.rate(first, -1, "cli", comment=SUITE, at=now - timedelta(days=14))
    service.lessons.switch("codex", True)
    rated(service, add_turns, SUITE, agent="codex")
    page = client.get("/lessons").data.decode()
    retired = page[page.index(f'data-key="c{old}"') :]
    retired = retired[: retired.index("</article>")]
    assert ">retired</span>" in retired and "no new rating for 60 days" in retired
    assert "Still happening: no bad rating from an agent with lessons on" in retired
    card = page[page.index(f'data-key="c{first}"') :]
    trend = re.search(
        r"Still happening: ([\d.]+) bad a week since lessons went on \(\d{4}-"
        r"\d\d-\d\d\), ([\d.]+) a week before",
        card[: card.index("</article>")],
    )
    assert trend is not None and trend.groups() == ("1.0", "0.5")  # 1 in its first week; 1 in 2


def test_adding_a_lesson_for_a_folder_or_every_project(client, service) -> None:
    service.lessons.switch("claude-code", True)
    here = post_json(client, "/api/lessons", {"text": "Use pytest -k", "folder": BLOG,
                                              "kind": "keep"}).get_json()  # fmt: skip
    assert (here["kind"], here["folders"], here["user_added"]) == ("keep", [BLOG], True)
    everywhere = post_json(client, "/api/lessons", {"text": "Answer in English"}).get_json()
    assert everywhere["scope"] == "global" and everywhere["kind"] == "note"
    assert '"Use pytest -k"' in (told(service, BLOG, "claude-code") or "")
    assert '- The user\'s own note: "Answer in English"' in (
        told(service, "/x", "claude-code") or "")
    assert_refused(post_json(client, "/api/lessons", {"text": "   "}), 400, "needs some words")
    assert_refused(post_json(client, "/api/lessons", {"text": "x", "kind": "never"}), 400, "kind")
    assert_refused(post_json(client, "/api/lessons", {"text": 3}), 400, "text")
    assert_refused(post_json(client, "/api/lessons", {"text": "x", "to": 1}), 400, "not a field")
    assert len(lessons(client)) == 2


def test_the_turns_behind_a_lesson_newest_first(client, service, add_turns) -> None:
    now = datetime.now(timezone.utc)
    ids = add_turns(2, prompt="Please run test_parser only", cwd=SHOP)
    service.store.rate(ids[0], -1, "cli", comment=SUITE, at=now - timedelta(days=2))
    service.store.rate(ids[1], -1, "cli", comment="the whole test suite again", at=now)
    key = next(iter(lessons(client)))
    turns = client.get(f"/api/lessons/{key}/turns").get_json()
    assert [t["turn"] for t in turns] == [ids[1], ids[0]]
    assert turns[1]["comment"] == SUITE and turns[1]["prompt"] == "Please run test_parser only"
    assert (turns[0]["value"], turns[0]["agent"], turns[0]["project"]) == (-1, "claude-code", SHOP)
    assert_refused(client.get("/api/lessons/c999/turns"), 400, "no lesson 'c999'")
    assert client.get(f"/api/lessons/{'c' * 30}/turns").status_code == 404  # longer than an id


def test_the_preview_is_exactly_what_the_hook_reads_with_its_size(client, service, add_turns):
    rated(service, add_turns, SUITE)
    off = client.get(f"/api/lessons/preview?agent=codex&folder={SHOP}").get_json()
    assert off["on"] is False and off["text"].startswith("The user's own feedback")
    assert (off["budget"], off["cap"], off["lessons"]) == (2000, 4000, 1)
    assert off["chars"] == len(off["text"]) and "lessons are off: nothing is sent" in off["where"]
    post_json(client, "/api/lessons/agents/codex", {"on": True})
    on = client.get(f"/api/lessons/preview?agent=codex&folder={SHOP}").get_json()
    assert on["on"] is True and on["text"] == told(service, SHOP)
    assert Path(on["file"]).read_text().strip() == on["text"]
    assert "goes into Codex's context at session start" in on["where"]
    elsewhere = client.get("/api/lessons/preview?agent=codex&folder=/other").get_json()
    assert elsewhere["text"] is None and elsewhere["chars"] == 0 and elsewhere["file"] is None
    claude = client.get(f"/api/lessons/preview?folder={SHOP}").get_json()
    assert claude["agent"] == "claude-code" and claude["on"] is False
    assert_refused(client.get("/api/lessons/preview?agent=vim"), 400, "Unknown agent")
    # the page's preview starts on an agent that is on, in the folder of a project's lesson
    page = client.get("/lessons").data.decode()
    assert '<option value="codex" selected>Codex</option>' in page
    assert f'<option value="{SHOP}" selected>{SHOP}</option>' in page


def test_each_agents_switch_says_what_is_sent_and_where(client, service, add_turns) -> None:
    rated(service, add_turns, SUITE)
    folder = lessonfiles.agent_folder(str(service.paths.home), "codex")
    page = client.get("/lessons").data.decode()
    assert 'data-lessons-agent="codex">' in page  # off: not checked
    assert f"to {folder}/ (one .md file per project, global.md" in page
    assert "into Codex&#39;s context at session start" in page
    on = post_json(client, "/api/lessons/agents/codex", {"on": True}).get_json()
    assert on["on"] and on["files"] == 1 and on["state"].startswith("On: 1 lesson file")
    assert service.settings().lessons.codex is True and Path(folder).is_dir()
    assert 'data-lessons-agent="codex" checked>' in client.get("/lessons").data.decode()
    off = post_json(client, "/api/lessons/agents/codex", {"on": False}).get_json()
    assert not off["on"] and off["state"].startswith("Off: nothing is written")
    assert not Path(folder).exists() and service.settings().lessons.codex is False
    assert_refused(post_json(client, "/api/lessons/agents/vim", {"on": True}), 400, "Unknown")
    assert_refused(post_json(client, "/api/lessons/agents/codex", {"on": 1}), 400, "on")
    assert [a["name"] for a in client.get("/api/lessons/agents").get_json()] == [
        "claude-code", "codex"]  # fmt: skip


def test_changes_need_the_csrf_token(client, service, add_turns) -> None:
    key = f"c{rated(service, add_turns, SUITE)}"
    for url, body in ((f"/api/lessons/{key}/mute", {"on": True}),
                      ("/api/lessons", {"text": "x"}),
                      ("/api/lessons/agents/codex", {"on": True})):  # fmt: skip
        refused = client.post(url, json=body)
        assert_refused(refused, 403, "")
    assert lessons(client)[key]["status"] == "told" and len(lessons(client)) == 1
    assert service.settings().lessons.codex is False


# -- a wording suggested by the user's local model (Ollama): shown, saved only on Accept --------


def card_of(page: str, key: str) -> str:
    card = page[page.index(f'data-key="{key}"') :]
    return card[: card.index("</article>")]


def test_suggest_answers_the_models_wording_and_saves_nothing(client, service, add_turns):
    from tests.support.fake_generate import FakeGenerate

    first = rated(service, add_turns, SUITE)
    rated(service, add_turns, "wrong blog theme", cwd=BLOG)
    service.lessons.switch("codex", True)
    key = f"c{first}"
    with FakeGenerate({"tiny:latest": "Run only the test I name."}) as ollama:
        service.set_setting("ollama.host", ollama.url)
        service.set_setting("ollama.model", "tiny")
        got = post_json(client, f"/api/lessons/{key}/suggest", {})
        assert got.status_code == 200, got.data
        assert got.get_json() == {"id": key, "text": "Run only the test I name.", "model": "tiny"}
        (sent,) = ollama.requests
        assert sent["stream"] is False and SUITE in sent["prompt"]
        assert "wrong blog theme" not in sent["prompt"]
        assert lessons(client)[key]["words"] == SUITE  # nothing changed
        assert f'commented: "{SUITE}"' in told(service, SHOP)
        other = post_json(client, f"/api/lessons/{key}/suggest", {"model": "missing"})
        assert_refused(other, 400, "has no model 'missing'")
        assert ollama.requests[-1]["model"] == "missing"
    accepted = post_json(client, f"/api/lessons/{key}/words", {"text": got.get_json()["text"]})
    assert accepted.get_json()["words"] == "Run only the test I name."
    assert 'their own note on it: "Run only the test I name."' in told(service, SHOP)


def test_suggest_refusals_are_one_sentence(client, service, add_turns) -> None:
    key = f"c{rated(service, add_turns, SUITE)}"
    url = f"/api/lessons/{key}/suggest"
    assert_refused(post_json(client, url, {}), 400, "No Ollama model to ask: set ollama.model")
    service.set_setting("ollama.host", "http://127.0.0.1:9")
    service.set_setting("ollama.model", "tiny")
    assert_refused(post_json(client, url, {}), 400, "Ollama is not reachable at http://127.0.0.1:9")
    note = service.lessons.add("Use pytest -k", SHOP)
    assert_refused(post_json(client, f"/api/lessons/{note}/suggest", {}), 400, "no comments")
    assert_refused(post_json(client, "/api/lessons/c999/suggest", {}), 400, "no lesson 'c999'")
    assert_refused(post_json(client, url, {"model": 7}), 400, "model")
    assert lessons(client)[key]["words"] == SUITE


def test_only_a_lesson_with_comments_offers_suggest_wording(client, service, add_turns) -> None:
    key = f"c{rated(service, add_turns, SUITE)}"
    note = service.lessons.add("Use pytest -k", SHOP)
    page = client.get("/lessons").data.decode()
    assert '<button type="button" data-act="suggest"' in card_of(page, key)
    assert "Suggest wording</button>" in card_of(page, key)
    assert 'data-act="suggest"' not in card_of(page, note)
    assert '<p class="small suggestion" hidden></p>' in card_of(page, key)
