"""Every page at 1280x800 and 800x600, in chromium and in the real window (issue 22, "Done means").

The pictures go to tests/web/screenshots/ (test output: that folder's .gitignore keeps them
out of git) for a person to look at; what a script can see is asserted here: no uncaught
error, no console error, no failed request (a missing /favicon.ico was one on every page),
and no page wider than its window. The real window is pywebview's GTK WebKit under Xvfb
with LANG=C.UTF-8, where WebKit reports the language "C" (the blank dashboard of issue 22).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from rltray.web.server import WebServer

from tests.web.test_adapters_page import make_versions
from tests.web.test_browser_lessons import fill_lessons
from tests.web.test_window import missing_window
from tests.web.webtesting import chromium_page, missing_chromium

SHOTS = Path(__file__).resolve().parent / "screenshots"
SIZES = ((1280, 800), (800, 600))
CLICK_FIRST_TURN = "document.querySelector('#turns tbody tr').click()"
LESSONS_READY = ".budget-bar[aria-valuenow]"  # the list is drawn and the preview loaded
WIZARD_STEPS = ("agents", "model", "backend", "preset", "schedule", "notify")


def fill(service: Any, add_turns: Any) -> None:
    """A week of ratings, tags and comments, six runs (one failed) and three versions."""
    now = datetime.now(timezone.utc)
    ids = add_turns(40)
    ids += add_turns(2, response="```python\ndef parse(rows):\n    return [r for r in rows if r]\n"
                                 "```\nThe parser now skips empty rows.")  # fmt: skip
    service.store.add_tag("ignored instructions")
    for i, turn_id in enumerate(ids[:30]):
        service.store.rate(turn_id, 1 if i % 3 else -1, "cli", at=now - timedelta(days=i % 7))
    service.store.add_tag("too long")
    for k in range(6):
        run = f"run-{k}"
        service.store.add_run(run, at=now - timedelta(days=6 - k, minutes=20 + 5 * k))
        if k == 3:
            service.store.finish_run(run, "failed", error="the trainer ran out of memory",
                                     at=now - timedelta(days=6 - k))  # fmt: skip
            continue
        service.store.finish_run(run, "done", at=now - timedelta(days=6 - k), metrics={
            "auroc_new": 0.55 + 0.05 * k, "kl_to_base": 0.01 * (k + 1), "accepted": k % 2 == 0,
            "progress": {"loss": 0.9 - 0.1 * k, "masked_tokens": 0.2 - 0.02 * k}})  # fmt: skip
    make_versions(service)


@pytest.fixture
def server(runtime, ollama, tmp_path) -> Iterator[WebServer]:
    web = WebServer(
        runtime, options={"ollama_host": ollama, "model_roots": [str(tmp_path / "models")]}
    ).start()
    yield web
    web.stop()


# -- chromium -------------------------------------------------------------------------------


def take(
    page: Any, problems: Any, name: str, title: str, status: int = 200, whole: bool = True
) -> None:
    """Check the page shown now, then save its picture as ``name``: from the top, the whole
    length (``whole``) or what the window shows (a drawer fixed to the window)."""
    assert page.title() == f"{title} · rltray", name
    width, inner = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
    assert width <= inner, f"{name}: the page is {width}px wide in a {inner}px window"
    expected = [] if status == 200 else [f"HTTP {status}: {page.url}"]
    # chromium logs a failed document load on the console too: it is the page asked for
    expected += [i for i in problems.items if i.startswith("console error: Failed to load")
                 and i.endswith(f"at {page.url}") and status != 200]  # fmt: skip
    assert problems.items == expected, name
    problems.items.clear()
    if whole:
        # from the top: a page scrolled to its focus puts the sticky header mid-picture
        page.evaluate("scrollTo(0, 0)")
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=whole)


@pytest.mark.slow
@pytest.mark.skipif(missing_chromium() is not None, reason=f"needs {missing_chromium()}")
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_page_in_chromium(server, service, add_turns, size: tuple[int, int]) -> None:
    SHOTS.mkdir(exist_ok=True)
    prefix = f"chromium-{size[0]}x{size[1]}"
    with chromium_page(size) as (page, problems):
        page.goto(server.launch_url(""))
        page.wait_for_selector("h1")
        take(page, problems, f"{prefix}-dashboard-empty", "Dashboard")
        page.goto(server.base_url + "/ratings")
        page.wait_for_selector("h1")
        take(page, problems, f"{prefix}-ratings-empty", "Ratings")
        page.goto(server.base_url + "/adapters")
        take(page, problems, f"{prefix}-adapters-empty", "Adapters")
        page.goto(server.base_url + "/lessons")
        page.wait_for_selector(LESSONS_READY)
        take(page, problems, f"{prefix}-lessons-empty", "Lessons")

        fill(service, add_turns)
        page.goto(server.base_url + "/")
        page.wait_for_selector("#chart-duration .uplot")
        take(page, problems, f"{prefix}-dashboard", "Dashboard")
        page.goto(server.base_url + "/ratings")
        page.wait_for_selector("#turns tbody tr")
        take(page, problems, f"{prefix}-ratings", "Ratings")
        page.keyboard.press("j")
        page.keyboard.press("Enter")
        page.wait_for_selector("#detail .detail-body")
        take(page, problems, f"{prefix}-turn-detail", "Ratings", whole=False)
        page.goto(server.base_url + "/adapters")
        page.wait_for_selector("#versions")
        take(page, problems, f"{prefix}-adapters", "Adapters")
        fill_lessons(service, add_turns)
        page.goto(server.base_url + "/lessons")
        page.wait_for_selector(LESSONS_READY)
        take(page, problems, f"{prefix}-lessons", "Lessons")
        page.goto(server.base_url + "/settings")
        take(page, problems, f"{prefix}-settings", "Settings")
        for step in WIZARD_STEPS:
            # a query per step: the wizard reads its step from the address as it loads, and
            # an address that differs only after # does not load the page again
            page.goto(f"{server.base_url}/setup?{step}#{step}")
            page.wait_for_selector(f"#{step}:not([hidden])")
            page.wait_for_load_state("networkidle")
            take(page, problems, f"{prefix}-wizard-{step}", "Setup")
        # a config that still names a preset the wizard no longer offers
        service.save_settings({"training.preset": "aggressive"})
        page.goto(f"{server.base_url}/setup?preset#preset")
        page.wait_for_selector("#preset:not([hidden])")
        take(page, problems, f"{prefix}-wizard-preset-retired", "Setup")
        page.goto(server.base_url + "/nowhere")
        take(page, problems, f"{prefix}-error-404", "Not found", status=404)
        page.goto(server.base_url + "/settings")
        page.click("form.signout button")
        page.wait_for_selector("h1 >> text=Signed out")
        take(page, problems, f"{prefix}-signed-out", "Signed out")
        page.goto(server.base_url + "/settings")
        take(page, problems, f"{prefix}-not-signed-in", "Not signed in", status=401)


# -- the real window: pywebview's GTK WebKit under Xvfb, LANG=C.UTF-8 -------------------------

# WebKitGTK hands console messages to no one here, so a script of the window's own (no CSP
# applies to it) runs first in every page of the window and keeps what went wrong
WATCH = """
window.rltrayErrors = [];
addEventListener("error", (e) => rltrayErrors.push(e.message
    || "failed to load " + (e.target && (e.target.src || e.target.href))), true);
