"""What a finished round means, in words: the gate's verdict, a failure's cause, the failure budget.

Why one module: `rltray train --wait`, `rltray runs`, the tray, `rltray status`
and the dashboard all tell the user how a round ended, and they must say the
same thing (issue 20 items 12 and 13: a rejected round once printed "done:
done" because one face read a key nothing wrote). Everything here is a pure
function of a run as ``Service.runs()`` gives it (``status``, ``metrics``,
``error``, ``adapter_version``), except :func:`budget_stop`, which also reads
the run's ``trainer.log``.

The keys read are the ones the runner records (app/training/versions.py
``apply_result`` merges the trainer's ``done`` line into the run's metrics):
``accepted``, ``reasons``, ``preference``, ``gate_notes``, and the runner's own
``kept_as`` / ``parent_version`` / ``active_before`` / ``new_line`` / ``base_now`` and
``skipped`` (the trainer's ``skipped`` lines, one entry per example). The
gate's own sentences (reasons, notes) are shown as written, so a change in how the
trainer judges needs no change here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rltray.app.training.jobbuild import MIN_HELDOUT_PER_CLASS

#: Failed or rejected rounds in a row after which the scheduler stops starting rounds
#: (STYLE habit 6: bounded retries); *Train now* starts counting again.
FAILURE_BUDGET = 3
LOG_TAIL_LINES = 15

_PREFERENCE = {
    "better": "measurably better",
    "unchanged": "not measurably worse; no measurable change on the held-out ratings",
}


_NO_ERROR = {
    "paused": "paused at its checkpoint; `rltray train` resumes it",
    "running": "still training",
    "queued": "waiting to start",
}


def _metrics(run: Mapping[str, Any]) -> Mapping[str, Any]:
    m = run.get("metrics")
    return m if isinstance(m, Mapping) else {}


def accepted(run: Mapping[str, Any]) -> bool:
    """The gate accepted the round's adapter (whether or not it was made active)."""
    m = _metrics(run)
    if run.get("status") != "done":
        return False
    return bool(m.get("accepted", run.get("adapter_version") is not None))


def rejected(run: Mapping[str, Any]) -> bool:
    """The round finished and the gate said no: nothing was registered."""
    return run.get("status") == "done" and not accepted(run)


def verdict(run: Mapping[str, Any]) -> str:
    """The gate's verdict in one phrase: "measurably better", "rejected: …", and so on."""
    m = _metrics(run)
    if rejected(run):
        reasons = [str(r) for r in m.get("reasons") or []]
        return "rejected: " + ("; ".join(reasons) or "the gate gave no reason")
    pref = m.get("preference")
    if pref in _PREFERENCE:
        return _PREFERENCE[str(pref)]
    if pref == "unmeasured":
        good, bad = m.get("heldout_good"), m.get("heldout_bad")
        few = not isinstance(good, int) or not isinstance(bad, int)
        if few or min(good, bad) < MIN_HELDOUT_PER_CLASS:
            return "not measurably worse; too few held-out ratings to tell"
        return "not measurably worse; the held-out preference was not measured"
    if pref:
        return f"not measurably worse (held-out preference: {pref})"
    return "not measurably worse"


def gate_notes(run: Mapping[str, Any]) -> list[str]:
    """The gate's notes (what it measured and how), as the trainer wrote them."""
    notes = _metrics(run).get("gate_notes") or []
    return [str(n) for n in notes] if isinstance(notes, list) else [str(notes)]


def cause(run: Mapping[str, Any]) -> str:
    """Why a round did not give a version, in one line ('' for one that did).

    A failed run's error starts with what the trainer said (its ``error`` line
    or its exit code) and goes on with the log tail; the first line is the cause.
    """
    if run.get("status") == "done":
        return verdict(run) if rejected(run) else ""
    lines = (run.get("error") or "").strip().splitlines()
    if lines:
        return lines[0].strip()
    return _NO_ERROR.get(str(run.get("status")), str(run.get("status")))


def summary(run: Mapping[str, Any]) -> str:
    """One cell for `rltray runs`: the verdict of a finished round, else its cause; and
    the ratings the trainer skipped, if it skipped any."""
    if run.get("status") == "done":
        text = verdict(run)
        m = _metrics(run)
        if accepted(run) and m.get("kept_as") == "candidate":
            text += "; kept as a candidate, not made active"
        said = skipped_phrase(m)
        return f"{text}; {said}" if said else text
    return cause(run)


#: Skipped ratings a run's notes name one by one; the rest are counted.
SKIPPED_NAMED = 10


