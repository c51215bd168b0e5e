"""The settings window on a Linux desktop whose Python has no gi: one sentence, no traceback.

Bug pinned (issue 22): pywebview's own backend probe logged a full traceback for
GTK and another for Qt every time the settings opened from a venv without
PyGObject, before our browser fallback said anything. Real parts: the window
process, its browser fallback (a recording script as $BROWSER); gi is hidden by
a package of that name that fails to import, as it does in a venv without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="gi is the Linux backend")
def test_no_gi_opens_the_browser_with_one_sentence_naming_the_packages(tmp_path: Path) -> None:
    hidden = tmp_path / "hide" / "gi"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'gi'\")\n")
    record, browser = tmp_path / "opened.txt", tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" >> {record}\n')
    browser.chmod(0o755)
    env = {**os.environ, "DISPLAY": ":0", "BROWSER": str(browser),
           "PYTHONPATH": str(hidden.parent)}  # fmt: skip
    env.pop("WAYLAND_DISPLAY", None)
    request = json.dumps({"url": "http://127.0.0.1:1/launch/abc", "redirect_dir": str(tmp_path)})
    done = subprocess.run([sys.executable, "-m", "rltray.web.window"], input=request + "\n",
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("rltray: no webview backend (GTK WebKit is not available"), line
    assert "sudo apt install python3-gi gir1.2-webkit2-4.1" in line
    assert record.read_text().strip().endswith(".html")
