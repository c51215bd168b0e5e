"""The lessons engine as pure functions: grouping, contradictions, retirement, scope, the text.

Evidence is built by hand and ``now`` is passed in, so every rule is checked on a
fake clock without a database (the service tests run the same code over SQLite).
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import pytest
from rltray.app.hooks import lessonfiles
from rltray.app.lessons import book, grouping, render, trend
from rltray.app.store import LessonRow

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc)
SHOP, BLOG = "/work/shop", "/work/blog"
_ids = itertools.count(1)


def ev(
    comment: str | None,
    value: int = -1,
    *,
    days_ago: float = 1,
    cwd: str | None = SHOP,
    tags: tuple[tuple[int, str], ...] = (),
    score: int | None = None,
    agent: str = "codex",
) -> grouping.Evidence:
    n = next(_ids)
    when = (NOW - timedelta(days=days_ago)).isoformat(timespec="microseconds")
    return grouping.Evidence(n, n, value, score, comment, when, cwd, agent, tags)


def row(key: str, **fields: object) -> LessonRow:
    base: dict[str, object] = dict(
        key=key, user_added=False, text=None, project=None, polarity=None, scope=None,
        muted=False, pinned=False, deleted_at=None, created_at=NOW.isoformat(),
        updated_at=NOW.isoformat(),
    )  # fmt: skip
    base.update(fields)
    return LessonRow(**base)  # type: ignore[arg-type]


def lessons(*evidence: grouping.Evidence, rows: tuple[LessonRow, ...] = ()) -> list[book.Lesson]:
    return book.assess(grouping.group(evidence), rows, NOW)


# -- grouping ---------------------------------------------------------------------------


def test_comments_group_by_wording_and_keep_their_first_turn_as_key() -> None:
    a = ev("Ran the whole test suite when asked for one test")
    b = ev("you ran the whole test suite again")
    c = ev("wrong file edited")
    d = ev("ran whole suite, again, for a one line change")
    groups = grouping.group([d, c, b, a])  # any order in: capture order out
    assert [g.key for g in groups] == [f"c{a.turn_id}", f"c{c.turn_id}"]
    assert [e.turn_id for e in groups[0].evidence] == [a.turn_id, b.turn_id, d.turn_id]


def test_a_new_rating_never_moves_the_groups_before_it() -> None:
    first = [ev("ran the whole test suite"), ev("too verbose"), ev("wrong framework")]
    before = {g.key: [e.turn_id for e in g.evidence] for g in grouping.group(first)}
    after = grouping.group([*first, ev("whole test suite again"), ev("verbose answer")])
    for g in after:
        assert [e.turn_id for e in g.evidence][: len(before[g.key])] == before[g.key]
    assert len(after) == 3


def test_a_tag_without_a_comment_joins_the_words_that_explained_it_in_that_project() -> None:
    verbose = (7, "verbose")
    explained = ev("too verbose, cut the preamble", tags=(verbose,))
    again = ev(None, tags=(verbose,))
    elsewhere = ev(None, tags=(verbose,), cwd=BLOG)  # nobody explained it in the blog
    plain_tag = ev(None, tags=((3, "wrong"),))
    groups = {g.key: g for g in grouping.group([explained, again, elsewhere, plain_tag])}
    assert [e.turn_id for e in groups[f"c{explained.turn_id}"].evidence] == [
        explained.turn_id,
        again.turn_id,
    ]
    assert groups["t7"].tag == "verbose" and groups["t7"].evidence == [elsewhere]
    assert groups["t3"].evidence == [plain_tag]


def test_groups_ignore_good_and_bad_so_both_sides_show_up_together() -> None:
    bad, good = ev("ran the whole test suite", -1), ev("ran the whole test suite", 1)
    (only,) = grouping.group([bad, good])
    assert only.evidence == [bad, good]


def test_thousands_of_comments_group_quickly() -> None:
    """The listener regroups on every change; a slow pass would stall the service.

    Every comment here shares words with every group (the worst case for the word
    index): about 0.3 s unloaded; the bound leaves room for a busy machine."""
    import time

    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "zeta"]
    many = [ev(f"{words[i % 9]} {words[(i // 9) % 9]} thing{i % 50}") for i in range(2000)]
    start = time.perf_counter()
    groups = grouping.group(many)
    assert time.perf_counter() - start < 5.0
    assert sum(len(g.evidence) for g in groups) == 2000


# -- lessons: words, counts, scope --------------------------------------------------------


def test_a_lesson_is_the_users_words_with_counts_from_its_ratings() -> None:
    (lesson,) = lessons(
        ev("Ran the whole test suite when asked for one test"),
        ev("you ran the whole test suite when I asked for one test"),
        ev("ran the whole suite for one test", days_ago=3),
    )
    assert lesson.words == "Ran the whole test suite when asked for one test"
    assert lesson.polarity == -1 and lesson.counts() == (3, 0) and lesson.told
    assert lesson.scope == "project" and lesson.projects == (lessonfiles.key(SHOP),)


def test_a_lesson_rated_in_two_projects_is_suggested_as_global_until_the_user_decides() -> None:
    a, b = ev("too verbose"), ev("too verbose", cwd=BLOG + "/")
    (lesson,) = lessons(a, b)
    assert lesson.suggested_global and lesson.scope == "project"
    assert lesson.counts(lessonfiles.key(SHOP)) == (1, 0)
    (accepted,) = lessons(a, b, rows=(row(f"c{a.turn_id}", scope="global"),))
    assert accepted.scope == "global" and not accepted.suggested_global
    no_folder = lessons(ev("be brief", cwd=None))[0]
    assert no_folder.scope == "global"  # a turn with no folder belongs to no project


def test_user_decisions_change_words_and_flags_never_counts() -> None:
    a = ev("too verbose")
    key = f"c{a.turn_id}"
    (lesson,) = lessons(a, ev("verbose"), rows=(row(key, text="Keep answers short", muted=True),))
    assert lesson.words == "Keep answers short" and lesson.edited
    assert lesson.muted and not lesson.told and lesson.counts() == (2, 0)


# -- retirement ----------------------------------------------------------------------------


def test_a_lesson_without_a_rating_for_60_days_retires_unless_pinned() -> None:
    old = ev("too verbose", days_ago=book.RETIRE_DAYS + 1)
    (retired,) = lessons(old)
    assert retired.retired and not retired.told and retired.status() == "retired"
    (pinned,) = lessons(old, rows=(row(f"c{old.turn_id}", pinned=True),))
    assert not pinned.retired and pinned.told
    (fresh,) = lessons(old, ev("verbose again", days_ago=book.RETIRE_DAYS - 1))
    assert not fresh.retired  # new evidence keeps it


def test_a_lesson_the_user_added_is_pinned_and_retires_only_when_unpinned() -> None:
    stale = (NOW - timedelta(days=90)).isoformat()
    added = row("u1", user_added=True, text="Use pytest -k", pinned=True, updated_at=stale)
    assert lessons(rows=(added,))[0].told
    unpinned = row("u1", user_added=True, text="Use pytest -k", updated_at=stale)
    assert lessons(rows=(unpinned,))[0].retired


# -- contradictions -------------------------------------------------------------------------


def test_a_group_rated_clearly_both_ways_is_flagged_and_not_told_until_resolved() -> None:
    items = [ev("ran the whole test suite", -1), ev("ran the whole test suite", -1),
             ev("ran the whole test suite", 1)]  # fmt: skip
    (mixed,) = lessons(*items)
    assert mixed.contradiction == "rated good 1 and bad 2 times" and not mixed.told
    (resolved,) = lessons(*items, rows=(row(f"c{items[0].turn_id}", polarity=-1),))
    assert resolved.told and resolved.polarity == -1 and resolved.resolved


def test_a_lone_leaning_score_does_not_contradict_many_clear_ratings() -> None:
    items = [ev("too verbose", -1) for _ in range(3)] + [ev("too verbose", 1, score=4)]
    (lesson,) = lessons(*items)
    assert lesson.contradiction is None and lesson.polarity == -1
    one_of_ten = [ev("too verbose", -1) for _ in range(9)] + [ev("too verbose", 1)]
    assert lessons(*one_of_ten)[0].contradiction is None  # under MIXED_SHARE


def test_two_lessons_of_opposite_polarity_in_near_identical_words_are_both_flagged() -> None:
    bad = ev(None, -1, tags=((5, "verbose"),))
    good = ev("verbose", 1)
    tag_lesson, word_lesson = lessons(bad, good)
    assert "opposite of lesson" in (tag_lesson.contradiction or "")
    assert "opposite of lesson t5" in (word_lesson.contradiction or "")
    apart = lessons(bad, ev("verbose", 1, cwd=BLOG))
    assert all(lesson.contradiction is None for lesson in apart)  # never in one file


# -- the text ----------------------------------------------------------------------------


def test_the_text_states_the_users_preferences_with_counts_and_dates() -> None:
    items = [ev("Ran the whole test suite when asked for one test", days_ago=d)
             for d in (9, 5, 4, 3, 2)]  # fmt: skip
    items.append(ev("Used pytest -k for the one test", 1, days_ago=1))
    text = render.text(lessons(*items), lessonfiles.key(SHOP))
    assert text == (
        "The user's own feedback on earlier answers in this project (from rltray):\n"
        "- The user rated answers bad 5 times (last on 2026-11-25) and commented: "
        '"Ran the whole test suite when asked for one test"\n'
        '- The user rated answers good once (last on 2026-11-26) and commented: '
        '"Used pytest -k for the one test"'
    )


def test_a_project_never_gets_another_projects_lessons() -> None:
    every = lessons(ev("ran the whole test suite"), ev("wrong blog theme", cwd=BLOG))
    texts = render.texts(every)
    assert set(texts) == {lessonfiles.key(SHOP), lessonfiles.key(BLOG)}
    assert "test suite" in texts[lessonfiles.key(SHOP)]
    assert "blog" not in texts[lessonfiles.key(SHOP)]
    assert "test suite" not in texts[lessonfiles.key(BLOG)]


def test_global_lessons_go_to_the_global_file_and_into_every_project_file() -> None:
    a = ev("be brief")
    every = lessons(a, ev("ran the whole test suite"), rows=(row(f"c{a.turn_id}", scope="global"),))
    texts = render.texts(every)
    assert texts[lessonfiles.GLOBAL] == (
        "The user's own feedback on earlier answers (from rltray):\n"
        '- The user rated answers bad once (last on 2026-11-26) and commented: "be brief"'
    )
    project = texts[lessonfiles.key(SHOP)]
    assert project.index("test suite") < project.index("In every project:\n- The user rated")
    assert project.endswith('commented: "be brief"')


def test_the_text_keeps_to_ten_lessons_and_the_budget() -> None:
    topics = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
              "india", "juliet", "kilo", "lima"]  # fmt: skip
    items = [ev(f"{t} {t}word{i}") for i, t in enumerate(topics)]
    text = render.text(lessons(*items), lessonfiles.key(SHOP))
    assert text is not None and text.count("\n- ") == render.MAX_LESSONS
    long_words = [ev(f"{t} " + "x" * 190 + f" {t}") for t in topics]
    long_text = render.text(lessons(*long_words), lessonfiles.key(SHOP))
    assert long_text is not None and len(long_text) <= lessonfiles.BUDGET_CHARS
    assert long_text.count("\n- ") < render.MAX_LESSONS  # the budget stopped it first
    assert len(render.text(lessons(*long_words), lessonfiles.key(SHOP), budget=400) or "") <= 400


def test_pinned_and_most_rated_lessons_come_first_within_the_budget() -> None:
    once = ev("wrong framework")
    thrice = [ev("too verbose") for _ in range(3)]
    pinned = ev("ran the whole suite")
    every = lessons(once, *thrice, pinned, rows=(row(f"c{pinned.turn_id}", pinned=True),))
    text = render.text(every, lessonfiles.key(SHOP)) or ""
    assert text.index("whole suite") < text.index("verbose") < text.index("framework")


def test_held_back_lessons_are_not_in_any_text() -> None:
    a, b, c = ev("too verbose"), ev("wrong framework"), ev("ran the whole suite")
    every = lessons(a, b, c, rows=(row(f"c{a.turn_id}", muted=True),
                                   row(f"c{b.turn_id}", deleted_at=NOW.isoformat())))  # fmt: skip
    text = render.text(every, lessonfiles.key(SHOP)) or ""
    assert "whole suite" in text and "verbose" not in text and "framework" not in text
    assert render.texts(lessons(ev("too verbose", days_ago=61))) == {}


@pytest.mark.parametrize(
    "words", ["be brief", "Only run the one test I asked for", "API keys leaked.", "I asked twice!"]
)
def test_the_users_words_are_quoted_as_they_wrote_them_with_no_verb_before_them(
    words: str,
) -> None:
    """Regression (review 3, finding 3): every bad lesson was told as "Avoid: <words>", and a
    comment explaining a bad rating by what the user wanted ("be brief") read as its
    opposite ("Avoid: be brief"). The text states the facts and quotes the words whole."""
    told = render.bullet(lessons(ev(words))[0])
    assert told == ("- The user rated answers bad once (last on 2026-11-26) and commented: "
                    f'"{words}"')
    assert "Avoid" not in told and "Keep" not in told


def test_reworded_and_added_lessons_are_told_as_the_users_own_note_word_for_word() -> None:
    """Regression (review 3, finding 3): the user's own rewording ("Keep answers short") and an
    added lesson were told after "Avoid:" / "Keep:" too."""
    a = ev("be brief")
    edited, added, noted = lessons(a, rows=(
        row(f"c{a.turn_id}", text="Keep answers short"),
        row("u1", user_added=True, text="Never push to main", polarity=-1, project=SHOP),
        row("u2", user_added=True, text="Answer in English", project=SHOP)))  # fmt: skip
    assert render.bullet(edited) == ('- The user rated answers bad once (last on 2026-11-26); '
                                     'their own note on it: "Keep answers short"')  # fmt: skip
    assert render.bullet(added) == ('- The user\'s own note (filed under "avoid"): '
                                    '"Never push to main"')  # fmt: skip
    assert render.bullet(noted) == '- The user\'s own note: "Answer in English"'


def test_a_lesson_the_store_accepts_is_told_whole() -> None:
    """Regression (review 3, finding 9): the store takes 500 characters but the text cut the
    words at 200, so the end of a lesson ("BUT never on prod") never reached the agent."""
    from rltray.app.store.lessons import MAX_LESSON_CHARS

    words = "Run the migrations yourself " + "x" * (MAX_LESSON_CHARS - 60) + " BUT never on prod"
    assert len(words) <= MAX_LESSON_CHARS
    (added,) = lessons(rows=(row("u1", user_added=True, text=words, project=SHOP),))
    text = render.text([added], lessonfiles.key(SHOP)) or ""
    assert f'"{words}"' in text and "…" not in text
    long_comment = "x" * 300 + " the end"
    (from_comment,) = lessons(ev(long_comment))
    assert "the end" not in render.bullet(from_comment)  # a comment is cut, and says so
    assert render.bullet(from_comment).endswith('…"')


def test_a_project_is_told_its_own_comments_of_a_lesson_rated_in_two_projects() -> None:
    """Regression (review 3, finding 8): the words of a lesson rated in two projects were the
    centre of all its comments, so the blog was told the shop's "acme payroll"."""
    shop = [ev("never run the acme payroll migrations on prod"),
            ev("never run acme payroll migrations on prod!")]  # fmt: skip
    blog = ev("never run migrations on prod", cwd=BLOG)
    (lesson,) = lessons(*shop, blog)
    assert lesson.projects == (lessonfiles.key(SHOP), lessonfiles.key(BLOG))
    texts = render.texts([lesson])
    assert '"never run migrations on prod"' in texts[lessonfiles.key(BLOG)]
    assert "acme" not in texts[lessonfiles.key(BLOG)]
    assert "acme payroll" in texts[lessonfiles.key(SHOP)]
    global_one = lessons(*shop, blog, rows=(row(lesson.key, scope="global"),))[0]
    assert lesson.words in render.texts([global_one])[lessonfiles.GLOBAL]  # all: its centre


