"""Notifier against a fake notification server on a private bus, and once against real dunst.

What is real: desktop-notifier, dbus-fast, a dbus-daemon, the D-Bus messages
(Notify, ActionInvoked, NotificationClosed) and, in the last test, dunst under
Xvfb choosing "Good" through its dmenu. Nothing inside the Notifier is mocked.

Waiting for something that must *not* happen (a dismissed notification rating
a turn) uses an ordering barrier instead of a sleep: signals from one server
connection arrive in order, so once a later notification's rating has arrived,
the earlier signals were handled too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dbus_fast.annotations import DBusInt32, DBusStr, DBusUInt32
from dbus_fast.service import dbus_method
from desktop_notifier import Capability
from desktop_notifier.backends.base import DesktopNotifierBackend
from rltray.app.desktop.notifier import (
    COMMENT_TITLE,
    NO_BUS,
    NO_BUTTONS,
    NO_SERVER,
    Notifier,
    title_for,
)
from rltray.app.words import NOTIFICATION_CHARS, preview

from tests.support.dbus_fixtures import (  # noqa: F401 (the two fixtures)
    NOTIFICATIONS,
    NOTIFICATIONS_PATH,
    BusThread,
    DBusHints,
    DBusStrList,
    FakeNotificationServer,
    NotificationServer,
    PrivateSessionBus,
    notification_server_fixture,
    session_bus_fixture,
    xvfb,
)

Rating = tuple[int, int, "str | None"]


class Recorder:
    """on_rating / on_delivered targets that a test thread can wait on."""

    def __init__(self) -> None:
        self.ratings: list[Rating] = []
        self.delivered: list[int] = []
        self.threads: set[str] = set()
        self._changed = threading.Condition()

    def on_rating(self, turn_id: int, value: int, comment: str | None) -> None:
        with self._changed:
            self.ratings.append((turn_id, value, comment))
            self.threads.add(threading.current_thread().name)
            self._changed.notify_all()

    def on_delivered(self, turn_id: int) -> None:
        with self._changed:
            self.delivered.append(turn_id)
            self._changed.notify_all()

    def wait(self, what: Callable[[], bool], timeout: float = 5.0) -> None:
        with self._changed:
            assert self._changed.wait_for(what, timeout), (self.ratings, self.delivered)

    def wait_ratings(self, count: int) -> list[Rating]:
        self.wait(lambda: len(self.ratings) >= count)
        return list(self.ratings)

    def wait_delivered(self, turn_id: int) -> None:
        self.wait(lambda: turn_id in self.delivered)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def make_notifier(recorder: Recorder) -> Iterator[Callable[..., Notifier]]:
    """Start Notifiers (probe finished) that report to ``recorder``; closed after the test."""
    made: list[Notifier] = []

    def make(**kwargs: object) -> Notifier:
        kwargs.setdefault("on_delivered", recorder.on_delivered)
        notifier = Notifier(recorder.on_rating, **kwargs)  # type: ignore[arg-type]
        made.append(notifier)
        notifier.start().result(10)
        return notifier

    yield make
    for notifier in made:
        notifier.close()


def ask_and_wait(
    notifier: Notifier, recorder: Recorder, server: NotificationServer, turn_id: int
) -> int:
    """ask() and wait until the notifier saw it delivered; the server's id for it."""
    before = len(server.calls)
    notifier.ask(turn_id, "Claude Code · myproject", f"answer for turn {turn_id}")
    recorder.wait_delivered(turn_id)
    return server.wait_for_calls(before + 1)[before].id


# -- pure helpers --------------------------------------------------------------


def test_a_notification_preview_collapses_whitespace_and_cuts_at_200() -> None:
    assert preview("  Done:\n\n  fixed   the\tparser ") == "Done: fixed the parser"
    long = "word " * 100
    cut = preview(long, NOTIFICATION_CHARS)
    assert len(cut) == 200 and cut.endswith("…") and cut.startswith("word word")
    assert preview("x" * 200, NOTIFICATION_CHARS) == "x" * 200
    assert len(preview(long)) == 72  # a terminal line or a menu item


