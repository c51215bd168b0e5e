"""Ratings browser: filters, the rendered turn, rate / re-rate / unrate / comment / tag, bulk
actions, real deletion and the JSONL export."""

from __future__ import annotations

import json

from tests.web.webtesting import post_json


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