# -- still happening -----------------------------------------------------------------------


def test_still_happening_compares_bad_ratings_per_week_before_and_after_switching_on() -> None:
    since = (NOW - timedelta(days=14)).isoformat()
    items = [ev("too verbose", days_ago=d) for d in (42, 35, 28, 21)]  # 4 in 4 weeks before
    items += [ev("too verbose", days_ago=7)]  # 1 in the 2 weeks since
    items += [ev("too verbose", days_ago=3, agent="claude-code")]  # lessons off for it
    (lesson,) = lessons(*items)
    happening = trend.still_happening(lesson, {"codex": since}, NOW)
    assert happening is not None
    assert (round(happening.before, 2), round(happening.after, 2)) == (1.0, 0.5)
    assert trend.still_happening(lesson, {}, NOW) is None


def test_carry_parks_a_row_whose_key_names_a_group_of_other_turns() -> None:
    """The key ``c5`` may name another lesson after turn 5 was deleted and its id given
    again; its row is set aside, and a row whose group moved goes to the new key."""
    from rltray.app.lessons import carry
    from rltray.app.lessons.grouping import Evidence, Group
    from rltray.app.store.lessons import LessonRow

    def ev(turn: int, key: str) -> Evidence:
        return Evidence(rating_id=turn, turn_id=turn, value=-1, score=None, comment="x",
                        rated_at="2026-01-01T00:00:00Z", cwd=None, agent="codex",
                        turn_key=key)  # fmt: skip

    def row(key: str, members: tuple[str, ...], at: str = "2026-01-02") -> LessonRow:
        return LessonRow(key=key, user_added=False, text=None, project=None, polarity=None,
                         scope=None, muted=True, pinned=False, deleted_at=None,
                         created_at=at, updated_at=at, members=members)  # fmt: skip

    groups = [Group("c5", [ev(5, "new")]), Group("c7", [ev(7, "b"), ev(8, "c")])]
    rows = [row("c5", ("old",)), row("c6", ("a", "b"))]
    assert carry.plan(groups, rows).moves == [("c5", "was-c5", ("old",)), ("c6", "c7", ("b", "c"))]

    # a split: the part keeping the key keeps the row; a part whose turns were all behind
    # it takes a copy (under the row's key once moved); a part with a new turn takes none
    groups = [Group("c1", [ev(1, "a")]), Group("c3", [ev(3, "c")]),
              Group("c4", [ev(4, "d"), ev(2, "b")])]  # fmt: skip
    planned = carry.plan(groups, [row("c1", ("a", "b", "c"))])
    assert planned.moves == [("c1", "c1", ("a",))]
    assert planned.copies == [("c1", "c3", ("c",))]
    moved = carry.plan([Group("c2", [ev(2, "b")]), Group("c3", [ev(3, "c")])],
                       [row("c1", ("a", "b", "c"))])  # fmt: skip
    assert (moved.moves, moved.copies) == ([("c1", "c2", ("b",))], [("c2", "c3", ("c",))])