def test_a_preview_reads_code_as_its_code_not_its_fences() -> None:
    answer = "```python\ndef f():\n    return 1\n```\nDone. ~~~ stays inside a line"
    assert preview(answer) == "def f(): return 1 Done. ~~~ stays inside a line"
    assert preview("  ~~~\nx = 1\n  ```  \n") == "x = 1"
    assert preview("use ``` to fence code") == "use ``` to fence code"  # not a fence line


def test_title_names_the_agent_and_project() -> None:
    assert title_for("claude-code", "/home/me/myproject") == "Claude Code · myproject"
    assert title_for("codex", "/home/me/api/") == "Codex · api"
    assert title_for("codex", None) == "Codex"
    assert title_for("other-agent", "/x/y") == "other-agent · y"


# -- against the fake server ---------------------------------------------------------


def test_ask_sends_good_and_bad_buttons(
    notification_server: NotificationServer, make_notifier, recorder: Recorder
) -> None:
    notifier = make_notifier()
    assert notifier.delivery_problems() == []
    notifier.ask(42, "Claude Code · myproject", "Fixed it.\n\n" + "x" * 500)
    call = notification_server.wait_for_calls(1)[0]
    assert call.app_name == "rltray"
    assert call.summary == "Claude Code · myproject"
    assert call.body.startswith("Fixed it. xxx") and len(call.body) == 200
    pairs = call.action_pairs
    assert ("good", "Good") in pairs and ("bad", "Bad") in pairs
    assert [k for k, _ in pairs if k not in ("default", "good", "bad")] == []  # no reply field
    assert call.hints["urgency"] == 1
    recorder.wait_delivered(42)


def test_tell_sends_a_plain_notification_without_buttons(
    notification_server: NotificationServer, make_notifier
) -> None:
    notifier = make_notifier()
    notifier.tell("rltray", "Rated good: turn 7")
    call = notification_server.wait_for_calls(1)[0]
    assert (call.summary, call.body) == ("rltray", "Rated good: turn 7")
    assert [k for k, _ in call.action_pairs if k != "default"] == []


def test_good_rates_exactly_that_turn(
    notification_server: NotificationServer, make_notifier, recorder: Recorder
) -> None:
    notifier = make_notifier()
    nid = ask_and_wait(notifier, recorder, notification_server, 42)
    notification_server.invoke_action(nid, "good")
    assert recorder.wait_ratings(1) == [(42, 1, None)]


def test_bad_rates_minus_one(
    notification_server: NotificationServer, make_notifier, recorder: Recorder
) -> None:
    notifier = make_notifier()
    nid = ask_and_wait(notifier, recorder, notification_server, 43)
    notification_server.invoke_action(nid, "bad")
    assert recorder.wait_ratings(1) == [(43, -1, None)]


def test_an_older_notification_rates_its_own_turn_not_the_newest(
    notification_server: NotificationServer, make_notifier, recorder: Recorder
) -> None:
    notifier = make_notifier()
    first = ask_and_wait(notifier, recorder, notification_server, 1)
    second = ask_and_wait(notifier, recorder, notification_server, 2)
    notification_server.invoke_action(first, "bad")
    notification_server.invoke_action(second, "good")
    assert recorder.wait_ratings(2) == [(1, -1, None), (2, 1, None)]


def test_closing_takes_its_rating_notifications_down(
    notification_server: NotificationServer, make_notifier, recorder: Recorder
) -> None:
    """Regression: bubbles left on screen after rltray quit (or restarted) kept Good / Bad
    buttons nothing answered: a press closed the bubble and rated nothing, said nothing."""
    notifier = make_notifier()
    first = ask_and_wait(notifier, recorder, notification_server, 10)
    second = ask_and_wait(notifier, recorder, notification_server, 11)
    notifier.close()
    assert {first, second} <= set(notification_server.service.closed)


