"""Dashboard: counts, ratings per day, ratings waiting vs the threshold, runs as chart data."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from rltray.app import config
from rltray.web.server import WebServer

from tests.web.webtesting import chromium_page, missing_chromium


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


# -- in a real browser: what the charts draw --------------------------------------------------

browser = pytest.mark.skipif(missing_chromium() is not None, reason=f"needs {missing_chromium()}")
DAY = 86400
# WebKitGTK under LANG=C / C.UTF-8 reports this; chromium never does, whatever its --lang or
# LANG, so the test puts WebKit's answer where chromium keeps the real getter
C_LANGUAGE = (
    'Object.defineProperty(Navigator.prototype, "language", {get: () => "C", configurable: true});'
)


@pytest.fixture
def server(runtime) -> Iterator[WebServer]:
    web = WebServer(runtime).start()
    yield web
    web.stop()


def chart(page: Any, node_id: str) -> dict[str, Any]:
    """The x and y ranges and the data of the uPlot chart drawn in ``#node_id``."""
    return page.evaluate(
        """(id) => { const u = document.getElementById(id).uplot;
        return {x: [u.scales.x.min, u.scales.x.max], y: [u.scales.y.min, u.scales.y.max],
                data: u.data}; }""",
        node_id,
    )


def finished_run(service, name: str, minutes: float, status: str = "done", **metrics) -> None:
    now = datetime.now(timezone.utc)
    service.store.add_run(name, at=now - timedelta(minutes=minutes))
    service.store.finish_run(name, status, at=now, metrics=metrics or None)


@browser
def test_the_charts_draw_when_the_window_says_its_language_is_c(server, service, add_turns) -> None:
    """Issue 22 item 1: WebKitGTK under LANG=C.UTF-8 says "C", the vendored uPlot threw
    "RangeError: invalid language tag: C" as it loaded, and all six charts stayed blank."""
    for turn_id in add_turns(3):
        service.store.rate(turn_id, 1, "cli")
    finished_run(service, "r1", 20, auroc_new=0.7, kl_to_base=0.01,
                 progress={"loss": 0.5, "masked_tokens": 0.1})  # fmt: skip
    with chromium_page(init_script=C_LANGUAGE) as (page, problems):
        page.goto(server.launch_url(""))
        assert page.evaluate("navigator.language") == "en-US"  # locale.js replaced the "C"
        page.wait_for_selector("#chart-duration .uplot")
        assert page.locator(".chart .uplot canvas").count() == 6
        assert problems.items == []


@browser
def test_one_day_of_ratings_and_a_failed_run_read_right(server, service, add_turns) -> None:
    """Issue 22 item 1: ratings on one day ran the axis to 2029, the y axis did not start at
    0, and a failed run plotted as a run that took no time."""
    for i, turn_id in enumerate(add_turns(3)):
        service.store.rate(turn_id, 1 if i else -1, "cli")
    finished_run(service, "r1", 90, auroc_new=0.6)  # each ends now: the longest started first
    finished_run(service, "r2", 45, "failed")
    finished_run(service, "r3", 30, auroc_new=0.7)
    with chromium_page() as (page, problems):
        page.goto(server.launch_url(""))
        page.wait_for_selector("#chart-duration .uplot")
        days = chart(page, "chart-days")
        today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        assert days["x"] == [today.timestamp() - DAY, today.timestamp() + DAY]
        assert days["y"][0] == 0 and days["y"][1] >= 2
        assert days["data"][1:] == [[2], [1]]
        duration = chart(page, "chart-duration")
        assert duration["data"][1][1] is None  # a failed run is no training's duration
        assert [round(v) for v in duration["data"][1][::2]] == [90, 30]
        assert duration["y"][0] == 0
        assert chart(page, "chart-auroc")["data"][1] == [0.6, None, 0.7]
        assert problems.items == []


@browser
def test_a_chart_with_nothing_to_draw_says_so(server, service) -> None:
    """Issue 22 item 1: runs that measured nothing drew bare axes, which read as zeros."""
    finished_run(service, "r1", 1, "failed")
    with chromium_page() as (page, problems):
        page.goto(server.launch_url(""))
        page.wait_for_selector("#chart-duration.empty")
        assert page.locator(".chart .uplot").count() == 0
        assert page.inner_text("#chart-auroc") == "No run measured its AUROC yet."
        assert page.inner_text("#chart-duration") == "No run has finished yet."
        # "base model" in use fits its tile on one line at 800 px, as tall as the numbers
        tiles = page.evaluate("[...document.querySelectorAll('.big')].map((b) => b.offsetHeight)")
        assert len(tiles) == 5 and len(set(tiles)) == 1, tiles
        assert problems.items == []


@browser
def test_the_open_dashboard_follows_new_ratings_while_it_is_visible(
    server, service, add_turns
) -> None:
    """Issue 22 item 1: the window did not refresh while open. It asks /api/dashboard every
    12 s while visible, redraws only when something changed, and asks nothing while hidden."""
    first, second = add_turns(2)
    service.store.rate(first, 1, "cli")
    with chromium_page() as (page, problems):
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url.removeprefix(server.base_url)))
        page.clock.install()
        page.goto(server.launch_url(""))
        page.wait_for_selector("#chart-days .uplot")
        asked.clear()
        page.clock.run_for(13_000)
        page.wait_for_timeout(300)
        assert asked == ["/api/dashboard"]  # nothing changed: the page is not fetched again
        service.store.rate(second, 1, "cli")
        page.clock.run_for(12_000)
        page.wait_for_selector(".tile.good .big >> text=2")
        page.wait_for_selector("#chart-days .uplot")
        assert chart(page, "chart-days")["data"][1] == [2]
        assert page.locator(".chart .uplot").count() == 1  # redrawn, not drawn twice

        asked.clear()
        page.evaluate("""() => { Object.defineProperty(document, "hidden", {value: true,
            configurable: true}); document.dispatchEvent(new Event("visibilitychange")); }""")
        page.clock.run_for(60_000)
        page.wait_for_timeout(300)
        assert asked == []
        page.evaluate("""() => { Object.defineProperty(document, "hidden", {value: false,
            configurable: true}); document.dispatchEvent(new Event("visibilitychange")); }""")
        page.wait_for_timeout(300)
        assert asked == ["/api/dashboard"]  # back in view: asked at once, not at the next tick
        assert problems.items == []
