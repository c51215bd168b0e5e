"""pywebview smoke test: the real window (GTK WebKit under Xvfb) loads the page and reads its title.

Skips naming exactly what is missing: xvfb-run, PyGObject (``gi``), or the
WebKit2 4.1 typelib (Debian ``gir1.2-webkit2-4.1``; `make test` installs them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rltray.web.server import WebServer

DRIVER = """
import sys
import time
from rltray.web import window

def drive(win):
    try:
        if not win.events.loaded.wait(60):
            print("NOT LOADED", flush=True)
            return
        # run_js, not evaluate_js: evaluate_js wraps the code in eval(), which the page's CSP
        # (script-src 'self', no unsafe-eval) refuses, as it should
        print("TITLE", win.run_js("document.title"), flush=True)
        print("HEADING", win.run_js("document.querySelector('h1').textContent"), flush=True)
        for _ in range(50):  # the charts draw after the page's scripts ran
            if win.run_js("document.querySelectorAll('.chart .uplot').length") == 6:
                break
            time.sleep(0.2)
        print("CHARTS", win.run_js("String(document.querySelectorAll('.chart .uplot').length)"),
              flush=True)
        print("LANGUAGE", win.run_js("navigator.language"), flush=True)
    finally:
        win.destroy()

window.show(sys.argv[1], drive)
"""


def missing_window() -> str | None:
    """What showing the real window lacks here (a sentence naming how to get it), or None."""
    if shutil.which("xvfb-run") is None:
        return "xvfb-run (Debian package xvfb)"
    probe = subprocess.run(
        [sys.executable, "-c",
         "import gi; gi.require_version('Gtk', '3.0'); gi.require_version('WebKit2', '4.1')"],
        capture_output=True, text=True,
    )  # fmt: skip
    if probe.returncode != 0:
        if "No module named 'gi'" in probe.stderr:
            return "PyGObject in this environment (pip install 'pygobject<3.51')"
        return "the WebKit2 4.1 typelib (Debian package gir1.2-webkit2-4.1)"
    return None


@pytest.mark.slow
def test_pywebview_shows_the_dashboard_and_its_charts_under_a_c_locale(
    runtime, service, tmp_path: Path
) -> None:
    """Issue 22 item 1: under LANG=C.UTF-8 WebKitGTK reports the language "C", the vendored
    uPlot threw "RangeError: invalid language tag: C" as it loaded, and the six charts stayed
    blank (chromium, which the other browser tests use, never reports "C")."""
    missing = missing_window()
    if missing:
        pytest.skip(f"needs {missing}")
    turn = {"agent": "codex", "session": "s", "turn": "1", "prompt": "hi", "response": "hi"}
    turn_id = service.store.add_turn(turn)[0]
    service.store.rate(turn_id, 1, "cli")
    service.store.add_run("r1")
    service.store.finish_run("r1", "done", metrics={"auroc_new": 0.7, "kl_to_base": 0.01,
                             "progress": {"loss": 0.5, "masked_tokens": 0.1}})  # fmt: skip
    server = WebServer(runtime).start()
    driver = tmp_path / "drive.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYWEBVIEW_GUI": "gtk", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
           "LC_ALL": "C.UTF-8"}  # fmt: skip
    env.pop("LANGUAGE", None)
    try:
        done = subprocess.run(
            ["xvfb-run", "-a", "-s", "-screen 0 1024x768x24", sys.executable, str(driver),
             server.launch_url("")],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        server.stop()
    out = done.stdout
    assert "TITLE Dashboard · rltray" in out, (out, done.stderr[-2000:])
    assert "HEADING Dashboard" in out
    assert "CHARTS 6" in out, (out, done.stderr[-2000:])
    assert "LANGUAGE en-US" in out  # WebKit said "C"; static/locale.js put en-US in its place