def test_dismissed_or_expired_rates_nothing(
    notification_server: NotificationServer, make_notifier, recorder: Recorder
) -> None:
    notifier = make_notifier()
    dismissed = ask_and_wait(notifier, recorder, notification_server, 10)
    expired = ask_and_wait(notifier, recorder, notification_server, 11)
    notification_server.close_notification(dismissed, reason=2)
    notification_server.close_notification(expired, reason=1)
    # a press that arrives after the close (servers may send both) is ignored too
    notification_server.invoke_action(dismissed, "good")
    barrier = ask_and_wait(notifier, recorder, notification_server, 12)
    notification_server.invoke_action(barrier, "good")
    assert recorder.wait_ratings(1) == [(12, 1, None)]


def test_a_second_press_on_the_same_notification_rates_once(
    notification_server: NotificationServer, make_notifier, recorder: Recorder
) -> None:
    notifier = make_notifier()
    nid = ask_and_wait(notifier, recorder, notification_server, 5)
    notification_server.invoke_action(nid, "good")
    notification_server.invoke_action(nid, "bad")
    barrier = ask_and_wait(notifier, recorder, notification_server, 6)
    notification_server.invoke_action(barrier, "bad")
    assert recorder.wait_ratings(2) == [(5, 1, None), (6, -1, None)]


def test_callbacks_run_on_the_notifier_thread(
    notification_server: NotificationServer, make_notifier, recorder: Recorder
) -> None:
    notifier = make_notifier()
    nid = ask_and_wait(notifier, recorder, notification_server, 3)
    notification_server.invoke_action(nid, "good")
    recorder.wait_ratings(1)
    assert recorder.threads == {"rltray-notifier"}


def test_a_failing_receiver_does_not_stop_later_ratings(
    notification_server: NotificationServer, make_notifier, recorder: Recorder
) -> None:
    calls: list[int] = []

    def on_rating(turn_id: int, value: int, comment: str | None) -> None:
        calls.append(turn_id)
        if turn_id == 1:
            raise RuntimeError("database is locked")
        recorder.on_rating(turn_id, value, comment)

    notifier = Notifier(on_rating, on_delivered=recorder.on_delivered)
    notifier.start().result(10)
    try:
        first = ask_and_wait(notifier, recorder, notification_server, 1)
        notification_server.invoke_action(first, "good")
        second = ask_and_wait(notifier, recorder, notification_server, 2)
        notification_server.invoke_action(second, "good")
        assert recorder.wait_ratings(1) == [(2, 1, None)]
        assert calls == [1, 2]
    finally:
        notifier.close()


def test_reply_field_sends_a_comment_with_a_bad_rating(
    session_bus: PrivateSessionBus, make_notifier, recorder: Recorder
) -> None:
    server = NotificationServer(session_bus.address, ("actions", "body", "inline-reply"))
    try:
        notifier = make_notifier(comments=True)
        nid = ask_and_wait(notifier, recorder, server, 9)
        assert ("inline-reply", COMMENT_TITLE) in server.calls[0].action_pairs
        server.reply(nid, "  ignored the failing test \n")
        assert recorder.wait_ratings(1) == [(9, -1, "ignored the failing test")]
    finally:
        server.close()


def test_two_notifiers_in_one_process_keep_their_own_turns(
    notification_server: NotificationServer,
) -> None:
    one, two = Recorder(), Recorder()
    a = Notifier(one.on_rating, on_delivered=one.on_delivered)
    b = Notifier(two.on_rating, on_delivered=two.on_delivered)
    a.start().result(10)
    b.start().result(10)
    try:
        nid_a = ask_and_wait(a, one, notification_server, 100)
        nid_b = ask_and_wait(b, two, notification_server, 200)
        notification_server.invoke_action(nid_b, "bad")
        notification_server.invoke_action(nid_a, "good")
        assert one.wait_ratings(1) == [(100, 1, None)]
        assert two.wait_ratings(1) == [(200, -1, None)]
    finally:
        a.close()
        b.close()