addEventListener("unhandledrejection", (e) => rltrayErrors.push("unhandled: " + e.reason));
const consoleError = console.error;
console.error = (...args) => { rltrayErrors.push(args.join(" ")); consoleError(...args); };
"""


DRIVER = r"""
import json, sys, threading, time
import gi
gi.require_version("WebKit2", "4.1")
from gi.repository import Gdk, GLib, WebKit2
from webview.platforms.gtk import BrowserView
from rltray.web import window

PLAN = json.loads(open(sys.argv[2]).read())
OUT = sys.argv[3]

def on_gtk(func, seconds=30):
    # the WebKit view lives on GTK's thread; run func there and wait for its answer
    done, box = threading.Event(), []
    def call():
        func(lambda value=None: (box.append(value), done.set()))
        return False
    GLib.idle_add(call)
    if not done.wait(seconds):
        raise TimeoutError(func)
    return box[0]

def webkit(win):
    return BrowserView.instances[win.uid].webview

def watch_errors(win):
    def add(reply):
        script = WebKit2.UserScript.new(
            PLAN["watch"], WebKit2.UserContentInjectedFrames.TOP_FRAME,
            WebKit2.UserScriptInjectionTime.START, None, None)
        webkit(win).get_user_content_manager().add_script(script)
        reply()
    on_gtk(add)

