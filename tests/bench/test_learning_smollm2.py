"""bench/learning_smollm2.py's simulated user and its target check, without a model (issue 20).

The issue asks for checkable preferences other than the one the presets were tuned
with; these pin that each checker sees what its name says and that the rated pools
are rated with the preference ``--prefer`` names (they used to be rated with the
default ``comment`` whatever was asked).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
try:
    import learning_smollm2 as bench
    import smollm2_world as w
finally:
    sys.path.remove(str(BENCH))

TYPED = "```python\ndef f(x: int) -> int:\n    return x + 1\n```"
# a comment, no annotation, a guard clause, a comprehension, and a usage line
PLAIN = ("```python\ndef evens(xs):\n    # keep the even ones\n    if not xs:\n        return []\n"
         "    return [x for x in xs if x % 2 == 0]\n\nprint(evens([1, 2, 3]))\n```")
LOOP = ("Here it is:\n```python\ndef total(xs):\n    t = 0\n    for x in xs:\n        t += x\n"
        "    return t\n```")


@pytest.mark.parametrize(("name", "yes", "no"), [
    ("type-hints", TYPED, PLAIN), ("guard", PLAIN, LOOP), ("comprehension", PLAIN, LOOP),
    ("usage-example", PLAIN, TYPED), ("comment", PLAIN, TYPED), ("code-first", PLAIN, LOOP),
    ("one-liner", TYPED, PLAIN), ("one-liner", "```python\ndef f(x): return x\n```", LOOP),
])
def test_each_preference_sees_what_it_names(name: str, yes: str, no: str) -> None:
    assert w.prefers(yes, name) and not w.prefers(no, name)


def test_checkers_read_the_code_not_the_prose() -> None:
    prose = "Use a list comprehension like [x for x in xs] and add type hints: x: int -> int."
    for name in ("type-hints", "comprehension", "guard", "usage-example"):
        assert not w.prefers(prose, name), name
    one_line_guard = "```python\ndef f(n):\n    if n < 0: raise ValueError(n)\n    return n\n```"
    assert w.prefers(one_line_guard, "guard")
    two_lines = "```python\ndef f(x):\n    return (x +\n            1)\n```"
    assert not w.prefers(two_lines, "one-liner")
    typed_default = "```python\ndef pad(s, width: int = 8):\n    return s.ljust(width)\n```"
    assert w.prefers(typed_default, "type-hints")


def test_the_rated_pools_follow_the_chosen_preference(tmp_path: Path) -> None:
    """Regression: ``build_world`` rated with ``comment`` even under ``--prefer type-hints``."""
    a = bench.parse(["--out", str(tmp_path), "--prefer", "type-hints", "--noise", "0",
                     "--sizes", "2"])
    pool = [["p1", TYPED], ["p2", PLAIN]]
    key = f"world-s{a.seed}-n2-h{a.heldout}-e{a.eval}-m{a.max_new}.json"
    (tmp_path / key).write_text(json.dumps(
        {name: pool for name in ("on", "off", "held_on", "held_off")}))
    world = bench.build_world(a, tmp_path, 2)
    assert [y for *_, y in world["on"]] == [1, -1]  # comment would give [-1, 1]


def test_targets_name_what_a_row_misses() -> None:
    row = {"pref": 0.8, "base_pref": 0.4, "nll_change": 0.04, "kl_ref": 0.03,
           "degenerate": 0.05, "base_degenerate": 0.02}
    assert bench.gap_closed(row) == pytest.approx(2 / 3)
    assert bench.misses(row) == "-"
    worse = {**row, "pref": 0.6, "nll_change": 0.06, "kl_ref": 0.06, "degenerate": 0.08}
    assert bench.misses(worse) == "gap,nll,kl,degen"
    assert bench.misses({"pref": 0.5, "nll_change": 0.0, "kl_ref": 0.0, "degenerate": 0}) == "?"


def test_a_row_prints_its_base_gap_and_misses() -> None:
    row = {"key": "torch-usage-example-balanced-on-n64-x1-e160-s1", "backend": "torch",
           "preset": "balanced", "source": "on", "n": 64, "lr_scale": 1.0, "pref": 0.8,
           "pref_se": 0.03, "base_pref": 0.4, "degenerate": 0.1, "base_degenerate": 0.02,
           "kl_ref": 0.03, "nll_change": 0.02, "kl_round": 0.02, "accepted": True, "steps": 8,
           "wall_s": 500.0}
    line = bench.fmt(row)
    assert "usage-example" in line and " 0.40 " in line and " 0.67 " in line
    assert line.endswith(" degen") and "0.02>0.10" in line
    assert bench.row_seed(row["key"]) == 1
    old = {k: v for k, v in row.items() if k not in ("base_pref", "base_degenerate")}
    assert bench.fmt(old).endswith(" ?") and "usage-example" in bench.fmt(old)


def test_a_user_who_rejects_broken_answers_changes_only_their_ratings() -> None:
    """``--user-rejects-broken``: an answer with the usage line but no function is rated
    bad; every other answer keeps its rating, noise draws included."""
    usage_only = "```python\nprint(sorted([3, 1, 2])[-2])\n```"
    answers = [PLAIN, usage_only, TYPED, LOOP] * 16
    one, two = random.Random(5), random.Random(5)
    plain = [w.rate(x, one, 0.3, "usage-example") for x in answers]
    strict = [w.rate(x, two, 0.3, "usage-example", rejects_broken=True) for x in answers]
    assert w.degenerate(usage_only) and w.prefers(usage_only, "usage-example")
    for x, p, s in zip(answers, plain, strict, strict=True):
        assert s == (-p if x is usage_only else p)  # the noise flips the strict user's too
    assert -1 in strict[1::4] and 1 in strict[1::4]  # mostly bad; good when noise flips it


def test_a_strict_users_rows_are_keyed_apart_and_keep_their_seed() -> None:
    a = bench.parse(["--user-rejects-broken", "--seed", "1"])
    assert a.user_rejects_broken
    assert bench.row_seed("torch-usage-example-balanced-on-n64-x1-e160-strict-s1-bf16") == 1