def test_send_test_resolves_true_with_a_server(
    notification_server: NotificationServer, make_notifier
) -> None:
    notifier = make_notifier()
    assert notifier.send_test().result(10) is True
    assert notification_server.calls[-1].summary == "rltray test"
    assert notifier.delivery_problems() == []


def test_a_server_that_advertises_body_markup_gets_the_answer_escaped(
    session_bus: PrivateSessionBus, make_notifier, recorder: Recorder
) -> None:
    """Regression: answers went out as markup, so dunst (markup = full) drew "<b>bold</b>"
    in bold, dropped "Vec<u8>"'s "<u8>" as a bad tag and read "&amp;" as "&"."""
    answer = 'Changed Vec<u8> to &[u8] where a < b; see <a href="x">docs</a>'
    server = NotificationServer(session_bus.address, ("actions", "body", "body-markup"))
    try:
        notifier = make_notifier()
        notifier.ask(1, "Codex · web", answer)
        notifier.tell("rltray", "a <b> tag & more")
        calls = server.wait_for_calls(2)
        assert calls[0].body == ("Changed Vec&lt;u8&gt; to &amp;[u8] where a &lt; b; "
                                 'see &lt;a href="x"&gt;docs&lt;/a&gt;')  # fmt: skip
        assert calls[1].body == "a &lt;b&gt; tag &amp; more"
    finally:
        server.close()
    plain = NotificationServer(session_bus.address)  # no body-markup: the text as it is
    try:
        other = make_notifier()
        other.ask(2, "Codex · web", answer)
        assert plain.wait_for_calls(1)[0].body == answer
    finally:
        plain.close()


def _other_app_notifies(address: str) -> tuple[BusThread, int]:
    """Another application's Notify over its own connection: (its connection, the id)."""
    from dbus_fast import Message, MessageType

    app = BusThread(address)

    async def notify() -> int:
        reply = await app.bus.call(
            Message(destination=NOTIFICATIONS, path=NOTIFICATIONS_PATH, interface=NOTIFICATIONS,
                    member="Notify", signature="susssasa{sv}i",
                    body=["slack", 0, "", "Slack: a message from Bob", "private", [], {}, -1])
        )  # fmt: skip
        assert reply is not None and reply.message_type == MessageType.METHOD_RETURN
        return int(reply.body[0])

    return app, app.call(notify)


def _restart(bus: PrivateSessionBus, server: NotificationServer) -> NotificationServer:
    """The notification server restarts (dunst reloaded, GNOME Shell restarted): its bubbles
    go with it, without NotificationClosed, and the new one numbers its own from 1 again."""
    server.close()
    deadline = time.monotonic() + 10
    while bus.name_has_owner(NOTIFICATIONS):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    again = NotificationServer(bus.address)
    bus.wait_for_name(NOTIFICATIONS)
    return again


def _wait_forgotten(notifier: Notifier, turn_id: int) -> None:
    """Give the notifier's loop a moment to read the change of owner (it is not asserted
    here: the assertions that follow say what goes wrong when it never does)."""
    deadline = time.monotonic() + 3
    while turn_id in notifier._shown and time.monotonic() < deadline:
        time.sleep(0.02)


