"""Torch CPU threads: every physical core while the user is away, else one fewer."""

from __future__ import annotations

import pytest

psutil = pytest.importorskip("psutil")

from rltray.trainer.backends import torch_setup  # noqa: E402


@pytest.fixture
def four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 8 if logical else 4)
    monkeypatch.delenv("RLTRAY_TRAINER_THREADS", raising=False)
    monkeypatch.delenv(torch_setup.USER_AWAY_ENV, raising=False)


def test_while_the_user_works_one_physical_core_stays_free(
    four_cores: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert torch_setup.choose_threads() == 3
    monkeypatch.setenv(torch_setup.USER_AWAY_ENV, "0")
    assert torch_setup.choose_threads() == 3


def test_a_round_that_runs_while_the_user_is_away_takes_every_physical_core(
    four_cores: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(torch_setup.USER_AWAY_ENV, "1")
    assert torch_setup.choose_threads() == 4


def test_the_explicit_setting_wins_and_one_core_still_gets_a_thread(
    four_cores: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(torch_setup.USER_AWAY_ENV, "1")
    monkeypatch.setenv("RLTRAY_TRAINER_THREADS", "2")
    assert torch_setup.choose_threads() == 2
    monkeypatch.setenv("RLTRAY_TRAINER_THREADS", "0")  # not a thread count: ignored
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 1)
    monkeypatch.delenv(torch_setup.USER_AWAY_ENV)
    assert torch_setup.choose_threads() == 1
