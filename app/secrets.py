"""Secrets (local API token, hook secret, Hugging Face token) in the OS keyring, never in files.

Why it looks like this:
- Every keyring call runs in a daemon worker thread with a timeout (5 s by
  default): a locked GNOME Keyring or KWallet can block forever on an unlock
  prompt, and the tray's threads must never hang on it. A daemon thread is used
  instead of an executor so a stuck call cannot stop the process from exiting.
- Any keyring failure becomes ``SecretsUnavailable`` with one sentence saying
  what to install or unlock on this OS.
- Backends that would silently write plaintext (keyrings.alt) or drop secrets
  (the null backend) count as unavailable: rltray never depends on them.
- ``Secrets`` is the per-service object the app uses: keyring first, and if the
  keyring is unavailable, a session-only ``SessionSecrets`` kept in memory,
  never written to disk, with the reason kept for the UI to show.
"""

from __future__ import annotations

import secrets as _random
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from rltray.app.errors import ExitCode, UserError

SERVICE = "rltray"
NAMES = ("api-token", "hook-secret", "hf-token", "remote-ssh-key", "ray-token")
DEFAULT_TIMEOUT_S = 5.0

T = TypeVar("T")


class SecretsUnavailable(UserError):
    """No usable OS keyring; ``reason`` is a short machine-friendly cause."""

    exit_code = ExitCode.NOT_AVAILABLE

    def __init__(self, message: str, reason: str = "unavailable") -> None:
        super().__init__(message)
        self.reason = reason


class _UnsafeBackend(Exception):
    """The selected backend is plaintext or a no-op; treated like no keyring."""


def advice(reason: str, platform: str | None = None) -> str:
    """The one sentence shown when the keyring cannot be used, for this OS."""
    platform = sys.platform if platform is None else platform
    fallback = "until then rltray keeps its tokens in memory for this session only"
    if platform == "darwin":
        return (
            f"The macOS Keychain cannot be used ({reason}): unlock your login keychain in "
            f"Keychain Access; {fallback}."
        )
    if platform.startswith("win"):
        return (
            f"Windows Credential Manager cannot be used ({reason}): sign in to Windows with "
            f"your normal account so Credential Manager is available; {fallback}."
        )
    return (
        f"No unlocked system keyring is available ({reason}): install and unlock GNOME Keyring "
        f"or KWallet (for example `sudo apt install gnome-keyring`, then log in again); "
        f"{fallback}."
    )


def _reason(exc: BaseException) -> str:
    from keyring import errors

    # Never echo keyring's own text: it recommends installing keyrings.alt (plaintext).
    if isinstance(exc, _UnsafeBackend):
        return str(exc)
    if isinstance(exc, errors.KeyringLocked):
        return "the keyring is locked"
    if isinstance(exc, errors.NoKeyringError):
        return "no keyring service was found"
    if isinstance(exc, errors.InitError):
        return "the keyring could not be opened"
    if isinstance(exc, errors.PasswordSetError):
        return "the keyring refused to store the secret"
    return f"the keyring failed with {type(exc).__name__}"


def _fail(exc: BaseException) -> NoReturn:
    reason = _reason(exc)
    raise SecretsUnavailable(advice(reason), reason=reason) from exc


def _backend() -> Any:
    """The keyring backend, refusing plaintext (keyrings.alt) and no-op ones."""
    import keyring
    from keyring.backends import chainer, fail, null

    backend = keyring.get_keyring()
    members = list(backend.backends) if isinstance(backend, chainer.ChainerBackend) else [backend]
    if not members or all(isinstance(b, (fail.Keyring, null.Keyring)) for b in members):
        raise _UnsafeBackend("no keyring service was found")
    if any(type(b).__module__.startswith("keyrings.alt") for b in members):
        raise _UnsafeBackend("only a plaintext file keyring (keyrings.alt) is installed")
    return backend


