"""The base's and the parent's final hidden states of the drift set's turns, kept from
the forward that already computed them: their logits at a fraction of the memory.

Drift is exact KL over the vocabulary, so every measurement needs the reference
models' full distributions, not just the token log-probs the objective keeps. The
base never changes and the parent does not change within a round, yet each guard
measurement ran their forwards again. The round start already runs the base (and
the parent) over every turn, so the backend keeps what it needs of the turns the
drift set names, and a drift measurement then runs the policy's body only.

What is kept is the model's last hidden state (after the final norm, before the
output head), not the logits. LoRA never touches the output head, so the base's,
the parent's and the policy's logits are all ``head(hidden)`` with the *same* head:
the logits are rebuilt exactly (the same matmul) where the KL is taken, a few
positions at a time. A token then costs ``4 x hidden`` bytes instead of
``4 x vocab``: 2.3 KB instead of 197 KB on SmolLM2 (576 / 49k), 3.6 KB instead of
608 KB on Qwen2.5-0.5B (896 / 152k). Kept full logits were 512 MiB for two turns
there; a backend that cannot split its logits so (a head with softcapping, a check
that failed) passes the logits themselves as its "hidden" state and a width of the
vocabulary: the same store, the same budget.

Rows are keyed by their token ids, so the same turn in a differently padded batch
finds them (batches are right-padded: a row's states do not depend on its
neighbours). Only two kinds are kept: ``"base"`` (the LoRA off: always the same)
and ``"parent"`` (the LoRA the round started from), and the parent's only while
:attr:`ReferenceLogits.parent_loaded` says the policy *is* the parent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

#: Share of the machine's available memory (psutil, when the round starts) the kept
#: rows may take. A round's other memory is the model and one batch: a sixteenth
#: leaves that room on any machine the trainer runs on.
BUDGET_SHARE = 1 / 16

KINDS = ("base", "parent")


def budget_bytes() -> int:
    """Bytes the store may hold: :data:`BUDGET_SHARE` of the memory available now."""
    from .machine_memory import available_bytes

    return int(available_bytes() * BUDGET_SHARE)


def row_key(ids: np.ndarray) -> bytes:
    """A turn's identity: its token ids (unpadded)."""
    return np.ascontiguousarray(ids, dtype=np.int64).tobytes()


class ReferenceLogits:
    """Per-turn reference states (hidden rows, or logits), for the turns asked for,
    under a byte budget."""

    def __init__(self) -> None:
        self._wanted: dict[str, set[bytes]] = {k: set() for k in KINDS}
        self._rows: dict[tuple[str, bytes], Any] = {}
        #: True while the LoRA loaded is the round's parent (the round start, before
        #: any step); a backend keeps ``"parent"`` rows from its forwards only then.
        self.parent_loaded = False
        self.hits = 0
        #: Bytes the wanted rows take (fp32), for the round's log.
        self.planned_bytes = 0

    def want(self, id_rows: Sequence[np.ndarray], kinds: Sequence[str], width: int,
             budget: int | None = None) -> int:
        """Keep the rows of these turns (in order, while the budget lasts); how many.
        ``width``: values a position keeps (the hidden size, or the vocabulary)."""
        budget = budget_bytes() if budget is None else budget
        per_token = 4 * max(int(width), 1) * len(kinds)
        used, taken = 0, 0
        for ids in id_rows:
            size = (len(ids) - 1) * per_token
            if used + size > budget:
                break
            used += size
            taken += 1
            for kind in kinds:
                self._wanted[kind].add(row_key(ids))
        self.planned_bytes = used
        return taken

    def keep(self, kind: str, batch: Any, states: Any,
             take: Callable[[Any, int, int], Any], *, parent_loaded: bool | None = None
             ) -> None:
        """Keep the wanted rows of ``states`` (B, W-1, X: the positions that predict the
        next token). ``take(states, row, n)`` copies one row's first ``n`` positions.
        ``parent_loaded``: the caller knows the parent's LoRA made these states
        (default: :attr:`parent_loaded`)."""
        loaded = self.parent_loaded if parent_loaded is None else parent_loaded
        if kind == "parent" and not loaded:
            return
        for r, ids in enumerate(_rows_of(batch)):
            key = row_key(ids)
            if key in self._wanted[kind] and (kind, key) not in self._rows:
                self._rows[(kind, key)] = take(states, r, len(ids) - 1)

    def lookup(self, kind: str, batch: Any) -> list[Any] | None:
        """Each row's kept states ((L_r - 1, X)), or None unless every row is kept."""
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
