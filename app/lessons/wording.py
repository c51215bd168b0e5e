"""When two comments say the same thing: normalised word sets compared by their overlap.

Why word sets and not ``difflib``: a complaint comes back in other words, order
and length. ``difflib.SequenceMatcher`` compares characters in order: it scores a
short comment inside a long one ("verbose" / "too verbose, cut the preamble": 0.39)
below two different complaints that share a word ("wrong file edited" / "wrong
test framework": 0.43), so no threshold keeps the first pair and parts the second
(tests/app/test_lessons_wording.py shows it). Word sets without the filler words,
with plural and tense endings cut, compared by the Dice coefficient
(2·shared / (size a + size b)) give 0.5 and 0.33, ignore the order, need only set
operations, and give a number a person can check by hand. Negations ("not",
"never", "don't") are one word, "not", and a comment with it never joins one
without it: it says the opposite.
"""

from __future__ import annotations

import re
from functools import lru_cache

#: Comments at least this alike are one lesson (tests/app/test_lessons_wording.py
#: pins pairs on both sides of it).
JOIN = 0.5
#: Two lessons rated opposite ways whose words are this alike contradict each other.
SAME = 0.8

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_FILLER_WORDS = """
    a an the and or but if then so to of in on at by for with from into onto as is are was
    were be been being am it its it's this that these those there here i me my mine you your
    yours we us our he she they them their his her what which who whom when where why how
    just very really please also again too some any all do does did done have has had will
    would should could can may might must shall about up out over than only even still yet
    like get got"""
_FILLER = frozenset(_FILLER_WORDS.split())
_NEGATIONS = frozenset(("not", "no", "never", "without", "dont", "cannot"))


def _stem(word: str) -> str:
    """Cut one common English ending so "tests"/"test" and "edited"/"edit" meet."""
    for ending in ("ing", "ed", "es", "s"):
        if word.endswith(ending) and len(word) - len(ending) >= 3 and not word.endswith("ss"):
            return word[: -len(ending)]
    return word


@lru_cache(maxsize=4096)
def words(text: str) -> frozenset[str]:
    """The comparable words of ``text``: lower case, no filler, endings cut."""
    found = (w.lower() for w in _WORD.findall(text.replace("\u2019", "'")))
    return frozenset(
        "not" if w.endswith("n't") or w in _NEGATIONS else _stem(w)
        for w in found
        if w not in _FILLER
    )


def similarity(a: str, b: str) -> float:
    """How alike two comments are, 0 to 1 (the Dice coefficient of their word sets).

    A comment negated where the other is not is the opposite wish ("add comments",
    "do not add comments"): 0, however many words they share.
    """
    left, right = words(a), words(b)
    if not left or not right:
        return 1.0 if " ".join(a.lower().split()) == " ".join(b.lower().split()) else 0.0
    return dice(left, right)


def dice(left: frozenset[str], right: frozenset[str]) -> float:
    """2·shared / (size a + size b) of two non-empty word sets; 0 when one alone says "not"."""
    if ("not" in left) != ("not" in right):
        return 0.0
    return 2 * len(left & right) / (len(left) + len(right))
