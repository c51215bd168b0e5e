"""The trainer is a polite child: low priority, and it stops when its parent dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from rltray.trainer.priority import (
    NICENESS,
    PARENT_PID_ENV,
    ParentWatch,
    lower_priority,
    parent_pid_from_env,
)

from tests.support.jobfiles import make_job, trainer_env


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX niceness")
def test_lower_priority_sets_niceness_in_a_child() -> None:
    code = (
        "import os; from rltray.trainer.priority import lower_priority; "
        "print(lower_priority()); print(os.nice(0))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    said, nice = out.stdout.strip().splitlines()
    assert int(nice) >= NICENESS and f"nice {nice}" in said
    assert callable(lower_priority)


def test_parent_watch_calls_back_once_when_the_parent_is_gone() -> None:
    fired = threading.Event()
    watch = ParentWatch(fired.set, interval_s=0.05)
    assert watch.parent_alive()
    watch.parent_pid = -12345  # as if we had been re-parented
    watch.start()
    assert fired.wait(5)
    watch.stop()


def test_parent_watch_stays_quiet_while_the_parent_lives() -> None:
    fired = threading.Event()
    watch = ParentWatch(fired.set, interval_s=0.02).start()
    time.sleep(0.2)
    watch.stop()
    assert not fired.is_set()


@pytest.mark.ml
@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX re-parenting")
def test_trainer_checkpoints_and_exits_when_its_parent_is_killed(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    job = make_job(tmp_path / "job", tiny_model_dir, hyper={"epochs": 200})
    log = tmp_path / "trainer.out"
    parent_code = (
        "import subprocess, sys, time\n"
        f"out = open({str(log)!r}, 'w')\n"
        f"p = subprocess.Popen([sys.executable, '-m', 'rltray.trainer', {str(job)!r}], "
        "stdout=out, stderr=subprocess.DEVNULL)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True, env=trainer_env()
    )
    assert parent.stdout is not None
    trainer = psutil.Process(int(parent.stdout.readline()))
    try:
        deadline = time.monotonic() + 90
        while '"progress"' not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert '"progress"' in log.read_text(), "the trainer never started training"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not trainer.is_running() or trainer.status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the trainer outlived its parent by a minute")
    finally:
        if trainer.is_running() and trainer.status() != psutil.STATUS_ZOMBIE:
            os.kill(trainer.pid, signal.SIGKILL)
    last = json.loads(log.read_text().splitlines()[-1])
    assert last == {"type": "paused", "checkpoint": str(tmp_path / "job" / "checkpoint")}
    assert (tmp_path / "job" / "checkpoint" / "state.json").is_file()


def test_parent_watch_follows_the_pid_it_was_given() -> None:
    """Issue 23 item 11: the runner names the tray, because under a Windows venv the
    trainer's own parent is a redirector that outlives it."""
    tray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        fired = threading.Event()
        watch = ParentWatch(fired.set, interval_s=0.05, parent_pid=tray.pid).start()
        assert not fired.wait(0.3)  # our own parent never mattered; the tray lives
    finally:
        tray.kill()
        tray.wait()
    assert fired.wait(5)
    watch.stop()


def test_the_tray_pid_comes_from_the_environment() -> None:
    assert parent_pid_from_env({PARENT_PID_ENV: "4242"}) == 4242
    assert parent_pid_from_env({}) is None and parent_pid_from_env({PARENT_PID_ENV: "x"}) is None


@pytest.mark.ml
@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_trainer_pauses_when_the_tray_dies_though_its_parent_lives_on(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A venv's redirector between tray and trainer, as on Windows: the tray is killed,
    the redirector waits on; the trainer still checkpoints and stops."""
    pytest.importorskip("torch")
    job = make_job(tmp_path / "job", tiny_model_dir, hyper={"epochs": 200})
    log, pid_file = tmp_path / "trainer.out", tmp_path / "trainer.pid"
    redirector = (
        "import subprocess, sys\n"
        f"out = open({str(log)!r}, 'w')\n"
        f"p = subprocess.Popen([sys.executable, '-m', 'rltray.trainer', {str(job)!r}], "
        "stdout=out, stderr=subprocess.DEVNULL)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "sys.exit(p.wait())\n"
    )
    tray_code = (
        "import os, subprocess, sys, time\n"
        f"r = subprocess.Popen([sys.executable, '-c', {redirector!r}], "
        f"env={{**os.environ, {PARENT_PID_ENV!r}: str(os.getpid())}})\n"
        "print(r.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    tray = subprocess.Popen(
        [sys.executable, "-c", tray_code], stdout=subprocess.PIPE, text=True, env=trainer_env()
    )
    assert tray.stdout is not None
    middle = psutil.Process(int(tray.stdout.readline()))
    trainer = None
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (
                log.exists() and '"progress"' in log.read_text()):
            time.sleep(0.1)
        assert '"progress"' in log.read_text(), "the trainer never started training"
        trainer = psutil.Process(int(pid_file.read_text()))
        tray.send_signal(signal.SIGKILL)
        tray.wait()
        assert middle.is_running() and trainer.ppid() == middle.pid  # its parent lives on
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not trainer.is_running() or trainer.status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the trainer outlived the tray by a minute")
    finally:
        for proc in (trainer, middle):
            if proc is not None and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                os.kill(proc.pid, signal.SIGKILL)
    last = json.loads(log.read_text().splitlines()[-1])
    assert last == {"type": "paused", "checkpoint": str(tmp_path / "job" / "checkpoint")}
    assert (tmp_path / "job" / "checkpoint" / "state.json").is_file()
