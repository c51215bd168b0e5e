"""How a finished round is told: the gate's verdict, a failure's cause, the failure budget.

Runs are the dicts ``Service.runs()`` gives, with the metrics the runner records
(app/training/versions.py merges the trainer's ``done`` line into them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rltray.app.training import outcome


def done(accepted: bool = True, **metrics: Any) -> dict[str, Any]:
    return {"id": "r1", "status": "done", "adapter_version": 3 if accepted else None,
            "error": None, "metrics": {"accepted": accepted, **metrics}}  # fmt: skip


@pytest.mark.parametrize(
    ("metrics", "said"),
    [
        ({"preference": "better"}, "measurably better"),
        (
            {"preference": "unchanged"},
            "not measurably worse; no measurable change on the held-out ratings",
        ),
        (
            {"preference": "unmeasured", "heldout_good": 2, "heldout_bad": 5},
            "not measurably worse; too few held-out ratings to tell",
        ),
        (
            {"preference": "unmeasured", "heldout_good": 8, "heldout_bad": 8},
            "not measurably worse; the held-out preference was not measured",
        ),
        ({"preference": "tied"}, "not measurably worse (held-out preference: tied)"),
        ({}, "not measurably worse"),
    ],
)
def test_an_accepted_round_says_what_the_gate_measured(metrics: dict, said: str) -> None:
    assert outcome.verdict(done(True, **metrics)) == said


def test_a_rejected_round_gives_every_reason() -> None:
    """Regression (issue 20 item 12): `rltray train` printed "done: done" for a rejection."""
    run = done(False, reasons=["KL 0.2 above the 0.1 cap", "held-out AUROC worse"])
    assert outcome.verdict(run) == "rejected: KL 0.2 above the 0.1 cap; held-out AUROC worse"
    assert outcome.cause(run) == outcome.summary(run) == outcome.verdict(run)
    assert outcome.verdict(done(False)) == "rejected: the gate gave no reason"


def test_the_cause_of_a_failure_is_its_first_line() -> None:
    run = {"status": "failed", "metrics": {}, "error": "CUDA out of memory\n--- trainer.log ---\nx"}
    assert outcome.cause(run) == "CUDA out of memory"
    assert outcome.cause({"status": "paused", "metrics": {}, "error": None}).startswith("paused")


def test_candidate_and_new_line_sentences() -> None:
    kept = done(True, kept_as="candidate", parent_version=5,
                active_before={"version": 4, "base_model": "m"})  # fmt: skip
    assert outcome.accepted_sentence(kept) == (
        "version v3 is kept as a candidate, not made active: it was trained from v5, but v4 "
        "became active while it trained (`rltray rollback 3` makes it active)."
    )
    assert outcome.summary(kept).endswith("; kept as a candidate, not made active")
    line = done(True, kept_as="active", new_line=True, base_model="b",
                active_before={"version": 2, "base_model": "a"})  # fmt: skip
    assert outcome.accepted_sentence(line) == (
        "version v3 is now active. It starts a new line of versions on b, trained from that "
        "base model; v2 (trained on a) is no longer served."
    )


def test_budget_stop_names_the_newest_failure_and_its_log_tail(tmp_path: Path) -> None:
    failed = [{"id": f"r{i}", "status": "failed", "metrics": {}, "error": f"boom {i}"}
              for i in (3, 2, 1)]  # fmt: skip
    (tmp_path / "r3").mkdir()
    (tmp_path / "r3" / "trainer.log").write_text("".join(f"line {i}\n" for i in range(40)))
    assert outcome.budget_stop(failed[:2], tmp_path) is None
    stop = outcome.budget_stop(failed, tmp_path)
    assert stop is not None
    assert (stop["failures"], stop["run"], stop["cause"]) == (3, "r3", "boom 3")
    assert stop["log_tail"].splitlines() == [f"line {i}" for i in range(25, 40)]


def test_the_notice_of_a_rounds_end() -> None:
    """Issue 22: no notification said a round finished, was rejected or failed."""
    done = {"status": "done", "adapter_version": 6, "metrics": {"accepted": True,
            "preference": "better", "kept_as": "active"}}  # fmt: skip
    assert outcome.notice(done) == (
        "rltray: a new version is active",
        "version v6 is now active. The gate found it measurably better.",
    )
    rejected = {"status": "done", "metrics": {"accepted": False, "reasons": ["too much drift"]}}
    assert outcome.notice(rejected) == (
        "rltray: training round rejected",
        "Rejected: too much drift. The active version stays.",
    )
    failed = {"status": "failed", "error": "the trainer ran out of memory\nlog tail"}
    assert outcome.notice(failed) == (
        "rltray: training failed",
        "the trainer ran out of memory (`rltray runs` has the details).",
    )
    assert outcome.notice({"status": "cancelled", "error": "stopped by the user"}) is None
