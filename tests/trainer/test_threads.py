"""Torch CPU threads: the idle physical cores, all while the user is away, else one fewer."""

from __future__ import annotations

import os

import pytest
from rltray.trainer.backends import torch_setup


@pytest.fixture(autouse=True)
def no_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLTRAY_TRAINER_THREADS", raising=False)
    monkeypatch.delenv(torch_setup.USER_AWAY_ENV, raising=False)


def test_an_idle_machine_gives_every_core_while_away_and_one_fewer_while_the_user_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert torch_setup.choose_threads(cores=4, load=0.0) == 3
    monkeypatch.setenv(torch_setup.USER_AWAY_ENV, "0")
    assert torch_setup.choose_threads(cores=4, load=0.0) == 3
    monkeypatch.setenv(torch_setup.USER_AWAY_ENV, "1")
    assert torch_setup.choose_threads(cores=4, load=0.0) == 4


def test_busy_cores_get_no_thread_and_a_saturated_machine_still_gets_one() -> None:
    # the regression: a scheduled round took both cores of a busy 2-core box (75 s, not 1 s)
    assert torch_setup.threads_for(2, 1.0, user_away=True) == 1
    assert torch_setup.threads_for(8, 2.4, user_away=True) == 6
    assert torch_setup.threads_for(8, 2.6, user_away=True) == 5
    assert torch_setup.threads_for(8, 2.6, user_away=False) == 5  # the user's core is busy anyway
    assert torch_setup.threads_for(8, 0.4, user_away=False) == 7
    assert torch_setup.threads_for(2, 10.2, user_away=True) == 1
    assert torch_setup.threads_for(1, 0.0, user_away=False) == 1


def test_the_explicit_setting_wins_over_cores_and_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(torch_setup.USER_AWAY_ENV, "1")
    monkeypatch.setenv("RLTRAY_TRAINER_THREADS", "2")
    assert torch_setup.choose_threads(cores=16, load=0.0) == 2
    assert torch_setup.choose_threads(cores=1, load=9.0) == 2
    monkeypatch.setenv("RLTRAY_TRAINER_THREADS", "0")  # not a thread count: ignored
    assert torch_setup.choose_threads(cores=1, load=0.0) == 1


def test_this_machine_is_read_when_nothing_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    cores = torch_setup.physical_cores()
    assert 1 <= cores <= (os.cpu_count() or 1)
    load = torch_setup.machine_load()
    assert load >= 0.0
    if hasattr(os, "getloadavg"):  # the same figure the OS reports (it moves: a loose match)
        assert abs(load - os.getloadavg()[0]) < 2.0
    monkeypatch.setenv(torch_setup.USER_AWAY_ENV, "1")
    assert 1 <= torch_setup.choose_threads() <= cores
