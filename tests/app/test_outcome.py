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


def test_a_round_that_skipped_ratings_says_how_many_and_why() -> None:
    """Regression (review 2 r4): nothing `rltray runs` or the run's notes said named a
    rating the trainer skipped (a prompt longer than max_seq_len): it was lost silently."""
    why = "the prompt alone is 812 tokens, so no response token fits in max_seq_len 96"
    skipped = [
        {"rating": 1, "id": "rating-1", "set": "training", "reason": f"example rating-1: {why}"},
        {"rating": 16, "id": "rating-16", "set": "held-out",
         "reason": "example rating-16: the response has no tokens after the chat template"},
    ]  # fmt: skip
    run = done(True, preference="better", skipped=skipped)
    assert outcome.summary(run) == (
        f"measurably better; skipped 2 ratings it could not fit (rating 1: {why}; 1 more in "
        "the run's notes)"
    )
    one = done(False, reasons=["too far"], skipped=skipped[:1])
    assert outcome.summary(one) == (
        f"rejected: too far; skipped 1 rating it could not fit (rating 1: {why})"
    )
    notes = outcome.skipped_notes(run["metrics"])
    assert notes[:2] == [
        f"the trainer skipped rating 1 (training part): {why}",
        "the trainer skipped rating 16 (held-out part): the response has no tokens after the "
        "chat template",
    ]
    assert notes[2].startswith("a skipped rating is neither trained on nor held out: it stays "
                               "untrained, and rounds on this base model with this max_seq_len "
                               "leave it out")  # fmt: skip
    many = [{**skipped[0], "rating": i, "id": f"rating-{i}"} for i in range(12)]
    assert outcome.skipped_notes({"skipped": many})[10] == "and 2 more skipped ratings"
    assert outcome.summary(done(True, preference="better")) == "measurably better"
    assert outcome.skipped_notes({}) == [] and outcome.skipped_phrase({"skipped": "x"}) == ""


def test_a_round_cancelled_because_its_ratings_changed_says_so() -> None:
    """Review 2 r2: the reason a round whose ratings changed while it trained was cancelled
    is what `rltray runs` shows, and the user who changed them gets no notification."""
    error = ("ratings changed while it trained: 2 of its ratings were reversed, withdrawn or "
             "deleted since it started; a new round will train on what you said now")  # fmt: skip
    run = {"status": "cancelled", "metrics": {"accepted": None}, "error": error}
    assert outcome.summary(run) == outcome.cause(run) == error
    assert outcome.notice(run) is None and outcome.failure_streak([run]) == 0