def _in_worker(fn: Callable[[], T], timeout: float) -> T:
    """Run ``fn`` in a daemon thread; keyring failures and timeouts become SecretsUnavailable."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="rltray-keyring", daemon=True).start()
    if not done.wait(timeout):
        reason = f"it did not answer within {timeout:g} s, probably waiting for an unlock prompt"
        raise SecretsUnavailable(advice(reason), reason="timeout")
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, Exception):
            _fail(exc)
        raise exc
    return box["value"]


def _check_name(name: str) -> None:
    if name not in NAMES:
        raise ValueError(f"Unknown secret {name!r}; rltray keeps only {', '.join(NAMES)}.")


def backend_name(timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """A human name for the keyring in use (for `rltray doctor`)."""
    return _in_worker(lambda: str(_backend().name), timeout)


def get_secret(name: str, timeout: float = DEFAULT_TIMEOUT_S) -> str | None:
    _check_name(name)
    return _in_worker(lambda: _backend().get_password(SERVICE, name), timeout)


def set_secret(name: str, value: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    _check_name(name)
    if not value:
        raise ValueError("A secret cannot be empty; use delete_secret to remove it.")
    _in_worker(lambda: _backend().set_password(SERVICE, name, value), timeout)


def delete_secret(name: str, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    """Remove a secret; False when there was none."""
    _check_name(name)

    def delete() -> bool:
        from keyring.errors import PasswordDeleteError

        backend = _backend()
        try:
            backend.delete_password(SERVICE, name)
        except PasswordDeleteError:
            return False
        return True

    return _in_worker(delete, timeout)


def new_token() -> str:
    return _random.token_urlsafe(32)


def ensure_secret(name: str, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """The stored secret, creating a random one first if missing.

    Re-reads after writing so two processes racing here agree on the stored value.
    """
    current = get_secret(name, timeout)
    if current:
        return current
    set_secret(name, new_token(), timeout)
    stored = get_secret(name, timeout)
    if not stored:
        _fail(_UnsafeBackend("the keyring did not keep the secret"))
    return stored


class SessionSecrets:
    """Secrets for this process only: a dict in memory, never written, printed or pickled."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> str | None:
        _check_name(name)
        with self._lock:
            return self._values.get(name)

    def set(self, name: str, value: str) -> None:
        _check_name(name)
        with self._lock:
            self._values[name] = value

    def delete(self, name: str) -> bool:
        _check_name(name)
        with self._lock:
            return self._values.pop(name, None) is not None

    def ensure(self, name: str) -> str:
        _check_name(name)
        with self._lock:
            return self._values.setdefault(name, new_token())

    def __repr__(self) -> str:
        return f"SessionSecrets({sorted(self._values)} held in memory)"

    def __reduce__(self) -> NoReturn:
        raise TypeError("Session secrets are never serialised.")


class Secrets:
    """The app's door to secrets: the OS keyring, or a session-only fallback when it fails.

    Once the keyring has failed, this object stays on the fallback for the rest
    of the session, so a token handed out earlier keeps working and a locked
    keyring does not cost a timeout on every call. ``unavailable`` holds the
    failure for the UI's one-sentence warning.
    """

    def __init__(self, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout = timeout
        self.session = SessionSecrets()
        self.unavailable: SecretsUnavailable | None = None
        self._lock = threading.Lock()

    @property
    def persistent(self) -> bool:
        """True while secrets are kept in the OS keyring (survive a restart)."""
        return self.unavailable is None

    def _try(self, keyring_call: Callable[[], T], session_call: Callable[[], T]) -> T:
        with self._lock:
            if self.unavailable is None:
                try:
                    return keyring_call()
                except SecretsUnavailable as exc:
                    self.unavailable = exc
            return session_call()

    def get(self, name: str) -> str | None:
        return self._try(lambda: get_secret(name, self.timeout), lambda: self.session.get(name))

    def set(self, name: str, value: str) -> None:
        self._try(
            lambda: set_secret(name, value, self.timeout), lambda: self.session.set(name, value)
        )

    def delete(self, name: str) -> bool:
        return self._try(
            lambda: delete_secret(name, self.timeout), lambda: self.session.delete(name)
        )

    def ensure(self, name: str) -> str:
        return self._try(
            lambda: ensure_secret(name, self.timeout), lambda: self.session.ensure(name)
        )
