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
    finally:
        win.destroy()

window.show(sys.argv[1], drive)
"""


def _missing() -> str | None:
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
def test_pywebview_shows_the_page_and_its_title(runtime, tmp_path: Path) -> None:
    missing = _missing()
    if missing:
        pytest.skip(f"needs {missing}")
    server = WebServer(runtime).start()
    driver = tmp_path / "drive.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYWEBVIEW_GUI": "gtk", "TMPDIR": "/tmp"}
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
