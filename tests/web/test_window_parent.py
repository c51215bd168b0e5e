"""The settings window lives in a session of its own and closes when its parent is gone.

Why (issue 22): Ctrl+C in the terminal of `make run` reached the window too
(one foreground process group) and it printed a KeyboardInterrupt traceback
after rltray had stopped cleanly. Out of the terminal's group it no longer
hears Ctrl+C, so it must close by itself when rltray dies without closing it
(SIGKILL, a hang-up). Real parts: Xvfb, pywebview with GTK WebKit, the window
process started by ``server.open_window`` from a parent process we kill.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.support.dbus_fixtures import xvfb

PARENT = (
    "import sys, time\n"
    "from rltray.web.server import open_window\n"
    "window = open_window(sys.argv[1])\n"
    "print(window.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def gone_within(pid: int, seconds: float) -> bool:
    import psutil

    try:
        psutil.Process(pid).wait(seconds)
        return True
    except psutil.TimeoutExpired:
        return False
    except psutil.NoSuchProcess:
        return True


@pytest.mark.skipif(os.name != "posix", reason="sessions and getppid are POSIX")
def test_a_window_whose_parent_was_killed_closes_and_ctrl_c_never_reached_it() -> None:
    from rltray.web.window import linux_backend_missing

    if shutil.which("Xvfb") is None:
        pytest.skip("needs Xvfb (Debian: apt install xvfb)")
    missing = linux_backend_missing() if sys.platform.startswith("linux") else None
    if missing:
        pytest.skip(missing)
    with xvfb() as display:
        env = {**os.environ, "DISPLAY": display}
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, "http://127.0.0.1:9/launch/none"], env=env,
            stdout=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        window = 0
        try:
            assert parent.stdout is not None
            window = int(parent.stdout.readline())
            # a terminal's Ctrl+C goes to a process group of its session: not this one
            assert os.getsid(window) != os.getsid(parent.pid), "the window shares the session"
            time.sleep(3)  # the window starts its GUI meanwhile
            assert not gone_within(window, 0), "the window did not stay open"
            parent.kill()
            parent.wait(10)
            assert gone_within(window, 10), "the window outlived its parent"
        finally:
            parent.kill()
            if window:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(window, signal.SIGKILL)
