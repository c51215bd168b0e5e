"""Dashboard: counts, ratings per day, ratings waiting vs the threshold, runs as chart data."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from rltray.app import config


def test_numbers_and_chart_data(client, add_turns, service) -> None:
    config.set_value(service.paths, "training.min_ratings", 10)
    ids = add_turns(6)
    now = datetime.now(timezone.utc)
    for i, turn_id in enumerate(ids[:5]):
        service.store.rate(turn_id, 1 if i % 2 == 0 else -1, "cli", at=now - timedelta(days=i % 2))
    service.store.add_run("r1", at=now - timedelta(hours=2))
    service.store.finish_run("r1", "done", adapter_version=None, at=now - timedelta(hours=1),
                             metrics={"auroc_new": 0.75, "kl_to_base": 0.02, "accepted": False,
                                      "progress": {"loss": 0.5, "masked_tokens": 0.1}})  # fmt: skip
    data = client.get("/api/dashboard").get_json()
    assert data["counts"] == {"turns": 6, "good": 3, "bad": 2, "unrated": 1, "untrained": 5}
    assert data["threshold"] == 10
    assert sum(data["per_day"]["good"]) == 3 and sum(data["per_day"]["bad"]) == 2
    assert len(data["per_day"]["day"]) == 2
    (run,) = data["runs"]
    assert run == {**run, "auroc": 0.75, "kl": 0.02, "loss": 0.5, "masked": 0.1,
                   "duration_s": 3600.0, "accepted": False}  # fmt: skip
    page = client.get("/").data.decode()
    assert "<title>Dashboard · rltray</title>" in page
    assert "<strong>5</strong> of 10 new ratings" in page
    assert 'id="chart-days"' in page and 'id="chart-auroc"' in page
    assert "vendor/uPlot.iife.min.js" in page and "cdn" not in page.lower()
    assert client.get("/static/vendor/uPlot.iife.min.js").status_code == 200


def test_empty_dashboard_explains_itself(client) -> None:
    page = client.get("/").data.decode()
    assert "No ratings in the last 90 days" in page and "No training runs yet" in page


def test_the_dashboard_says_why_automatic_training_stopped(client, service) -> None:
    """Issue 20 item 13: after 3 failed rounds in a row the page shows why, with the log tail."""
    page = client.get("/").data.decode()
    assert "Automatic training stopped" not in page
    for i in range(3):
        service.store.add_run(f"r{i}")
        service.store.finish_run(f"r{i}", "failed", error=f"the trainer broke <{i}>\nlog")
    (service.paths.runs / "r2").mkdir(parents=True)
    (service.paths.runs / "r2" / "trainer.log").write_text("ImportError: no module <torch>\n")
    page = client.get("/").data.decode()
    assert "Automatic training stopped" in page
    assert "stopped after 3 failed or rejected rounds in a row" in page
    assert "the trainer broke &lt;2&gt;" in page  # escaped: the error is the trainer's text
    assert '<pre class="log">ImportError: no module &lt;torch&gt;</pre>' in page
