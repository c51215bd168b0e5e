"""The drift guard: when a round measures its drift, where it stops, which step it keeps.

A round's drift grows about with the square of the steps taken, and an exact KL
measurement costs forwards, so :class:`Guard` measures a few turns of both classes
of the drift set (:class:`.drift.DriftSet`) every few steps while the drift is far
below its line and after every step once it nears it; :class:`Lines` is where it
stops each capped drift (the round's own caps and the rest of the line's total
budget); on a stop it keeps the newest step measured within the lines. Its whole
state goes into the checkpoint, so a paused round resumes bit-identically. Kept
apart from :mod:`.drift` (what drift is and how it is measured) because this is a
policy about *when*, with its own tests (``tests/trainer/test_drift_guard.py``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from rltray.trainer.drift import DriftSet, Measured

#: The drift guard stops at this share of each cap's room (:class:`Lines`). It measures
#: a few turns of the drift set, the gate all of them: on SmolLM2 an aggressive round
#: stopped by the guard at 0.104 on 8 turns kept a step that measured 0.101 on all 16
#: and was rejected.
GUARD_MARGIN = 0.8


#: Each drift the caps hold: (its key, the cap's hyper field, where, against what).
CAPPED = (
    ("kl_round", "kl_cap", "the held-out answers", "the parent"),
    ("kl_total", "kl_cap_total", "the held-out answers", "the base"),
    ("kl_round_general", "kl_cap", "the prompt text", "the parent"),
    ("kl_total_general", "kl_cap_total", "the prompt text", "the base"),
)

#: The drifts whose cap holds all versions since the base, not one round.
TOTALS = ("kl_total", "kl_total_general")


@dataclass(frozen=True)
class Lines:
    """Where the guard stops each capped drift, given where the round started it.

    A round's own drift (to the parent) starts at 0: its line is ``GUARD_MARGIN``
    x its cap. Drift to the base starts where the parent left it. The margin
    covers the guard measuring a few turns where the gate measures all, an error
    in what *this round* adds; on the whole cap it put the line at 0.48 of a 0.6
    cap while the gate accepts a parent up to 0.6, so a parent in between had
    every round's first step undone, round after round. So the margin applies to
    the room the parent left: ``start + GUARD_MARGIN x (cap - start)``. A parent at
    or past the cap leaves no room: the line is the cap itself.
    """

    start: dict[str, float]
    line: dict[str, float]
    cap: dict[str, float]

    @classmethod
    def of(cls, hyper: Any, parent: Mapping[str, float] | None = None) -> Lines:
        """The lines of a round whose parent measured ``parent`` (``None``: the base)."""
        start, line, caps = {}, {}, {}
        for key, cap_name, _where, _against in CAPPED:
            cap = float(getattr(hyper, cap_name))
            at = float((parent or {}).get(key, 0.0)) if key in TOTALS else 0.0
            start[key], caps[key] = at, cap
            line[key] = at + GUARD_MARGIN * (cap - at) if at < cap else cap
        return cls(start, line, caps)

    def over(self, drift: Mapping[str, float]) -> list[str]:
        """The keys of ``drift`` past their line (NaN counts as past)."""
        return [key for key, *_ in CAPPED if not drift[key] <= self.line[key]]

    def why(self, drift: Mapping[str, float]) -> str | None:
        """A sentence for the first drift past its line, else None."""
        over = self.over(drift)
        for key, _cap_name, where, against in CAPPED:
            if key not in over:
                continue
            at, cap, line = self.start[key], self.cap[key], self.line[key]
            if at <= 0.0:
                limit = f"{GUARD_MARGIN:g} x the {cap:g} cap"
            elif at < cap:
                limit = (f"the guard's line {line:.4g} (the parent's {at:.4g} plus "
                         f"{GUARD_MARGIN:g} x the {cap - at:.4g} left under the {cap:g} cap)")
            else:
                limit = f"the {cap:g} cap, which the parent had already reached ({at:.4g})"
            return f"KL to {against} on {where} {drift[key]:.4g} passed {limit}"
        return None

    def share(self, drift: Mapping[str, float]) -> float:
        """The largest drift's share of the way from its start to its line; NaN -> inf."""
        worst = 0.0
        for key, *_ in CAPPED:
            room = self.line[key] - self.start[key]
            share = (drift[key] - self.start[key]) / room if room > 0 else float("inf")
            worst = max(worst, share) if share == share else float("inf")
        return worst