def test_after_the_server_restarts_a_replaced_notification_never_closes_another_apps(
    session_bus: PrivateSessionBus, make_notifier, recorder: Recorder
) -> None:
    """Regression: after a restart rltray replaced a session's older notification by closing
    its old id, which the new server had given to another app's notification."""
    server = NotificationServer(session_bus.address)
    notifier = make_notifier()
    notifier.ask(1, "Codex · projA", "answer for turn 1", group="codex:s1")
    recorder.wait_delivered(1)
    server = _restart(session_bus, server)
    other, other_id = _other_app_notifies(session_bus.address)
    try:
        assert other_id == 1  # the id turn 1's notification had
        _wait_forgotten(notifier, 1)
        notifier.ask(2, "Codex · projA", "answer for turn 2", group="codex:s1")  # same session
        recorder.wait_delivered(2)
        assert notifier.send_test().result(10) is True  # every job before it has run
        assert other_id not in server.service.closed
        ours = [c.id for c in server.calls if c.app_name == "rltray" and c.summary != "rltray test"]
        server.invoke_action(ours[0], "good")  # the new notification still works
        assert recorder.wait_ratings(1) == [(2, 1, None)]
    finally:
        other.close()
        server.close()


def test_a_press_on_a_new_servers_notification_never_rates_an_old_turn(
    session_bus: PrivateSessionBus,
) -> None:
    """Regression: with two rltrays (two data folders) and a server that broadcasts
    ActionInvoked, a press on B's first bubble after a restart (id 1 again) also rated
    A's turn whose bubble had id 1 on the old server."""
    one, two = Recorder(), Recorder()
    server = NotificationServer(session_bus.address)
    a = Notifier(one.on_rating, on_delivered=one.on_delivered)
    b = Notifier(two.on_rating, on_delivered=two.on_delivered)
    a.start().result(10)
    b.start().result(10)
    try:
        ask_and_wait(a, one, server, 101)
        server = _restart(session_bus, server)
        _wait_forgotten(a, 101)
        nid = ask_and_wait(b, two, server, 7)
        assert nid == 1  # the id A's turn 101 had on the old server
        server.invoke_action(nid, "good")
        assert two.wait_ratings(1) == [(7, 1, None)]
        barrier = ask_and_wait(a, one, server, 102)  # signals arrive in order: after B's
        server.invoke_action(barrier, "bad")
        assert one.wait_ratings(1) == [(102, -1, None)]
    finally:
        a.close()
        b.close()
        server.close()