def errors(win):
    return json.loads(win.run_js("JSON.stringify(window.rltrayErrors || ['errors not watched'])"))

SCREEN = [PLAN.get("screen", False)]

def grab_screen(win, path):
    # what Xvfb shows of the window, read on GTK's thread; needs no answer from WebKit
    def grab(reply):
        top = webkit(win).get_toplevel()
        size = top.get_allocation()
        Gdk.pixbuf_get_from_window(top.get_window(), 0, 0, size.width, size.height).savev(
            path, "png", [], [])
        reply()
    on_gtk(grab)

def snapshot(win, path):
    def shoot(reply):
        def finished(view, result):
            view.get_snapshot_finish(result).write_to_png(path)
            reply()
        webkit(win).get_snapshot(WebKit2.SnapshotRegion.FULL_DOCUMENT,
                                 WebKit2.SnapshotOptions.NONE, None, finished)
    if not SCREEN[0]:
        try:
            return on_gtk(shoot, seconds=20)
        except TimeoutError:
            # on CI's loaded 2-core box WebKit has let a snapshot request lie unanswered for
            # minutes though the page had painted (title, width and errors were read): from
            # here on the pictures come from the screen, the whole window but not below it
            print("SNAPSHOT FROM SCREEN", path, flush=True)
            SCREEN[0] = True
    grab_screen(win, path)

def wait_for(win, condition, seconds=20):
    end = time.time() + seconds
    while time.time() < end:
        if win.run_js(f"!!({condition})"):
            return True
        time.sleep(0.2)
    return False

def drive(win):
    try:
        if not win.events.loaded.wait(60):
            print("NOT LOADED", flush=True)
            return
        watch_errors(win)
        win.events.loaded.clear()
        win.load_url(PLAN["probe"])
        win.events.loaded.wait(30)
        win.run_js("console.error('rltray-error-probe')")
        print("PROBE", json.dumps(errors(win)), flush=True)  # the watch sees what goes wrong
        for width, height in PLAN["sizes"]:
            win.resize(width, height)
            time.sleep(0.5)
            for step in PLAN["steps"]:
                name = f"window-{width}x{height}-{step['name']}"
                print("PAGE", name, flush=True)
                if step.get("url"):
                    win.events.loaded.clear()
                    win.load_url(step["url"])
                    win.events.loaded.wait(30)
                if step.get("js"):
                    win.events.loaded.clear()
                    win.run_js(step["js"])
                    if step.get("navigates"):
                        win.events.loaded.wait(30)
                if not wait_for(win, f"document.querySelector({json.dumps(step['ready'])})"):
                    print("NOT READY", name, step["ready"], flush=True)
                time.sleep(0.3)
                print("TITLE", win.run_js("document.title"), flush=True)
                print("WIDTH", win.run_js("[document.documentElement.scrollWidth, innerWidth]"),
                      flush=True)
                print("ERRORS", json.dumps(errors(win)), flush=True)
                snapshot(win, f"{OUT}/{name}.png")
    finally:
        win.destroy()