#: The LoRA snapshots the guard may go back to stay under this many bytes: on a 7B
#: model a rank-16 snapshot is ~160 MB, so the gap between measurements shrinks there.
SNAPSHOT_BUDGET_BYTES = 256 * 2**20


def steps_to_next_check(share: float, step: int, most: int) -> int:
    """Optimizer steps until the guard measures again.

    Within a round the LoRA moves about the same distance each step and KL is
    quadratic in a small move, so drift at share ``r`` of the line after ``step``
    steps reaches the line near step ``step / sqrt(r)``. The guard measures again
    half-way there, and every step once a quarter of the line is used. Growth that
    beats the projection costs only the steps since the last good measurement
    (:meth:`Guard.check` walks back to the newest step within the line).
    """
    if most <= 1 or share >= 0.25:
        return 1
    if share <= 0:
        return most
    return max(1, min(most, int(step * (share ** -0.5 - 1) / 2)))


class Guard:
    """The drift guard within one round: when to measure, and where to go back to.

    Measuring after every step cost up to 2.4x the step on MLX and a fifth of a
    torch round; far below the line it measures every few steps instead, keeping a
    LoRA snapshot of each unmeasured step, so a stop still keeps the newest step
    whose measured drift is within the line. The weights a round starts from count
    as within it (the parent: no drift this round). :meth:`state` / :meth:`restore`
    carry all of this through a pause, so a resumed round guards exactly as an
    unpaused one (a checkpoint of an older trainer has none: the starting weights
    are then measured like any snapshot when the guard has to walk back to them).
    """

    def __init__(self, drift: DriftSet, backend: Any, hyper: Any, pad_id: int,
                 start_step: int) -> None:
        self.drift, self.backend, self.hyper, self.pad_id = drift, backend, hyper, pad_id
        self.turns = int(getattr(hyper, "guard_turns", 4))
        self.most = max(1, int(getattr(hyper, "guard_max_gap", 4)))
        self.lines = Lines.of(hyper)
        self._snapshots: list[tuple[int, dict[str, np.ndarray], bool]] = []
        self._known_good = start_step if start_step == 0 else None
        self._good_sums: Measured | None = None  # the known-good step's measurement
        self._due = start_step + 1
        self._undone_all = False  # a stop walked back to the round's start (step 0)
        #: The guard's measurement of the weights loaded now (None once they change):
        #: the gate's final measurement reuses it for the turns it covers.
        self.current: Measured | None = None
        #: The drifts past their line at the guard's stop (empty: it did not stop).
        self.stopped_on: list[str] = []
        #: Measurements an estimate from sampled positions settled (:meth:`_measure`).
        self.estimated = 0
        # the gate scores held-out turns from the same forward, so keep their rows
        self._rows = drift.which == "held-out"

    def begin(self) -> dict[str, float] | None:
        """Measure the parent on the guard's turns before a fresh round's first step:
        its drift to the base is where the total lines start (:class:`Lines`). A
        first round's parent is the base (drift 0): nothing to measure, None."""
        if self.turns <= 0 or self.drift.parent is None:
            return None
        measured = self._measure()
        self.lines = Lines.of(self.hyper, measured)
        self._good_sums = self.current = self.drift.last
        return measured

    def remember(self, step: int) -> None:
        """Snapshot the weights of ``step`` (called before the next optimizer step)."""
        self.current = None  # the step about to run changes the weights
        if self.turns <= 0:
            return
        lora = self.backend.lora_state()
        self._snapshots.append((step, lora, step == self._known_good))
        size = sum(int(v.nbytes) for v in lora.values())
        self.most = max(1, min(self.most, SNAPSHOT_BUDGET_BYTES // max(size, 1)))

    def check(self, step: int, last: bool
              ) -> tuple[dict[str, float] | None, tuple[int, str] | None]:
        """Measure when due (always after the round's last step).

        Returns the measurement (``None`` when not due) and, when it passed the
        line, ``(step kept, why)`` with the kept step's weights already loaded.
        """
        if self.turns <= 0 or not (last or step >= self._due):
            return None, None
        measured = self._measure(exact=last)
        why = self.lines.why(measured)
        if why is None:
            self._snapshots.clear()
            self._known_good = step
            self._good_sums = self.current = self.drift.last
            self._due = step + steps_to_next_check(self.lines.share(measured), step, self.most)
            return measured, None
        self.stopped_on = self.lines.over(measured)
        kept = self._walk_back()
        self._undone_all = kept == 0
        return measured, (kept, why)

    def budget_used_up(self) -> str | None:
        """When a stop undid every step of the round for the total caps alone: a
        sentence saying that the versions since the base used the drift budget up,
        and what the user can do; else None (no such stop, or a round cap stopped
        it: learning is still possible, at a smaller step)."""
        if not self._undone_all or any(k not in TOTALS for k in self.stopped_on):
            return None
        key = self.stopped_on[0]
        at, cap = self.lines.start[key], self.lines.cap[key]
        where = next(w for k, _c, w, _a in CAPPED if k == key)
        return (f"the drift budget of this line of versions is used up: its parent is at "
                f"KL {at:.4g} to the base on {where}, and the {cap:g} total cap "
                f"(kl_cap_total) leaves no room for even one step of this round; roll "
                f"back to an earlier version, or start a new line of versions from the "
                f"base model")

    def _measure(self, exact: bool = True) -> dict[str, float]:
        """The drift of the guard's turns now: exact, or (``exact`` False) the drift set's
        estimate from a sample of positions when even its upper bound (estimate +
        3 standard errors) is within every line; a decision near a line, the round's
        last step (the gate reuses it), the parent and every walk-back step are
        measured exactly."""
        t0 = time.monotonic()
        try:
            estimate = None if exact else getattr(self.drift, "estimate", None)
            got = estimate(self.backend, self.hyper, self.pad_id, self.turns) if estimate else None
            if got is not None and not self.lines.over(got[1]):
                self.estimated += 1
                return got[0]
            return self.drift.measure(self.backend, self.hyper, self.pad_id, self.turns,
                                      policy_rows={} if self._rows else None)
        finally:
            self.drift.seconds += time.monotonic() - t0

    def _walk_back(self) -> int:
        """Load the newest snapshot within the line (measuring the unmeasured); its step."""
        for step, lora, good in reversed(self._snapshots):
            self.backend.set_lora_state(lora)
            if good:
                self.current = self._good_sums
                return step
            if not self.lines.over(self._measure()):
                self.current = self.drift.last
                return step
        self.current = self.drift.last  # nothing passed: the oldest, for the gate to judge
        return self._snapshots[0][0]

    # ---- through a pause ------------------------------------------------------------

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """What a checkpoint holds of the guard: JSON (the schedule, the known-good
        step, the lines' start, what each snapshot is) and arrays (the snapshots'
        LoRA tensors, the measured turns' log-prob rows)."""
        arrays: dict[str, np.ndarray] = {}
        snaps = []
        for j, (step, lora, good) in enumerate(self._snapshots):
            names = sorted(lora)
            arrays.update({f"s{j}_{k}": lora[name] for k, name in enumerate(names)})
            snaps.append({"step": step, "good": good, "names": names})
        meta = {
            "v": 1, "due": self._due, "known_good": self._known_good, "most": self.most,
            "estimated": self.estimated,
            "start": {k: self.lines.start[k] for k in TOTALS}, "snapshots": snaps,
            "good": _measured_out(self._good_sums, "g", arrays),
            "current": _measured_out(self.current, "c", arrays),
        }  # fmt: skip
        return meta, arrays

    def restore(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state` as saved (the backend's weights already loaded)."""
        self._due, self._known_good, self.most = meta["due"], meta["known_good"], meta["most"]
        self.estimated = int(meta.get("estimated", 0))
        self.lines = Lines.of(self.hyper, meta["start"])
        self._snapshots = [
            (s["step"], {n: arrays[f"s{j}_{k}"] for k, n in enumerate(s["names"])}, s["good"])
            for j, s in enumerate(meta["snapshots"])
        ]
        self._good_sums = _measured_in(meta["good"], "g", arrays)
        self.current = _measured_in(meta["current"], "c", arrays)


def _measured_out(m: Measured | None, tag: str, arrays: dict[str, np.ndarray]
                  ) -> dict[str, Any] | None:
    """``m`` as JSON, its rows added to ``arrays`` under ``tag``."""
    if m is None:
        return None
    if m.rows is not None:
        arrays.update({f"{tag}_{i}": row for i, row in m.rows.items()})
    rows = None if m.rows is None else sorted(m.rows)
    return {"turns": sorted(m.turns), "sums": dict(m.sums), "rows": rows}


def _measured_in(d: Mapping[str, Any] | None, tag: str, arrays: Mapping[str, np.ndarray]
                 ) -> Measured | None:
    if d is None:
        return None
    rows = None if d["rows"] is None else {int(i): arrays[f"{tag}_{i}"] for i in d["rows"]}
    return Measured(frozenset(int(i) for i in d["turns"]), dict(d["sums"]), rows)
