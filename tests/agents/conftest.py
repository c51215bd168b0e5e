"""Fixtures for driving the real agent programs: the npm installs (cached outside the repo),
the fake model server, and one private HOME per test (see tests/support/realagents.py)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakemodel import FakeModel
from tests.support.realagents import Agents, Unavailable, install

_REAL_ENV = dict(os.environ)  # read before the autouse fixture moves HOME


@pytest.fixture(scope="session")
def agent_bins() -> dict[str, Path]:
    if os.name != "posix":
        pytest.skip("the real-agent tests drive POSIX shells and tmux")
    try:
        return install(_REAL_ENV)
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def fake_model() -> Iterator[FakeModel]:
    with FakeModel() as model:
        yield model


@pytest.fixture
def agents(agent_bins: dict[str, Path], fake_model: FakeModel, rltray_home: Path,
           tmp_path: Path) -> Agents:
    home = Path(os.environ["HOME"])
    project = tmp_path / "project"
    project.mkdir()
    world = Agents(home=home, rltray_home=rltray_home, project=project, url=fake_model.url,
                   bins=agent_bins, python=sys.executable)
    world.prepare(fake_model.port)
    return world


@pytest.fixture
def tmux() -> str:
    found = shutil.which("tmux")
    if found is None:
        pytest.skip("tmux is not installed (it drives the agents' terminal UIs)")
    return found
