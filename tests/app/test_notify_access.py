"""A notification counts as delivered only where it would be shown (issue 23 items 1 and 12).

What is real: the Notifier, desktop-notifier's ``DesktopNotifier`` and its
``DummyNotificationCenter`` (what it picks on macOS outside an app bundle).
Stand-ins: a backend that answers "not authorised" and still dispatches, as
desktop-notifier's Cocoa backend does for Homebrew's unsigned Python, and one
whose constructor raises. They are chosen where desktop-notifier chooses its
backend (``desktop_notifier.main.get_backend_class``), so everything above that
runs as on a Mac.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
from desktop_notifier import Capability
from desktop_notifier.backends.dummy import DummyNotificationCenter
from rltray.app.desktop import notify_access
from rltray.app.desktop.notifier import Notifier


class Refusing(DummyNotificationCenter):
    """Like the Cocoa backend for an unsigned Python: full capabilities, never authorised,
    and ``send`` still calls ``on_dispatched`` (desktop-notifier's base class does)."""

    allowed: ClassVar[bool] = False  # True: the user allowed them in System Settings
    sent: ClassVar[list[str]] = []

    async def request_authorisation(self) -> bool:
        return type(self).allowed

    async def has_authorisation(self) -> bool:
        return type(self).allowed

    async def _send(self, notification: Any) -> None:
        type(self).sent.append(notification.title)

    async def _get_capabilities(self) -> frozenset[Capability]:
        return frozenset({Capability.TITLE, Capability.MESSAGE, Capability.BUTTONS,
                          Capability.ON_DISPATCHED})  # fmt: skip


class Broken(DummyNotificationCenter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("UNUserNotificationCenter is unavailable")


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Callable[[type], None]:
    def use(cls: type) -> None:
        monkeypatch.setattr("desktop_notifier.main.get_backend_class", lambda: cls)

    Refusing.allowed, Refusing.sent = False, []
    return use


@pytest.fixture
def notifiers() -> Iterator[Callable[..., tuple[Notifier, list[int]]]]:
    """Started Notifiers (probe finished) and the turns each reported delivered."""
    made: list[Notifier] = []

    def make(**kwargs: Any) -> tuple[Notifier, list[int]]:
        delivered: list[int] = []
        notifier = Notifier(lambda *_: None, on_delivered=delivered.append, **kwargs)
        made.append(notifier)
        notifier.start().result(10)
        return notifier, delivered

    yield make
    for notifier in made:
        notifier.close()


def test_the_sentences_name_what_works_on_macos_and_elsewhere() -> None:
    for sentence in (notify_access.no_backend("darwin"), notify_access.refused("darwin")):
        assert "python.org's Python" in sentence and "signed rltray.app" in sentence
    assert "Homebrew" in notify_access.refused("darwin")
    assert "uv, pyenv and conda" in notify_access.no_backend("darwin")
    assert notify_access.no_backend("win32") == notify_access.NO_SERVICE
    assert notify_access.refused("linux") == notify_access.REFUSED
    assert notify_access.is_stand_in(frozenset()) and not notify_access.is_stand_in({"title"})


def test_desktop_notifiers_dummy_backend_is_never_delivered(backend, notifiers) -> None:
    """macOS with a uv/pyenv/conda Python: the dummy backend "dispatches" and shows nothing."""
    backend(DummyNotificationCenter)
    notifier, delivered = notifiers(platform="darwin")
    assert notifier.delivery_problems() == [notify_access.MACOS_NO_APP]
    assert notifier.send_test().result(10) is False
    notifier.ask(1, "Claude Code · p", "answer")
    assert notifier.send_test().result(10) is False  # queued after the ask: it ran too
    assert delivered == []


def test_an_unauthorised_backend_is_never_delivered_until_the_user_allows_it(
    backend, notifiers
) -> None:
    """Homebrew's Python: Cocoa says "not allowed", desktop-notifier dispatches regardless."""
    backend(Refusing)
    notifier, delivered = notifiers(platform="darwin")
    assert notifier.delivery_problems() == [notify_access.MACOS_REFUSED]
    notifier.ask(1, "Claude Code · p", "answer")
    assert notifier.send_test().result(10) is False
    assert delivered == [] and Refusing.sent == []  # not even tried
    Refusing.allowed = True  # turned on in System Settings while rltray runs
    assert notifier.send_test().result(10) is True
    assert notifier.delivery_problems() == []
    notifier.ask(2, "Claude Code · p", "answer")
    assert notifier.send_test().result(10) is True
    assert delivered == [2] and Refusing.sent == ["rltray test", "Claude Code · p", "rltray test"]


def test_a_constructor_that_raises_is_a_delivery_problem_not_a_crash(backend, notifiers) -> None:
    backend(Broken)
    notifier, delivered = notifiers()
    (problem,) = notifier.delivery_problems()
    assert problem.startswith("desktop-notifier could not start here (RuntimeError: ")
    assert "UNUserNotificationCenter is unavailable" in problem
    assert notifier.send_test().result(10) is False
    notifier.ask(1, "t", "b")
    notifier.tell("t", "b")
    assert notifier.send_test().result(10) is False and delivered == []


def test_the_self_test_fails_notifications_on_the_dummy_backend(backend) -> None:
    """It said "delivered, but macOS shows notifications only from an app bundle"."""
    from rltray.app.cli import selftest

    backend(DummyNotificationCenter)
    state, detail = selftest.notifications()
    assert (state, detail) == (selftest.FAIL, notify_access.no_backend())
