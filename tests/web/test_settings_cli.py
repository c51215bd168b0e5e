"""`rltray settings|setup [--print-url]` as processes, with and without a running rltray, and
`python -m rltray.web.window` (URL on stdin) falling back to the browser without a webview."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path

from tests.app.test_serve import start_serve, wait_for_endpoint
from tests.web.webtesting import url_in_redirect_page

URL = re.compile(r"^http://127\.0\.0\.1:\d+/launch/[\w-]+$")


def open_launch(url: str) -> tuple[str, str]:
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    with opener.open(url, timeout=15) as page:
        return page.url, page.read().decode()


def test_print_url_without_a_running_rltray_serves_until_ctrl_c(rltray_home: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rltray.app.cli", "settings", "--print-url"],
        env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = proc.stdout.readline().strip()
        assert URL.match(url), url
        landed, html = open_launch(url)
        assert landed.endswith("/") and "<title>Dashboard · rltray</title>" in html
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
        assert "Ctrl+C stops it" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_print_url_asks_the_running_rltray(rltray_home: Path) -> None:
    env = dict(os.environ)
    serve = start_serve(env)
    try:
        wait_for_endpoint(rltray_home, serve)
        done = subprocess.run(
            [sys.executable, "-m", "rltray.app.cli", "setup", "--print-url"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        url = done.stdout.strip()
        assert URL.match(url), url
        landed, html = open_launch(url)  # served by the running rltray after this CLI exited
        assert landed.endswith("/setup") and "<title>Setup · rltray</title>" in html
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)


def test_window_without_a_webview_opens_the_browser_and_says_so_once(tmp_path: Path) -> None:
    record = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" >> {record}\n')
    browser.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["BROWSER"] = str(browser)
    env["PYWEBVIEW_GUI"] = "gtk"
    url = "http://127.0.0.1:1/launch/abc"
    request = json.dumps({"url": url, "redirect_dir": str(tmp_path / "launch")}) + "\n"
    done = subprocess.run([sys.executable, "-m", "rltray.web.window"], input=request,
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("rltray:")]
    assert len(lines) == 1 and "no webview backend" in lines[0]
    assert "opened the settings in your default browser" in lines[0]
    (opened,) = record.read_text().split()
    assert url_in_redirect_page(opened) == url
    for argv, given in (([url], ""), ([], '{"url": "http://evil.example/"}\n'), ([], "junk")):
        usage = subprocess.run([sys.executable, "-m", "rltray.web.window", *argv], input=given,
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert usage.returncode == 2 and "usage:" in usage.stderr, (argv, given)
