"""The ratings browser's store: filters, real deletion, tags and comments (m005)."""

from __future__ import annotations

import pytest
from rltray.app.store import Store, StoreError, TurnFilter
from rltray.app.training import jobbuild


def _fill(store: Store, make_turn) -> list[int]:
    ids = []
    for i, (agent, cwd, text) in enumerate(
        [
            ("claude-code", "/work/a", "fix the parser"),
            ("codex", "/work/b", "100% done_now"),
            ("claude-code", "/work/b", "rename the module"),
            ("codex", "/work/a", "write the docs"),
        ]
    ):
        turn_id, _ = store.add_turn(
            make_turn(agent=agent, cwd=cwd, response=text, captured_at=f"2025-02-0{i + 1}T10:00Z")
        )
        ids.append(turn_id)
    store.rate(ids[0], 1, "cli")
    store.rate(ids[1], -1, "cli", comment="ignored the tests")
    return ids


def test_filters_combine(store: Store, make_turn) -> None:
    ids = _fill(store, make_turn)

    def found(**kw) -> list[int]:
        where = TurnFilter(**kw)
        turns = store.search_turns(where)
        assert store.count_turns(where) == len(turns)
        return [t.id for t in turns]

    assert found() == ids[::-1]
    assert found(agent="codex") == [ids[3], ids[1]]
    assert found(project="/work/a") == [ids[3], ids[0]]
    assert found(rating="good") == [ids[0]]
    assert found(rating="bad") == [ids[1]]
    assert found(rating="unrated") == [ids[3], ids[2]]
    assert found(text="PARSER") == [ids[0]]
    assert found(text="the tests") == [ids[1]]  # the rating's comment
    assert found(text="100%") == [ids[1]] and found(text="e_n") == [ids[1]]  # no wildcards
    assert found(since="2025-02-02T00:00:00+00:00", until="2025-02-04T00:00:00+00:00") == [
        ids[2],
        ids[1],
    ]
    assert store.projects() == ["/work/a", "/work/b"]
    assert store.agents() == ["claude-code", "codex"]
    with pytest.raises(StoreError, match="Unknown rating filter"):
        found(rating="great")


def test_delete_is_real_and_a_re_report_stays_deleted(store: Store, make_turn, paths) -> None:
    ids = _fill(store, make_turn)
    store.set_turn_tags(ids[1], ["wrong"])
    doomed = store.get_turn(ids[1])
    assert store.delete_turns([ids[1], 999]) == 1
    assert store.get_turn(ids[1]) is None
    assert store.rating_history(ids[1]) == [] and store.tags_of([ids[1]]) == {}
    rows = store._read("SELECT COUNT(*) FROM ratings WHERE turn_id = ?", (ids[1],))
    assert rows[0][0] == 0
    # nothing of its text stays anywhere in the database file's tables
    dump = "\n".join(store.conn.iterdump())
    assert "100% done_now" not in dump and "ignored the tests" not in dump
    assert all(e["id"] != ids[1] for e in store.iter_export())
    assert all(e["turn_id"] != ids[1] for e in store.training_examples())
    # the agent reports the same turn again: not stored again
    rec = make_turn(
        agent="codex", session=doomed.session, turn=doomed.turn, response="100% done_now"
    )
    assert store.add_turn(rec) == (0, False)
    assert store.count_turns(TurnFilter()) == 3


def test_a_deleted_turn_is_in_no_training_job(store: Store, make_turn, paths) -> None:
    ids = []
    for i in range(12):
        turn_id, _ = store.add_turn(make_turn(response=f"answer {i}"))
        store.rate(turn_id, 1 if i % 2 else -1, "cli")
        ids.append(turn_id)
    store.delete_turns(ids[:3])
    examples = store.training_examples()
    assert {e["turn_id"] for e in examples} == set(ids[3:])
    lines = [jobbuild.example_line(e) for e in examples]
    assert all("answer 0" not in str(line) for line in lines)


def test_tags_edit_list_and_turns(store: Store, make_turn) -> None:
    ids = _fill(store, make_turn)
    assert [t["name"] for t in store.list_tags()] == ["ignored instructions", "verbose", "wrong"]
    assert store.set_turn_tags(ids[0], ["Verbose", "  too   long "]) == ["too long", "verbose"]
    assert store.add_tag("WRONG") == "wrong"  # case-insensitive: no duplicate
    assert store.tag_turns(ids, "wrong") == 4
    assert store.tag_turns(ids[:2], "wrong", on=False) == 2
    assert store.tags_of(ids) == {
        ids[0]: ["too long", "verbose"],
        ids[2]: ["wrong"],
        ids[3]: ["wrong"],
    }
    assert [t.id for t in store.search_turns(TurnFilter(tags=("wrong",)))] == [ids[3], ids[2]]
    assert store.remove_tag("wrong") and not store.remove_tag("wrong")
    assert ids[2] not in store.tags_of(ids)
    with pytest.raises(StoreError, match="needs a name"):
        store.add_tag("   ")
    with pytest.raises(StoreError, match="no turn"):
        store.set_turn_tags(12345, ["wrong"])


def test_comment_edits_in_place_and_keeps_the_trained_mark(store: Store, make_turn) -> None:
    ids = _fill(store, make_turn)
    store.add_run("r1")
    rating = store.active_rating(ids[0])
    store.mark_trained([rating.id], "r1")
    changed = store.set_comment(ids[0], "  clear and short ")
    assert changed.id == rating.id and changed.comment == "clear and short"
    assert changed.trained_run_id == "r1" and len(store.rating_history(ids[0])) == 1
    with pytest.raises(StoreError, match="rate it first"):
        store.set_comment(ids[2], "hm")


