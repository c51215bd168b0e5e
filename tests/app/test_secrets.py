"""Secrets: OS keyring through a worker thread, one-sentence failures, session-only fallback."""

from __future__ import annotations

import pickle
import threading
import time
from pathlib import Path

import keyring
import keyring.backend
import keyring.errors
import pytest
from rltray.app import secrets
from rltray.app.errors import ExitCode
from rltray.app.secrets import Secrets, SecretsUnavailable


class FailingKeyring(keyring.backend.KeyringBackend):
    """A backend that fails every call the way a real broken keyring does."""

    priority = 1  # type: ignore[assignment]

    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.exc = exc
        self.threads: list[str] = []

    def _raise(self) -> None:
        self.threads.append(threading.current_thread().name)
        raise self.exc

    def get_password(self, service: str, username: str) -> str | None:
        self._raise()
        return None

    def set_password(self, service: str, username: str, password: str) -> None:
        self._raise()

    def delete_password(self, service: str, username: str) -> None:
        self._raise()


class BlockingKeyring(FailingKeyring):
    """Hangs like a keyring waiting on an unlock prompt nobody answers."""

    def __init__(self) -> None:
        super().__init__(RuntimeError("unused"))
        self.release = threading.Event()

    def get_password(self, service: str, username: str) -> str | None:
        self.release.wait(30)
        return None


@pytest.fixture
def use_backend():
    previous = keyring.get_keyring()
    yield keyring.set_keyring
    keyring.set_keyring(previous)


def test_set_get_delete_under_the_rltray_service(memory_keyring) -> None:
    secrets.set_secret("hf-token", "hf_abc")
    assert memory_keyring.items == {("rltray", "hf-token"): "hf_abc"}
    assert secrets.get_secret("hf-token") == "hf_abc"
    assert secrets.delete_secret("hf-token") is True
    assert secrets.delete_secret("hf-token") is False
    assert secrets.get_secret("hf-token") is None


def test_ensure_creates_a_random_token_once(memory_keyring) -> None:
    token = secrets.ensure_secret("api-token")
    assert len(token) >= 43 and token.replace("-", "").replace("_", "").isalnum()
    assert secrets.ensure_secret("api-token") == token
    assert secrets.ensure_secret("hook-secret") != token
    assert memory_keyring.items[("rltray", "api-token")] == token


def test_unknown_names_and_empty_values_are_refused() -> None:
    with pytest.raises(ValueError, match="Unknown secret 'password'"):
        secrets.get_secret("password")
    with pytest.raises(ValueError, match="cannot be empty"):
        secrets.set_secret("api-token", "")


def test_keyring_calls_run_off_the_calling_thread(use_backend) -> None:
    backend = FailingKeyring(keyring.errors.KeyringLocked("locked"))
    use_backend(backend)
    with pytest.raises(SecretsUnavailable):
        secrets.get_secret("api-token")
    assert backend.threads == ["rltray-keyring"]


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (keyring.errors.NoKeyringError("install keyrings.alt"), "no keyring service was found"),
        (keyring.errors.InitError("Prompt dismissed"), "could not be opened"),
        (keyring.errors.KeyringLocked("locked"), "the keyring is locked"),
        (keyring.errors.PasswordSetError("no"), "refused to store"),
    ],
)
def test_keyring_errors_become_one_sentence(use_backend, monkeypatch, exc, reason) -> None:
    monkeypatch.setattr(secrets.sys, "platform", "linux")
    use_backend(FailingKeyring(exc))
    for call in (
        lambda: secrets.get_secret("api-token"),
        lambda: secrets.set_secret("api-token", "x"),
        lambda: secrets.ensure_secret("hook-secret"),
    ):
        with pytest.raises(SecretsUnavailable) as info:
            call()
        message = str(info.value)
        assert reason in message and "GNOME Keyring" in message
        assert "keyrings.alt" not in message  # never recommend the plaintext backend
        assert message.count(". ") == 0 and message.endswith(".")
        assert info.value.exit_code == ExitCode.NOT_AVAILABLE


def test_the_advice_names_what_to_unlock_on_each_os() -> None:
    assert "Keychain Access" in secrets.advice("locked", "darwin")
    assert "Credential Manager" in secrets.advice("locked", "win32")
    assert "sudo apt install gnome-keyring" in secrets.advice("locked", "linux")


def test_a_blocked_keyring_times_out(use_backend) -> None:
    backend = BlockingKeyring()
    use_backend(backend)
    started = time.monotonic()
    try:
        with pytest.raises(SecretsUnavailable, match=r"did not answer within 0\.2 s") as info:
            secrets.get_secret("api-token", timeout=0.2)
    finally:
        backend.release.set()
    assert time.monotonic() - started < 5
    assert info.value.reason == "timeout"


@pytest.mark.parametrize(
    ("module", "reason"),
    [("keyrings.alt.file", "plaintext"), ("keyring.backends.null", "no keyring service")],
)
def test_plaintext_and_noop_backends_are_refused(use_backend, module, reason) -> None:
    if module == "keyring.backends.null":
        from keyring.backends.null import Keyring as backend_cls
    else:
        backend_cls = type(
            "PlaintextKeyring", (FailingKeyring,), {"__module__": module, "priority": 1}
        )
    backend = backend_cls() if module.endswith("null") else backend_cls(RuntimeError("x"))
    use_backend(backend)
    with pytest.raises(SecretsUnavailable, match=reason):
        secrets.set_secret("api-token", "s3cret")


def test_the_fallback_is_session_only_and_never_on_disk(use_backend, tmp_path: Path) -> None:
    use_backend(FailingKeyring(keyring.errors.NoKeyringError("none")))
    store = Secrets(timeout=2)
    token = store.ensure("api-token")
    assert not store.persistent
    assert store.unavailable is not None and "session only" in str(store.unavailable)
    assert store.ensure("api-token") == token
    assert store.get("api-token") == token
    store.set("hf-token", "hf_secret_value")
    assert store.get("hf-token") == "hf_secret_value"
    # Nothing under the test's HOME or RLTRAY_HOME holds either secret.
    for path in tmp_path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert token.encode() not in data and b"hf_secret_value" not in data, path
    assert token not in repr(store.session)
    with pytest.raises(TypeError):
        pickle.dumps(store.session)
    # A second service object (another process) does not see the session's token.
    assert Secrets(timeout=2).get("api-token") is None


def test_the_fallback_stays_on_for_the_session(use_backend) -> None:
    backend = FailingKeyring(keyring.errors.KeyringLocked("locked"))
    use_backend(backend)
    store = Secrets(timeout=2)
    store.ensure("api-token")
    calls = len(backend.threads)
    store.get("api-token")
    store.delete("api-token")
    assert len(backend.threads) == calls  # no more waits on a broken keyring


def test_a_working_keyring_is_used_and_persistent(memory_keyring) -> None:
    store = Secrets()
    token = store.ensure("hook-secret")
    assert store.persistent and store.unavailable is None
    assert memory_keyring.items[("rltray", "hook-secret")] == token
    assert store.delete("hook-secret") is True
    assert store.session.get("hook-secret") is None


def test_backend_name(memory_keyring) -> None:
    assert "MemoryKeyring" in secrets.backend_name()
