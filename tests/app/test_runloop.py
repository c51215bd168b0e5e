"""How `rltray serve`'s main thread waits: macOS runs its run loop for buttons (issue 23 item 7).

The decision is checked for every platform; `serve` itself runs in process with
``platform="darwin"`` on a machine without pyobjc, where it must say at start
that buttons will not work and what to use. Running the real CFRunLoop needs a
Mac (pyobjc's CoreFoundation) and is skipped elsewhere.
"""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rltray.app.desktop import runloop
from rltray.app.desktop.runloop import NO_BUTTONS, PLAIN, RUN_LOOP, choose, main_thread_wait


@pytest.fixture
def python_handlers() -> Iterator[None]:
    """serve() installs SIGINT/SIGTERM handlers on the main thread: put pytest's back."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


def test_macos_runs_the_main_run_loop_and_says_so_when_it_cannot() -> None:
    assert choose("darwin", core_foundation=True) == (RUN_LOOP, None)
    assert choose("darwin", core_foundation=False) == (PLAIN, NO_BUTTONS)
    assert "`rltray run`" in NO_BUTTONS and "`rltray serve`" in NO_BUTTONS


def test_other_systems_wait_plainly_and_say_nothing() -> None:
    for platform in ("linux", "win32"):
        for core_foundation in (True, False):
            assert choose(platform, core_foundation) == (PLAIN, None)
    stop = threading.Event()
    wait, problem = main_thread_wait(stop, "linux")
    assert problem is None and wait(0.01) is False
    stop.set()
    assert wait(10) is True


def test_serve_on_macos_without_pyobjc_names_what_gives_buttons(
    rltray_home: Path, python_handlers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rltray.app.cli import headless
    from rltray.app.cli.context import Context

    monkeypatch.setattr(runloop, "_has_core_foundation", lambda: False)
    stop = threading.Event()
    stop.set()  # stop at once: only what serve says at start matters here
    err = io.StringIO()
    ctx = Context(dict(os.environ), io.StringIO(), err)
    try:
        assert headless.serve(ctx, stop=stop, platform="darwin") == 0
    finally:
        ctx.close()
    assert " ".join(NO_BUTTONS.split()) in " ".join(err.getvalue().split())


def test_the_real_run_loop_wait_returns_in_time_and_sees_the_stop() -> None:
    pytest.importorskip("CoreFoundation", reason="needs pyobjc's CoreFoundation (macOS only)")
    stop = threading.Event()
    wait, problem = main_thread_wait(stop, "darwin")
    assert problem is None and wait is not stop.wait
    started = time.monotonic()
    assert wait(0.2) is False and time.monotonic() - started < 2
    stop.set()
    assert wait(0.2) is True