def test_ratings_per_day(store: Store, make_turn) -> None:
    from datetime import datetime, timezone

    ids = _fill(store, make_turn)
    day = datetime(2025, 3, 1, 9, tzinfo=timezone.utc)
    store.rate(ids[2], 1, "cli", at=day)
    store.rate(ids[3], -1, "cli", at=day)
    today = datetime.now(timezone.utc).date().isoformat()  # _fill rated two turns now
    assert store.ratings_per_day(since="2025-03-01") == [("2025-03-01", 1, 1), (today, 1, 1)]
    assert store.ratings_per_day(since="2025-03-02") == [(today, 1, 1)]


def test_delete_adapter_keeps_the_chain_and_never_the_active_one(store: Store, tmp_path) -> None:
    for v in (1, 2, 3):
        store.add_adapter("base", tmp_path / f"v{v}", parent_version=v - 1 or None, version=v)
    store.set_adapter_status(3, "active")
    with pytest.raises(StoreError, match="in use"):
        store.delete_adapter(3)
    assert store.delete_adapter(2).version == 2
    assert store.get_adapter(2) is None and store.get_adapter(3).parent_version == 1
    with pytest.raises(StoreError, match="no adapter version 2"):
        store.delete_adapter(2)


# -- review2-web: paging, many tags, a comment changed elsewhere -----------------------------


def test_before_and_after_page_by_a_rows_place_ties_broken_by_id(store: Store, make_turn) -> None:
    """Regression (review2-web t1_pager_skip): the browser paged with an offset into a list
    the user's own ratings shrink, so "older" skipped a page of unrated turns. A page now
    continues from a row's (captured_at, id); turns captured in the same second keep order."""
    ids = [store.add_turn(make_turn(captured_at=f"2025-02-01T10:00:0{i // 2}Z"))[0]
           for i in range(6)]  # pairs share a captured_at
    newest_first = ids[::-1]

    def page(**kw) -> list[int]:
        return [t.id for t in store.search_turns(TurnFilter(**kw), limit=2)]

    def place(turn_id: int) -> tuple[str, int]:
        return store.get_turn(turn_id).captured_at, turn_id

    assert page() == newest_first[:2]
    assert page(before=place(newest_first[1])) == newest_first[2:4]
    assert page(before=place(newest_first[2])) == newest_first[3:5]  # inside a pair
    assert page(after=place(newest_first[4])) == newest_first[2:4]  # the nearest newer ones
    assert page(after=place(newest_first[0])) == []
    unrated = TurnFilter(rating="unrated", before=place(newest_first[1]))
    for turn_id in newest_first[:2]:  # rating the first page does not move the next one
        store.rate(turn_id, 1, "cli")
    assert [t.id for t in store.search_turns(unrated, limit=2)] == newest_first[2:4]
    assert store.count_turns(TurnFilter(after=place(newest_first[2]))) == 2


def test_many_tags_in_one_filter_and_a_tag_named_twice(store: Store, make_turn) -> None:
    """Regression (review2-web t9_filters): one EXISTS per tag went past SQLite's expression
    depth (a 500 at 1000 tags); the filter is one subquery now, and a tag named twice (in
    any letter case: names are COLLATE NOCASE) is asked for once."""
    ids = _fill(store, make_turn)
    store.set_turn_tags(ids[0], ["wrong", "verbose"])
    store.set_turn_tags(ids[1], ["wrong"])

    def found(*tags: str) -> list[int]:
        where = TurnFilter(tags=tags)
        assert store.count_turns(where) == len(store.search_turns(where))
        return [t.id for t in store.search_turns(where)]

    assert found("wrong") == [ids[1], ids[0]]
    assert found("wrong", "verbose") == [ids[0]]
    assert found("wrong", "WRONG", "wrong ") == [] and found("wrong", "WRONG") == [ids[1], ids[0]]
    assert found("wrong", "no such tag") == []
    many = tuple(f"t{i}" for i in range(1000))
    assert found("wrong", *many) == []  # OperationalError: expression tree too large, before


def test_a_comment_changed_meanwhile_is_not_overwritten(store: Store, make_turn) -> None:
    """Regression (review2-web t6_two_tabs): a comment saved from a stale drawer replaced the
    one another window saved meanwhile. With ``was`` the store only writes over that one."""
    from rltray.app.store.turns import CommentChanged

    ids = _fill(store, make_turn)  # ids[1] is commented "ignored the tests"
    assert store.set_comment(ids[1], "and slow", was="ignored the tests").comment == "and slow"
    with pytest.raises(CommentChanged, match="now reads “and slow”") as refused:
        store.set_comment(ids[1], "mine", was="ignored the tests")
    assert refused.value.current == "and slow"
    assert store.active_rating(ids[1]).comment == "and slow"
    assert store.set_comment(ids[0], "first", was="").comment == "first"  # none before: ""
    assert store.set_comment(ids[0], "second\r\nline", was=" first\n").comment == "second\r\nline"
    assert store.set_comment(ids[0], None, was="second\nline").comment is None  # as a text box
    assert store.set_comment(ids[0], "no check").comment == "no check"  # no ``was``: as before
