"""The trainer's console-free stop: stdin closing, or the job folder's stop file (issue 23 item 11).

The whole trainer pausing on either is in test_main_cli.py; here the channel alone,
in milliseconds, including what must *not* stop it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from rltray.trainer.stopchannel import STDIN_ENV, StopChannel, stop_file


def _channel(job: Path, **kwargs: object) -> tuple[StopChannel, list[str], threading.Event]:
    said: list[str] = []
    fired = threading.Event()

    def on_stop(reason: str) -> None:
        said.append(reason)
        fired.set()

    return StopChannel(job, on_stop, interval_s=0.02, **kwargs).start(), said, fired


def test_the_stop_file_stops_once_and_is_removed(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    channel, said, fired = _channel(job)
    stop_file(job).write_bytes(b"")
    assert fired.wait(5)
    channel.close()
    assert said == [f"the stop file {tmp_path / 'stop'} appeared"]
    assert not (tmp_path / "stop").exists()


def test_stdin_closing_stops_and_what_is_written_does_not(tmp_path: Path) -> None:
    read, write = os.pipe()
    try:
        channel, said, fired = _channel(tmp_path / "job.json", stdin=read)
        os.write(write, b"anything\n")
        assert not fired.wait(0.2)
        os.close(write)
        assert fired.wait(5)
        channel.close()
    finally:
        os.close(read)
    assert said == ["stdin was closed"]


def test_stdin_is_watched_only_when_the_runner_asks(tmp_path: Path) -> None:
    """A trainer started by hand or by a test reads /dev/null: end of file at once."""
    job = tmp_path / "job.json"
    assert StopChannel.from_env(job, print, env={}).stdin is None
    assert StopChannel.from_env(job, print, env={STDIN_ENV: "stop"}).stdin is not None


def test_a_closed_channel_says_nothing(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    channel, said, fired = _channel(job)
    channel.close()
    stop_file(job).write_bytes(b"")
    assert not fired.wait(0.2) and said == []