window.show(sys.argv[1], drive)
"""


def window_plan(server: WebServer) -> dict[str, Any]:
    """What the driver shows, in order: an address or a click, then the selector that says
    the page is ready."""
    base = server.base_url

    def step(name: str, ready: str, url: str = "", js: str = "") -> dict[str, str]:
        return {"name": name, "ready": ready, "url": url and base + url, "js": js}

    steps = [
        step("dashboard", "#chart-duration .uplot", "/"),
        step("ratings", "#turns tbody tr", "/ratings"),
        step("turn-detail", "#detail .detail-body", js=CLICK_FIRST_TURN),
        step("adapters", "#versions", "/adapters"),
        step("lessons", LESSONS_READY, "/lessons"),
        step("settings", "form.settings", "/settings"),
    ]
    # a query per step: the wizard reads its step from the address as it loads, and an
    # address that differs only after # does not load the page again
    steps += [step(f"wizard-{s}", f"#{s}:not([hidden])", f"/setup?{s}#{s}") for s in WIZARD_STEPS]
    steps.append(step("error-404", "h1", "/nowhere"))
    return {"sizes": SIZES, "steps": steps, "probe": base + "/settings", "watch": WATCH}


def drive_window(server: WebServer, plan: dict[str, Any], shots: Path, tmp_path: Path):
    """Run the driver under Xvfb with ``plan``; its printed lines and a report for asserts."""
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    driver = tmp_path / "drive.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYWEBVIEW_GUI": "gtk", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
           "LC_ALL": "C.UTF-8"}  # fmt: skip
    env.pop("LANGUAGE", None)
    done = subprocess.run(
        ["xvfb-run", "-a", "-s", "-screen 0 1400x900x24", sys.executable, str(driver),
         server.launch_url(""), str(tmp_path / "plan.json"), str(shots)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = done.stdout
    report = (out[-4000:], done.stderr[-2000:])
    assert "NOT READY" not in out and "NOT LOADED" not in out, report
    return out.splitlines(), report


@pytest.mark.slow
def test_every_page_in_the_window_under_a_c_locale(server, service, add_turns, tmp_path) -> None:
    missing = missing_window()
    if missing:
        pytest.skip(f"needs {missing}")
    SHOTS.mkdir(exist_ok=True)
    fill(service, add_turns)
    fill_lessons(service, add_turns)
    lines, report = drive_window(server, window_plan(server), SHOTS, tmp_path)
    pages = [line.split()[1] for line in lines if line.startswith("PAGE ")]
    assert len(pages) == len(SIZES) * len(window_plan(server)["steps"]), report
    for line in lines:
        if line.startswith("WIDTH"):
            width, inner = json.loads(line.removeprefix("WIDTH "))
            assert width <= inner, (line, report)
    assert 'PROBE ["rltray-error-probe"]' in lines, report
    errors = [line for line in lines if line.startswith("ERRORS") and line != "ERRORS []"]
    assert errors == [], report
    for name in pages:
        assert (SHOTS / f"{name}.png").stat().st_size > 10_000, name


@pytest.mark.slow
def test_a_window_picture_from_the_screen_when_webkit_leaves_snapshots_unanswered(
    server, service, add_turns, tmp_path
) -> None:
    missing = missing_window()
    if missing:
        pytest.skip(f"needs {missing}")
    fill(service, add_turns)
    plan = window_plan(server)
    plan.update(sizes=[[800, 600]], steps=plan["steps"][:1], screen=True)
    lines, report = drive_window(server, plan, tmp_path, tmp_path)
    assert "PAGE window-800x600-dashboard" in lines, report
    png = (tmp_path / "window-800x600-dashboard.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, report
    assert struct.unpack(">II", png[16:24]) == (800, 600)