def test_notifications_that_end_leave_nothing_behind(
    notification_server: NotificationServer, make_notifier, recorder: Recorder
) -> None:
    """Regression: what the notifier kept per notification grew for as long as rltray ran:
    an expired bubble stayed in its map, a session's entry was never dropped, and every
    tell() stayed in desktop-notifier's cache (GNOME keeps banners and never closes them)."""
    notifier = make_notifier()
    for turn in range(1, 11):  # each in its own session, each expiring unanswered
        notifier.ask(turn, "Codex · p", f"answer {turn}", group=f"codex:s{turn}", expire_s=600)
        recorder.wait_delivered(turn)
        notification_server.close_notification(notification_server.calls[-1].id, reason=1)
    notifier.ask(11, "Codex · p", "answer 11", group="codex:s11")  # pressed: rated and gone
    recorder.wait_delivered(11)
    notification_server.invoke_action(notification_server.calls[-1].id, "good")
    assert recorder.wait_ratings(1) == [(11, 1, None)]
    for n in range(10):
        notifier.tell("rltray", f"Rated good: turn {n}")
    notification_server.wait_for_calls(21)
    backend = notifier._desktop._backend

    def kept() -> tuple[int, ...]:
        return (len(notifier._shown), len(notifier._groups), len(backend._notification_cache),
                len(backend._platform_to_interface_notification_identifier))  # fmt: skip

    deadline = time.monotonic() + 5
    while kept() != (0, 0, 0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert kept() == (0, 0, 0, 0)


class ReplacedWhileReplying(FakeNotificationServer):
    """A server that another takes over (``--replace``: one NameOwnerChanged, from it to the
    other) between taking a Notify and replying to it, so the notifier reads the change of
    owner before the reply to its send."""

    def __init__(self, successor: BusThread) -> None:
        super().__init__(["actions", "body"])
        self.successor = successor

    @dbus_method()
    async def Notify(  # type: ignore[override]
        self,
        app_name: DBusStr,
        replaces_id: DBusUInt32,
        app_icon: DBusStr,
        summary: DBusStr,
        body: DBusStr,
        actions: DBusStrList,
        hints: DBusHints,
        expire_timeout: DBusInt32,
    ) -> DBusUInt32:
        import asyncio

        from dbus_fast import NameFlag

        record = FakeNotificationServer.Notify.__wrapped__  # the decorated one returns None
        nid = record(self, app_name, replaces_id, app_icon, summary, body, actions, hints,
                     expire_timeout)  # fmt: skip
        taken = asyncio.run_coroutine_threadsafe(
            self.successor.bus.request_name(NOTIFICATIONS, NameFlag.REPLACE_EXISTING),
            self.successor._loop,
        )
        await asyncio.wrap_future(taken)
        return nid


def test_a_server_replaced_while_a_send_is_in_flight_leaves_no_id_behind(
    session_bus: PrivateSessionBus, make_notifier, recorder: Recorder
) -> None:
    """Regression (review 4, item 5): a server that went away right after replying to Notify
    could have its change of owner read before the send resumed; the send then recorded the
    old server's id after everything was forgotten, and withdrawing that turn later closed
    whatever the new server had given the same id, another application's bubble."""
    from dbus_fast import NameFlag

    successor, other = BusThread(session_bus.address), None
    after = FakeNotificationServer(["actions", "body"])
    successor.export(NOTIFICATIONS_PATH, after)
    first = BusThread(session_bus.address)
    before = ReplacedWhileReplying(successor)
    first.export(NOTIFICATIONS_PATH, before)
    first.call(lambda: first.bus.request_name(NOTIFICATIONS, NameFlag.ALLOW_REPLACEMENT))
    try:
        notifier = make_notifier()
        notifier.ask(7, "Codex · p", "answer 7", group="codex:s1")
        deadline = time.monotonic() + 5
        while not (before.calls and after_owner(session_bus, successor)):
            assert time.monotonic() < deadline, "the server was never replaced"
            time.sleep(0.02)
        other, other_id = _other_app_notifies(session_bus.address)
        assert other_id == before.calls[0].id == 1  # the id turn 7's bubble had
        notifier.withdraw([7])  # rated elsewhere meanwhile
        assert notifier.send_test().result(10) is True  # every job before it has run
        assert other_id not in after.closed
        assert recorder.delivered == []  # it went with the old server
    finally:
        for bus in (other, first, successor):
            if bus is not None:
                bus.close()


def after_owner(bus: PrivateSessionBus, successor: BusThread) -> bool:
    """Whether ``successor``'s connection owns org.freedesktop.Notifications now."""
    from dbus_fast import Message

    async def owner() -> str:
        reply = await successor.bus.call(Message(
            destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
            interface="org.freedesktop.DBus", member="GetNameOwner", signature="s",
            body=[NOTIFICATIONS]))  # fmt: skip
        return str(reply.body[0]) if reply is not None and reply.body else ""

    return successor.call(owner) == successor.bus.unique_name


class ActionCenter(DesktopNotifierBackend):
    """desktop-notifier's Windows backend as rltray meets it (backends/winrt.py): a toast
    that times out leaves its cache (``_on_dismissed``, reason TIMED_OUT, no callback) and
    stays in Action Center with its buttons; ``clear`` takes it out of there by its id."""

    center: dict[str, Any] = {}  # noqa: RUF012 (one notifier per test: reset by the test)

    async def request_authorisation(self) -> bool:
        return True

    async def has_authorisation(self) -> bool:
        return True

    async def _send(self, notification: Any) -> None:
        type(self).center[notification.identifier] = notification

    async def _clear(self, identifier: str) -> None:
        type(self).center.pop(identifier, None)

    async def _clear_all(self) -> None:
        type(self).center.clear()

    async def _get_capabilities(self) -> frozenset[Capability]:
        return frozenset({Capability.TITLE, Capability.MESSAGE, Capability.BUTTONS,
                          Capability.ON_DISPATCHED, Capability.ON_DISMISSED})  # fmt: skip

    def timed_out(self, identifier: str) -> None:
        self._clear_notification_from_cache(identifier)  # the toast is in Action Center now

    def pressed(self, identifier: str, button: str) -> None:  # ``_on_activated``
        notification = self._clear_notification_from_cache(identifier)
        type(self).center.pop(identifier, None)
        self.handle_button(identifier, button, notification)


def test_a_toast_that_timed_out_into_action_center_can_still_be_withdrawn(
    make_notifier, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (review 4, item 4): on Windows a toast that times out goes to Action
    Center with live Good/Bad buttons, but desktop-notifier drops it from its cache; the
    notifier took that for "closed" and forgot it, so a turn rated elsewhere left its toast
    there for good, and the answered toasts piled up."""
    monkeypatch.setattr("desktop_notifier.main.get_backend_class", lambda: ActionCenter)
    ActionCenter.center = {}
    notifier = make_notifier(platform="win32")
    notifier.ask(1, "Codex · p", "answer 1", group="codex:s1")
    recorder.wait_delivered(1)
    (first,) = ActionCenter.center
    backend = notifier._desktop._backend
    assert notifier._loop is not None
    notifier._loop.call_soon_threadsafe(backend.timed_out, first)
    notifier.ask(2, "Codex · p", "answer 2", group="codex:s2")  # tidies what ended
    recorder.wait_delivered(2)
    notifier.withdraw([1])  # turn 1 was rated in the window meanwhile
    assert notifier.send_test().result(10) is True  # every job before it has run
    assert first not in ActionCenter.center
    (second,) = [i for i in ActionCenter.center if ActionCenter.center[i].title != "rltray test"]
    notifier._loop.call_soon_threadsafe(backend.pressed, second, "good")  # answered: it ends
    assert recorder.wait_ratings(1) == [(2, 1, None)]


# -- problems -------------------------------------------------------------------------


def test_no_server_on_the_bus_is_one_sentence_and_send_test_is_false(
    session_bus: PrivateSessionBus, make_notifier, recorder: Recorder
) -> None:
    notifier = make_notifier()
    assert notifier.delivery_problems() == [NO_SERVER]
    assert "org.freedesktop.Notifications" in NO_SERVER and "dunst" in NO_SERVER
    assert notifier.send_test().result(10) is False
    notifier.ask(1, "t", "b")
    assert notifier.send_test().result(10) is False  # queued after the ask: it ran too
    assert recorder.delivered == []


def test_asks_while_no_server_runs_leak_no_connections(
    session_bus: PrivateSessionBus, make_notifier
) -> None:
    notifier = make_notifier()
    fds = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else None
    if fds is None:
        pytest.skip("no /proc/self/fd to count open files")
    for turn in range(30):
        notifier.ask(turn, "t", "b")
    assert notifier.send_test().result(20) is False
    assert len(os.listdir("/proc/self/fd")) <= fds + 2


def test_no_session_bus_at_all(make_notifier, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    notifier = make_notifier()
    assert notifier.delivery_problems() == [NO_BUS]
    assert notifier.send_test().result(10) is False


def test_a_server_without_buttons_is_reported(
    session_bus: PrivateSessionBus, make_notifier
) -> None:
    server = NotificationServer(session_bus.address, ("body",))
    try:
        notifier = make_notifier()
        assert notifier.delivery_problems() == [NO_BUTTONS]
        assert notifier.send_test().result(10) is True  # it still shows text
    finally:
        server.close()


def test_a_server_started_later_is_used_and_the_problem_clears(
    session_bus: PrivateSessionBus, make_notifier, recorder: Recorder
) -> None:
    notifier = make_notifier()
    assert notifier.delivery_problems() == [NO_SERVER]
    server = NotificationServer(session_bus.address)
    try:
        nid = ask_and_wait(notifier, recorder, server, 77)
        assert notifier.delivery_problems() == []
        server.invoke_action(nid, "good")
        assert recorder.wait_ratings(1) == [(77, 1, None)]
    finally:
        server.close()


def test_calls_before_start_fail_loudly_and_after_close_do_nothing(
    notification_server: NotificationServer, recorder: Recorder
) -> None:
    notifier = Notifier(recorder.on_rating)
    with pytest.raises(RuntimeError, match="start"):
        notifier.ask(1, "t", "b")
    notifier.start().result(10)
    notifier.close()
    notifier.ask(1, "t", "b")
    assert notifier.send_test().result(1) is False
    notifier.close()  # twice is fine
    assert notification_server.calls == []


def test_importing_the_notifier_stays_light() -> None:
    code = (
        "import sys, rltray.app.desktop.notifier, rltray.app.desktop.notify_policy\n"
        "heavy = {'torch', 'transformers', 'mlx', 'desktop_notifier', 'dbus_fast'}\n"
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


# -- real dunst under Xvfb ------------------------------------------------------------


def _missing_for_dunst() -> str | None:
    for program, package in (
        ("Xvfb", "xvfb"),
        ("dunst", "dunst"),
        ("dunstctl", "dunst"),
        ("dbus-send", "dbus"),
        ("dbus-daemon", "dbus"),
    ):
        if shutil.which(program) is None:
            return f"{program} not installed (apt install {package})"
    return None


@pytest.fixture
def dunst_tools() -> None:
    """Skip, naming the package, when Xvfb, dunst or the D-Bus tools are missing."""
    missing = _missing_for_dunst()
    if missing:
        pytest.skip(missing)


@pytest.fixture
def xvfb_display(dunst_tools: None) -> Iterator[str]:
    with xvfb() as display:
        yield display


@pytest.mark.parametrize(("choice", "value"), [("Good", 1), ("Bad", -1)])
def test_dunst_shows_the_buttons_and_a_choice_rates_the_turn(
    choice: str,
    value: int,
    dunst_tools: None,
    session_bus: PrivateSessionBus,
    xvfb_display: str,
    make_notifier,
    recorder: Recorder,
    tmp_path: Path,
) -> None:
    bus, display = session_bus, xvfb_display
    pick, menu_log = tmp_path / "pick", tmp_path / "dmenu.log"
    pick.write_text(choice + "\n")
    # dunst runs dmenu with its own environment, so the choice comes from a file
    stub = tmp_path / "fake-dmenu.sh"
    stub.write_text(f'#!/bin/sh\ntee "{menu_log}" | grep -m1 -- "^#$(cat "{pick}") "\n')
    stub.chmod(0o755)
    config = tmp_path / "dunstrc"
    config.write_text(
        textwrap.dedent(
            f"""\
            [global]
                dmenu = {stub}
                show_indicators = yes
            [urgency_normal]
                timeout = 0
            """
        )
    )
    env = {**bus.env, "DISPLAY": display}
    dunst = subprocess.Popen(
        ["dunst", "-config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "dunst.log").open("w"),
    )
    try:
        bus.wait_for_name(NOTIFICATIONS)
        notifier = make_notifier()
        assert notifier.delivery_problems() == []
        notifier.ask(7, "Claude Code · myproject", "Fixed the parser.")
        recorder.wait_delivered(7)

        def dunstctl(*args: str) -> str:
            return subprocess.run(
                ["dunstctl", *args], env=env, capture_output=True, text=True, timeout=10,
                check=True,
            ).stdout.strip()

        deadline = time.monotonic() + 5
        while dunstctl("count", "displayed") != "1" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert dunstctl("count", "displayed") == "1"
        dunstctl("context")
        assert recorder.wait_ratings(1) == [(7, value, None)]
        offered = menu_log.read_text()
        assert "#Good " in offered and "#Bad " in offered, offered
    finally:
        dunst.terminate()
        dunst.wait(10)