def skipped(metrics: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The examples the trainer skipped, as the runner records its ``skipped`` lines in a
    run's metrics: ``{"rating": 12 | None, "id": "rating-12", "set": "training" |
    "held-out", "reason": "example rating-12: the prompt alone is …"}``."""
    found = metrics.get("skipped")
    return [s for s in found if isinstance(s, Mapping)] if isinstance(found, list) else []


def _skip_why(entry: Mapping[str, Any]) -> str:
    """A skipped line's reason without the trainer's ``example <id>: `` prefix."""
    reason = str(entry.get("reason") or "no reason given")
    prefix = f"example {entry.get('id')}: "
    return reason[len(prefix):] if reason.startswith(prefix) else reason


def _skip_name(entry: Mapping[str, Any]) -> str:
    rating = entry.get("rating")
    return f"rating {rating}" if rating is not None else f"example {entry.get('id')}"


def skipped_phrase(metrics: Mapping[str, Any]) -> str:
    """How many ratings the trainer skipped and why, in one phrase ('' for none)."""
    entries = skipped(metrics)
    if not entries:
        return ""
    n = len(entries)
    first = entries[0]
    more = f"; {n - 1} more in the run's notes" if n > 1 else ""
    ratings = "1 rating" if n == 1 else f"{n} ratings"
    return f"skipped {ratings} it could not fit ({_skip_name(first)}: {_skip_why(first)}{more})"


def skipped_notes(metrics: Mapping[str, Any]) -> list[str]:
    """The run's notes on the ratings the trainer skipped: each one and why, then what
    becomes of them (app/training/versions.py ``apply_result`` adds these)."""
    entries = skipped(metrics)
    if not entries:
        return []
    notes = [
        f"the trainer skipped {_skip_name(e)} ({e.get('set') or 'training'} part): {_skip_why(e)}"
        for e in entries[:SKIPPED_NAMED]
    ]
    if len(entries) > SKIPPED_NAMED:
        notes.append(f"and {len(entries) - SKIPPED_NAMED} more skipped ratings")
    notes.append(
        "a skipped rating is neither trained on nor held out: it stays untrained, and rounds "
        "on this base model with this max_seq_len leave it out, since it would be skipped "
        "again (another base model, or the custom preset with a longer max_seq_len in "
        "[training.hyper], offers it again)"
    )
    return notes


def accepted_sentence(run: Mapping[str, Any]) -> str:
    """What an accepted round did to the versions, exactly (issue 20 item 11).

    Reads what ``adapterversions._placement`` recorded: ``kept_as``,
    ``parent_version``, ``active_before``, ``new_line`` and ``base_now`` (the model set up
    when a round of another one ended).
    """
    m = _metrics(run)
    v = run.get("adapter_version")
    before = m.get("active_before") if isinstance(m.get("active_before"), Mapping) else None
    if m.get("kept_as") == "candidate" and m.get("base_now"):
        return (
            f"version v{v} is kept as a candidate, not made active: it was trained on "
            f"{m.get('base_model')}, but training.base_model was changed to {m.get('base_now')} "
            f"while it trained, and it is never served on a model it was not judged on (set "
            f"training.base_model back to {m.get('base_model')}, then `rltray rollback {v}` "
            "makes it active)."
        )
    if m.get("kept_as") == "candidate":
        now = _name(before.get("version") if before else None)
        return (
            f"version v{v} is kept as a candidate, not made active: it was trained from "
            f"{_name(m.get('parent_version'))}, but {now} became active while it trained "
            f"(`rltray rollback {v}` makes it active)."
        )
    text = f"version v{v} is now active."
    if m.get("new_line") and before:
        text += (
            f" It starts a new line of versions on {m.get('base_model')}, trained from that "
            f"base model; v{before.get('version')} (trained on {before.get('base_model')}) "
            "is no longer served."
        )
    return text


def notice(run: Mapping[str, Any]) -> tuple[str, str] | None:
    """The desktop notification for a finished round: (title, body), None for no news.

    A round stopped or paused by the user is no news to them; everything else that
    ended is, so nobody has to open the tray to learn that a version changed.
    """
    status = run.get("status")
    if status == "done" and accepted(run):
        title = "rltray: a new version is active"
        if _metrics(run).get("kept_as") == "candidate":
            title = "rltray: a new version is kept as a candidate"
        return title, f"{accepted_sentence(run)} The gate found it {verdict(run)}."
    if status == "done":
        return "rltray: training round rejected", (
            f"{cause(run)[0].upper()}{cause(run)[1:]}. The active version stays."
        )
    if status == "failed":
        return "rltray: training failed", f"{cause(run)} (`rltray runs` has the details)."
    return None


def _name(version: Any) -> str:
    return "the base model" if version is None else f"v{version}"


def failure_streak(runs: Sequence[Mapping[str, Any]]) -> int:
    """Failed or rejected rounds in a row, newest first (``runs`` newest first).

    An accepted round ends the streak. A round started with *Train now*
    (``metrics["by_hand"]``) counts, then ends it: the user's click resets the
    budget, so only what failed since counts. Runs still going, paused or
    cancelled by the user say nothing about the trainer and are skipped.
    """
    count = 0
    for run in runs:
        status = run.get("status")
        if status == "failed" or rejected(run):
            count += 1
        elif status == "done":
            return count
        else:
            continue
        if _metrics(run).get("by_hand"):
            return count
    return count


def budget_stop(
    runs: Sequence[Mapping[str, Any]], runs_dir: Path, budget: int = FAILURE_BUDGET
) -> dict[str, Any] | None:
    """Why automatic training stopped (the streak reached ``budget``), or None.

    ``runs`` newest first. Gives the count, the newest failed round's id and
    cause, and the last lines of its trainer.log, for the tray, status and dashboard.
    """
    streak = failure_streak(runs)
    if streak < budget:
        return None
    last = next(r for r in runs if r.get("status") == "failed" or rejected(r))
    return {
        "failures": streak,
        "budget": budget,
        "run": last.get("id"),
        "cause": cause(last),
        "log_tail": log_tail(runs_dir / str(last.get("id")) / "trainer.log", LOG_TAIL_LINES),
        "message": budget_message(streak),
    }


def budget_message(streak: int) -> str:
    """The one sentence every face shows when the budget is used up."""
    return (
        f"automatic training stopped after {streak} failed or rejected rounds in a row; "
        "Train now tries again"
    )


def log_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log file ('' when there is none)."""
    from collections import deque

    try:
        with open(path, "rb") as fh:
            return b"".join(deque(fh, maxlen=lines)).decode("utf-8", "replace").rstrip()
    except OSError:
        return ""
