"""Fixtures for app tests: the data folder's Paths, an open Store, spool-style turn records.

The autouse fixtures in tests/conftest.py already move RLTRAY_HOME and the
keyring; these build on them so every test gets a real SQLite file in tmp_path.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rltray.app.paths import Paths
from rltray.app.store import Store

TurnFactory = Callable[..., dict[str, Any]]


@pytest.fixture
def paths(rltray_home) -> Paths:
    return Paths.from_env()


@pytest.fixture
def store(paths: Paths) -> Iterator[Store]:
    with Store.open(paths) as opened:
        yield opened


@pytest.fixture
def make_turn() -> TurnFactory:
    """Build a spool turn record as spool.validate would return it; each call a new turn id."""
    counter = itertools.count(1)

    def build(**fields: Any) -> dict[str, Any]:
        n = next(counter)
        rec: dict[str, Any] = {
            "v": 1,
            "kind": "turn",
            "agent": "claude-code",
            "session": "session-1",
            "turn": f"turn-{n}",
            "prompt": f"prompt {n}",
            "response": f"response {n}",
            "context": [{"role": "user", "content": f"earlier {n}"}],
            "cwd": "/work/project",
            "model": "claude-test",
            "captured_at": f"2025-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z",
            "event": "stop",
            "transcript": None,
        }
        rec.update(fields)
        return rec

    return build


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    """A stand-in trainer interpreter speaking the runner's JSON-line protocol (FAKE_MODE env).

    The script itself lives in test_training.py, next to the tests of its protocol.
    """
    from test_training import FAKE_TRAINER

    script = tmp_path / "fake-python"
    script.write_text(FAKE_TRAINER.format(python=sys.executable), encoding="utf-8")
    script.chmod(0o755)
    return str(script)
