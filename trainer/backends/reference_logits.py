"""The base's and the parent's logits of the drift set's turns, kept from the forward
that already computed them.

Drift is exact KL over the vocabulary, so every measurement needs the reference
models' full distributions, not just the token log-probs the objective keeps. The
base never changes and the parent does not change within a round, yet each guard
measurement ran their forwards again: on a first round half of its cost, with a
parent two thirds. The round start already runs the base (and the parent) over
every turn, so the backend keeps the logits of the turns the drift set names, up to
a byte budget (the guard's turns first), and the drift measurement then runs the
policy's forward only.

Rows are keyed by their token ids, so the same turn in a differently padded batch
finds them (batches are right-padded: a row's logits do not depend on its
neighbours). Only two kinds are kept: ``"base"`` (the LoRA off: always the same)
and ``"parent"`` (the LoRA the round started from), and the parent's only while
:attr:`ReferenceLogits.parent_loaded` says the policy *is* the parent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

#: Most bytes of kept logits (fp32). SmolLM2's 49k vocabulary at ~300 tokens a turn
#: is ~59 MB a turn and model; a 152k vocabulary ~180 MB.
BUDGET_BYTES = 512 * 2**20

KINDS = ("base", "parent")


def row_key(ids: np.ndarray) -> bytes:
    """A turn's identity: its token ids (unpadded)."""
    return np.ascontiguousarray(ids, dtype=np.int64).tobytes()


class ReferenceLogits:
    """Per-turn reference logits, for the turns asked for, under a byte budget."""

    def __init__(self) -> None:
        self._wanted: dict[str, set[bytes]] = {k: set() for k in KINDS}
        self._rows: dict[tuple[str, bytes], Any] = {}
        #: True while the LoRA loaded is the round's parent (the round start, before
        #: any step); a backend keeps ``"parent"`` logits from its forwards only then.
        self.parent_loaded = False
        self.hits = 0

    def want(self, id_rows: Sequence[np.ndarray], kinds: Sequence[str], vocab: int,
             budget: int | None = None) -> int:
        """Keep the logits of these turns (in order, while the budget lasts); how many."""
        budget = BUDGET_BYTES if budget is None else budget
        per_token = 4 * max(int(vocab), 1) * len(kinds)
        used, taken = 0, 0
        for ids in id_rows:
            size = (len(ids) - 1) * per_token
            if used + size > budget:
                break
            used += size
            taken += 1
            for kind in kinds:
                self._wanted[kind].add(row_key(ids))
        return taken

    def keep(self, kind: str, batch: Any, logits: Any,
             take: Callable[[Any, int, int], Any], *, parent_loaded: bool | None = None
             ) -> None:
        """Keep the wanted rows of ``logits`` (B, W-1, V: positions that predict the
        next token). ``take(logits, row, n)`` copies one row's first ``n`` positions.
        ``parent_loaded``: the caller knows the parent's LoRA made these logits
        (default: :attr:`parent_loaded`)."""
        loaded = self.parent_loaded if parent_loaded is None else parent_loaded
        if kind == "parent" and not loaded:
            return
        for r, ids in enumerate(_rows_of(batch)):
            key = row_key(ids)
            if key in self._wanted[kind] and (kind, key) not in self._rows:
                self._rows[(kind, key)] = take(logits, r, len(ids) - 1)

    def lookup(self, kind: str, batch: Any) -> list[Any] | None:
        """Each row's kept logits ((L_r - 1, V)), or None unless every row is kept."""
        rows = [self._rows.get((kind, row_key(ids))) for ids in _rows_of(batch)]
        if any(r is None for r in rows):
            return None
        self.hits += 1
        return rows

    @property
    def kept(self) -> int:
        return len(self._rows)


def _rows_of(batch: Any) -> Iterable[np.ndarray]:
    ids = np.asarray(batch.input_ids)
    lengths = np.asarray(batch.attention_mask).sum(axis=1)
    return [ids[r, : int(n)] for r, n in enumerate(lengths)]
