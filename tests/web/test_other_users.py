"""Another local user must not get into the settings app (issue 18, 1): the attacks, performed.

A poller running as ``nobody`` reads every process's command line and environment
while the settings open (the attack that took the launch token 5 times out of 5),
and ``nobody`` replays a leaked cookie and a leaked API token against the real
servers. Needs root (to run the poller as ``nobody``) and Linux's /proc; skipped
with that reason elsewhere.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rltray.web.security import COOKIE
from rltray.web.server import WebServer

from tests.web.webtesting import url_in_redirect_page

# The attacker's scripts run on the system Python: the test's own interpreter may sit
# under a folder another user cannot enter (pyenv in /root, say).
SYSTEM_PYTHON = "/usr/bin/python3"


def _other_user() -> str | None:
    """Why the attack cannot be staged here, or None when it can."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"{SYSTEM_PYTHON} for the attacker's scripts"
    if not sys.platform.startswith("linux"):
        return "Linux's /proc"
    if os.geteuid() != 0:
        return "root, to run the attacker's process as the user nobody"
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return "a user named nobody"
    return None


pytestmark = pytest.mark.skipif(
    _other_user() is not None, reason=f"needs {_other_user()} (another local user to attack as)"
)

POLLER = r"""
import os, sys, time
needle, seconds = sys.argv[1], float(sys.argv[2])
found, windows, scans = set(), 0, 0
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    scans += 1
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    data = f.read().decode("utf-8", "replace")
            except OSError:
                continue
            if name == "cmdline" and "rltray.web.window" in data:
                windows += 1
            at = data.find(needle)
            if at >= 0:
                found.add(data[at:at + 80].split("\0")[0])
    time.sleep(0.002)
print(repr((sorted(found), windows, scans)))
"""


def as_nobody(argv: list[str], **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, user="nobody", group="nogroup", extra_groups=[], env={"PATH": "/usr/bin:/bin"},
        cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs,
    )  # fmt: skip


def test_a_poller_as_another_user_never_sees_the_launch_token(
    runtime, tmp_path: Path, monkeypatch
) -> None:
    tmp_path.chmod(0o755)  # the browser stand-in lives here; nobody only reads /proc
    record = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    # the browser stays up a while, as a real one does, with whatever it was given in argv
    browser.write_text(f'#!/bin/sh\necho "$1" >> {record}\nsleep 2\n')
    browser.chmod(0o755)
    monkeypatch.setenv("BROWSER", str(browser))
    monkeypatch.delenv("DISPLAY", raising=False)  # the window falls back to the browser
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    base = runtime.settings_url("").split("/launch/")[0]  # the server runs; this token unused
    poller = as_nobody([SYSTEM_PYTHON, "-c", POLLER, base + "/launch/", "8"])
    time.sleep(1.0)  # the poller is scanning before the settings open
    url = runtime.open_settings("setup")
    out, err = poller.communicate(timeout=60)
    found, windows, scans = eval(out)  # the poller's own repr of three plain values
    assert scans > 10 and windows > 0, ("the poller did not watch the window start", out, err)
    assert found == [], f"another user read the launch URL: {found}"
    (opened,) = record.read_text().split()
    assert url_in_redirect_page(opened) == url
    page = Path(opened.removeprefix("file://"))
    reader = as_nobody(["/bin/cat", str(page)])
    _out, denied = reader.communicate(timeout=30)
    assert reader.returncode != 0 and "Permission denied" in denied


CLIENT = r"""
import json, sys, urllib.request, urllib.error
url, header, value = sys.argv[1:4]
request = urllib.request.Request(url, headers={header: value})
try:
    with urllib.request.urlopen(request, timeout=10) as r:
        print(json.dumps([r.status, r.read().decode()[:200]]))
except urllib.error.HTTPError as e:
    print(json.dumps([e.code, e.read().decode()[:300]]))
"""


def _get_as(user: str | None, url: str, header: str, value: str) -> tuple[int, str]:
    argv = [SYSTEM_PYTHON, "-c", CLIENT, url, header, value]
    if user is None:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        out = done.stdout
    else:
        proc = as_nobody(argv)
        out, _err = proc.communicate(timeout=60)
    status, body = json.loads(out)
    return status, body


def test_a_leaked_cookie_or_api_token_does_not_serve_another_user(
    service, runtime, start_runtime
) -> None:
    """Defence in depth: even holding the secret, another user's socket is refused."""
    server = WebServer(runtime).start()
    try:
        sid = server.guard.open_session()
        cookie = f"{COOKIE}={sid}"
        url = server.base_url + "/api/dashboard"
        assert _get_as(None, url, "Cookie", cookie)[0] == 200  # the owner, same cookie
        status, body = _get_as("nobody", url, "Cookie", cookie)
        assert status == 403 and "another user" in json.loads(body)["error"]["message"]
    finally:
        server.stop()
    from rltray.app.api.client import ApiClient

    running = start_runtime(service)
    try:
        client = ApiClient.find(service.paths)
        assert client is not None
        url = f"http://127.0.0.1:{client.port}/api/status"
        token = client.token
        assert _get_as(None, url, "Authorization", f"Bearer {token}")[0] == 200
        assert _get_as("nobody", url, "Authorization", f"Bearer {token}")[0] == 403
    finally:
        running.close()


ATTACKER = r"""
import json, socket, struct, sys
port, cookie, csrf = int(sys.argv[1]), sys.argv[2], sys.argv[3]

def send(method, path, src=None, reset=False):
    s = socket.socket()
    s.settimeout(10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if src:
        s.bind((src, port))  # the source port is the server's own port
    s.connect(("127.0.0.1", port))
    s.sendall((f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n"
               f"X-CSRF-Token: {csrf}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").encode())
    if reset:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        return None
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return int(data.split()[1])

spoofed = [send("GET", "/api/dashboard", src=f"127.0.0.{n}") for n in range(2, 42)]
for _ in range(20):
    send("POST", "/api/pause", reset=True)
print(json.dumps({"spoofed": spoofed, "plain": send("POST", "/api/pause")}))
"""


def test_another_user_spoofing_the_server_port_or_resetting_after_sending_is_refused(
    runtime,
) -> None:
    """Security review, two bypasses of the socket-owner check, performed as ``nobody``.

    A1: a client bound to 127.0.0.N:<server port> was taken for the server's user (the
    server's own accepted socket has the same two ports and came first in /proc/net/tcp).
    A2: a POST whose client reset the connection at once (SO_LINGER 0) left no row to look
    up, and "unknown" was served: it paused the owner's automatic training.
    """
    server = WebServer(runtime).start()
    try:
        sid = server.guard.open_session()
        assert runtime.status()["training"]["automatic"] is True
        attacker = as_nobody(
            [SYSTEM_PYTHON, "-c", ATTACKER, str(server.port), f"{COOKIE}={sid}",
             server.guard.csrf_for(sid)]
        )  # fmt: skip
        out, err = attacker.communicate(timeout=120)
        assert attacker.returncode == 0, err
        result = json.loads(out)
        time.sleep(1.0)  # the server has read every reset request and looked it up
        assert result["spoofed"] == [403] * 40
        assert result["plain"] == 403
        assert runtime.status()["training"]["automatic"] is True  # no reset POST was served
    finally:
        server.stop()
