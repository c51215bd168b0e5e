"""Reference logits kept from the forwards that computed them (base and parent): rows
found by their tokens, the budget, the parent rule. On the real backends (the numbers
do not change) in ``test_parity.py``; a whole round in ``test_drift.py``."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from rltray.trainer.backends.reference_logits import ReferenceLogits


def take(logits: np.ndarray, row: int, n: int) -> np.ndarray:
    return logits[row, :n].copy()


def batch_of(rows: list[list[int]]) -> SimpleNamespace:
    width = max(map(len, rows))
    ids = np.zeros((len(rows), width), dtype=np.int64)
    attn = np.zeros_like(ids)
    for r, row in enumerate(rows):
        ids[r, : len(row)] = row
        attn[r, : len(row)] = 1
    return SimpleNamespace(input_ids=ids, attention_mask=attn)


def test_rows_are_found_in_any_batch_and_padding() -> None:
    store = ReferenceLogits()
    a, b = [5, 6, 7, 8], [9, 10]
    assert store.want([np.array(a), np.array(b)], ["base"], width=3) == 2
    logits = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3)
    store.keep("base", batch_of([a, b]), logits, take)
    assert store.kept == 2
    got = store.lookup("base", batch_of([b, a]))  # other order, other padding
    assert got is not None
    np.testing.assert_array_equal(got[1], logits[0, :3])
    np.testing.assert_array_equal(got[0], logits[1, :1])
    assert store.lookup("base", batch_of([a, [1, 2, 3]])) is None  # one row unknown
    assert store.lookup("parent", batch_of([a])) is None


def test_the_budget_takes_turns_in_order_and_stops() -> None:
    store = ReferenceLogits()
    rows = [np.arange(11), np.arange(11) + 1, np.arange(11) + 2]  # 10 positions each
    # 10 positions x 100 logits x 4 bytes x 2 kinds = 8000 bytes a turn
    assert store.want(rows, ["base", "parent"], width=100, budget=17_000) == 2
    logits = np.zeros((3, 10, 100), dtype=np.float32)
    store.parent_loaded = True
    for kind in ("base", "parent"):
        store.keep(kind, batch_of([list(r) for r in rows]), logits, take)
    assert store.kept == 4  # the third turn did not fit


def test_parent_logits_are_kept_only_while_the_parent_is_loaded() -> None:
    store = ReferenceLogits()
    row = [1, 2, 3]
    store.want([np.array(row)], ["base", "parent"], width=2)
    logits = np.ones((1, 2, 2), dtype=np.float32)
    store.keep("parent", batch_of([row]), logits, take)  # after a step: not the parent
    assert store.kept == 0
    store.keep("parent", batch_of([row]), logits, take, parent_loaded=True)
    assert store.kept == 1


def test_nothing_is_kept_unless_asked() -> None:
    store = ReferenceLogits()
    store.keep("base", batch_of([[1, 2, 3]]), np.ones((1, 2, 2), np.float32), take)
    assert store.kept == 0
