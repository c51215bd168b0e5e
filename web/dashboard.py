"""Dashboard: what rltray learned — ratings per day, ratings waiting vs the threshold, runs.

The page carries its chart data as JSON inside the HTML (one request paints
it; bench/dashboard_paint.py measures that request), and static/dashboard.js
draws it with the vendored uPlot. Every number comes from grouped SQL, never
from loading all turns, so the page stays fast with many thousands of them.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from flask import Blueprint, jsonify, render_template
from rltray.web.state import state

bp = Blueprint("dashboard", __name__)
DAYS = 90
RUNS = 50


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_row(run: Any) -> dict[str, Any]:
    """One training run as the charts read it (None where the run did not measure it)."""
    metrics = run.metrics if isinstance(run.metrics, dict) else {}
    progress = metrics.get("progress") if isinstance(metrics.get("progress"), dict) else {}
    return {
        "id": run.id,
        "status": run.status,
        "started_at": run.started_at,
        "version": run.adapter_version,
        "accepted": metrics.get("accepted"),
        "duration_s": _seconds(run.started_at, run.finished_at),
        "loss": _num(progress.get("loss")),
        "masked": _num(progress.get("masked_tokens")),
        "kl": _num(metrics.get("kl_to_base")),
        "auroc": _num(metrics.get("auroc_new")),
    }


def summary() -> dict[str, Any]:
    """Everything the dashboard shows, as plain data (also served as JSON)."""

    service = state().service
    store = service.store
    counts = store.counts()
    threshold = service.settings().training.min_ratings
    since = (datetime.now(timezone.utc) - timedelta(days=DAYS)).date().isoformat()
    days = store.ratings_per_day(since=since)
    runs = [run_row(r) for r in reversed(store.list_runs(limit=RUNS))]
    return {
        "counts": {k: counts[k] for k in ("turns", "good", "bad", "unrated", "untrained")},
        "threshold": threshold,
        "training": state().runtime.training_status(),
        "per_day": {
            "day": [d for d, _, _ in days],
            "good": [g for _, g, _ in days],
            "bad": [b for _, _, b in days],
        },
        "runs": runs,
        "events": store.events(limit=8),
    }


@bp.get("/")
def page() -> Any:
    data = summary()
    return render_template("dashboard.html", data=data)


@bp.get("/api/dashboard")
def api() -> Any:
    """Everything the dashboard shows: counts, ratings per day, runs, recent events."""
    return jsonify(summary())
