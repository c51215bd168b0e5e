"""When two comments say the same thing (app/lessons/wording.py): pairs on both sides of JOIN."""

from __future__ import annotations

import pytest
from rltray.app.lessons import wording


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Ran the whole test suite when asked for one test",
         "you ran the whole test suite again when I asked for one test"),
        ("ran the whole test suite", "the whole suite was run"),  # other order, other tense
        ("verbose", "too verbose, cut the preamble"),  # a short comment inside a long one
        ("Don’t add comments", "do not add comments"),  # curly apostrophe, contraction
        ("edited the tests", "edits test"),  # endings cut
    ],
)  # fmt: skip
def test_the_same_complaint_in_other_words_joins(a: str, b: str) -> None:
    assert wording.similarity(a, b) >= wording.JOIN


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("wrong file edited", "wrong test framework"),  # one shared word is not one lesson
        ("add comments", "do not add comments"),  # a negation turns it around
        ("use pytest", "the the the"),  # nothing but filler compares with nothing
    ],
)
def test_different_complaints_stay_apart(a: str, b: str) -> None:
    assert wording.similarity(a, b) < wording.JOIN


def test_similarity_is_symmetric_and_exact_for_filler_only_text() -> None:
    a, b = "ran the whole suite", "whole suite again, ran"
    assert wording.similarity(a, b) == wording.similarity(b, a) == 1.0
    assert wording.similarity("it is what it is", "It is  what it is") == 1.0
    assert wording.similarity("it is", "what it is") == 0.0


def test_difflib_cannot_draw_this_line_and_word_sets_can() -> None:
    """Why wording.py compares word sets: with difflib no threshold keeps the first pair
    together and the second apart."""
    import difflib

    same = ("verbose", "too verbose, cut the preamble")
    different = ("wrong file edited", "wrong test framework")

    def ratio(pair: tuple[str, str]) -> float:
        return difflib.SequenceMatcher(None, *pair).ratio()

    assert ratio(same) < ratio(different)
    assert wording.similarity(*same) >= wording.JOIN > wording.similarity(*different)
