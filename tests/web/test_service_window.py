"""Runtime.open_settings / settings_url: one web server per Runtime, stopped with it."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.web.webtesting import url_in_redirect_page


def opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))


def test_settings_url_starts_one_server_and_close_stops_it(runtime) -> None:
    first = runtime.settings_url("")
    second = runtime.settings_url("setup")
    assert first != second and first.split("/launch/")[0] == second.split("/launch/")[0]
    base = first.split("/launch/")[0]
    with opener().open(second, timeout=10) as page:
        assert page.url == base + "/setup"
    runtime.stop_web()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(base + "/launch/x", timeout=5)


def test_open_settings_spawns_the_window_process(
    service, runtime, tmp_path: Path, monkeypatch
) -> None:
    record = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" >> {record}\n')
    browser.chmod(0o755)
    monkeypatch.setenv("BROWSER", str(browser))
    monkeypatch.delenv("DISPLAY", raising=False)  # no display here: the window falls back
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    url = runtime.open_settings("setup")
    deadline = time.monotonic() + 60
    while not record.exists():
        assert time.monotonic() < deadline, "the window process never handed the URL on"
        time.sleep(0.1)
    (opened,) = record.read_text().split()
    assert url not in opened and url_in_redirect_page(opened) == url  # argv holds a path only
    assert Path(urlparse(opened).path).parent == service.paths.launch_pages
    with opener().open(url, timeout=10) as page:  # the token was not spent by anyone
        assert "<title>Setup · rltray</title>" in page.read().decode()
    assert os.environ["BROWSER"] == str(browser)
