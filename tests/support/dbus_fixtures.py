"""A private D-Bus session bus and a fake notification server, for tests and benchmarks.

Why our own bus: the desktop's session bus (when there is one) has a real
notification server and service activation, so tests on it would pop real
notifications and could never see "no server". ``PrivateSessionBus`` starts a
``dbus-daemon`` with a config of our own that has **no service directories**:
nothing is ever auto-started (Debian's dunst ships an activation file for
org.freedesktop.Notifications), so a name is owned only when a test owns it.

Why a hand-written server rather than python-dbusmock: desktop-notifier
subscribes to ``ActionInvoked`` / ``NotificationClosed`` only when the server's
introspection declares those signals, and dbusmock's template declares none
(DESKTOP-STACK.md §1.3).

Use from any test module;
the functions carry a ``_fixture`` suffix so the test's parameter names do not
shadow the import (ruff F811)::

    from tests.support.dbus_fixtures import (  # noqa: F401
        notification_server_fixture,
        session_bus_fixture,
    )

    def test_x(session_bus, notification_server): ...

``session_bus`` sets DBUS_SESSION_BUS_ADDRESS for the test (restored after) and
is skipped, naming what to install, when dbus-daemon is missing. Other fake
services (a StatusNotifierWatcher for the tray, idle monitors) can live on the
same bus: ``BusThread(session_bus.address).export(path, interface, name)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import pytest
from dbus_fast import BusType, Message, MessageType, Variant
from dbus_fast.aio import MessageBus
from dbus_fast.annotations import DBusInt32, DBusSignature, DBusStr, DBusUInt32
from dbus_fast.service import ServiceInterface, dbus_method, dbus_signal

T = TypeVar("T")

NOTIFICATIONS = "org.freedesktop.Notifications"
NOTIFICATIONS_PATH = "/org/freedesktop/Notifications"

DBusStrList = Annotated[list[str], DBusSignature("as")]
DBusHints = Annotated[dict[str, Variant], DBusSignature("a{sv}")]
DBusServerInfo = Annotated[tuple[str, str, str, str], DBusSignature("ssss")]
DBusIdStr = Annotated[tuple[int, str], DBusSignature("us")]
DBusIdReason = Annotated[tuple[int, int], DBusSignature("uu")]

_BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <keep_umask/>
  <listen>{listen}</listen>
  <auth>EXTERNAL</auth>
  {service_dirs}
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


def missing_dbus_daemon() -> str | None:
    """A sentence naming what to install, or None when dbus-daemon is there."""
    if shutil.which("dbus-daemon") is None:
        return "dbus-daemon not installed (apt install dbus)"
    return None


class PrivateSessionBus:
    """A ``dbus-daemon`` of our own, forked in the background and killed by ``stop()``.

    ``service_dirs`` may name folders of ``.service`` files when a test wants
    activation; by default there is none. ``socket`` fixes the socket's path
    (e.g. ``$XDG_RUNTIME_DIR/bus``, where desktops put it); by default it is a
    fresh name in a short temporary folder.
    """

    def __init__(
        self, workdir: Path, service_dirs: tuple[Path, ...] = (), socket: Path | None = None
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        # unix socket paths are limited to ~100 bytes; pytest's tmp_path can be longer
        self._socket_dir = Path(tempfile.mkdtemp(prefix="rltray-bus-"))
        listen = f"unix:path={socket}" if socket else f"unix:dir={self._socket_dir}"
        dirs = "\n  ".join(f"<servicedir>{d}</servicedir>" for d in service_dirs)
        config = workdir / "session-bus.conf"
        config.write_text(_BUS_CONFIG.format(listen=listen, service_dirs=dirs))
        proc = subprocess.run(
            [
                "dbus-daemon",
                f"--config-file={config}",
                "--fork",
                "--print-address=1",
                "--print-pid=1",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        address, pid = proc.stdout.split()[:2]
        self.address: str = address
        self.pid: int = int(pid)

    @property
    def env(self) -> dict[str, str]:
        """``os.environ`` with this bus as the session bus, for child processes."""
        return {**os.environ, "DBUS_SESSION_BUS_ADDRESS": self.address}

    def name_has_owner(self, name: str) -> bool:
        """Ask the bus (org.freedesktop.DBus.NameHasOwner) whether ``name`` is owned now."""
        return asyncio.run(_name_has_owner(self.address, name))

    def wait_for_name(self, name: str, timeout: float = 10.0) -> None:
        """Block until ``name`` has an owner; TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.name_has_owner(name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"nobody owns {name} on {self.address} after {timeout} s")
            time.sleep(0.02)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        shutil.rmtree(self._socket_dir, ignore_errors=True)


async def _name_has_owner(address: str, name: str) -> bool:
    bus = await MessageBus(bus_address=address, bus_type=BusType.SESSION).connect()
    try:
        reply = await bus.call(
            Message(
                destination="org.freedesktop.DBus",
                path="/org/freedesktop/DBus",
                interface="org.freedesktop.DBus",
                member="NameHasOwner",
                signature="s",
                body=[name],
            )
        )
        assert reply is not None and reply.message_type == MessageType.METHOD_RETURN, reply
        return bool(reply.body[0])
    finally:
        bus.disconnect()


@contextlib.contextmanager
def xvfb() -> Iterator[str]:
    """A fresh Xvfb on a display number it picks itself (-displayfd: never a clash)."""
    read, write = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", "800x600x24", "-nolisten", "tcp"],
        pass_fds=(write,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            number = pipe.readline().strip()
        assert number, "Xvfb did not report a display"
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(10)


class BusThread:
    """An asyncio loop on a daemon thread holding one connection to a bus.

    Fake services live here so a synchronous test (and the code under test,
    which has its own loop thread) can talk to them. ``call`` runs a coroutine
    on the loop and waits for its result; ``call_soon`` runs a plain function
    there (signals must be emitted from the loop that owns the connection).
    dbus-fast objects must be created on the loop, so ``call`` takes a function
    returning the awaitable rather than the awaitable itself.
    """

    def __init__(self, address: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fake-dbus", daemon=True
        )
        self._thread.start()
        self.bus: MessageBus = self.call(lambda: MessageBus(bus_address=address).connect())

    def call(self, make: Callable[[], Awaitable[T]], timeout: float = 10.0) -> T:
        """Run ``await make()`` on the loop and return its result (waits up to ``timeout``)."""

        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self._loop.call_soon_threadsafe(fn, *args)

    def export(self, path: str, interface: ServiceInterface, name: str | None = None) -> None:
        """Export ``interface`` at ``path`` and, when given, own the well-known ``name``."""

        async def do() -> None:
            self.bus.export(path, interface)
            if name is not None:
                await self.bus.request_name(name)

        self.call(do)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self.bus.disconnect)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


@dataclass
class NotifyCall:
    """One ``Notify`` call as the server received it."""

    id: int
    app_name: str
    replaces_id: int
    app_icon: str
    summary: str
    body: str
    actions: list[str]
    hints: dict[str, Any]
    expire_timeout: int
    received: float = field(default_factory=time.perf_counter)

    @property
    def action_pairs(self) -> list[tuple[str, str]]:
        """``["good", "Good", "bad", "Bad"]`` -> ``[("good", "Good"), ("bad", "Bad")]``."""
        return list(zip(self.actions[::2], self.actions[1::2], strict=True))


class FakeNotificationServer(ServiceInterface):
    """org.freedesktop.Notifications that records each call and sends signals on request.

    Method and signal names are the protocol's (CamelCase); ``id`` shadows the
    builtin because that is the argument's name in the spec and introspection.

    Runs on a ``BusThread``; use ``NotificationServer`` from the test's thread.
    """

    def __init__(self, capabilities: list[str], name: str = "rltray-fake") -> None:
        super().__init__(NOTIFICATIONS)
        self.capabilities = capabilities
        self.server_name = name
        self.calls: list[NotifyCall] = []
        self.closed: list[int] = []
        self.changed = threading.Condition()
        self._next_id = 0

    @dbus_method()
    def Notify(
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
        with self.changed:
            self._next_id += 1
            plain_hints = {k: v.value if isinstance(v, Variant) else v for k, v in hints.items()}
            self.calls.append(
                NotifyCall(
                    self._next_id,
                    app_name,
                    replaces_id,
                    app_icon,
                    summary,
                    body,
                    list(actions),
                    plain_hints,
                    expire_timeout,
                )
            )
            self.changed.notify_all()
            return self._next_id

    @dbus_method()
    def CloseNotification(self, id: DBusUInt32):  # no return annotation: "None" is no D-Bus type
        with self.changed:
            self.closed.append(id)
            self.changed.notify_all()
        self.NotificationClosed(id, 3)

    @dbus_method()
    def GetCapabilities(self) -> DBusStrList:
        return list(self.capabilities)

    @dbus_method()
    def GetServerInformation(self) -> DBusServerInfo:
        return (self.server_name, "rltray tests", "1.0", "1.2")

    @dbus_signal()
    def ActionInvoked(self, id: int, action_key: str) -> DBusIdStr:
        return (id, action_key)

    @dbus_signal()
    def NotificationClosed(self, id: int, reason: int) -> DBusIdReason:
        return (id, reason)

    @dbus_signal()
    def NotificationReplied(self, id: int, text: str) -> DBusIdStr:
        """KDE's inline-reply signal; declared so the reply path can be tested on Linux."""
        return (id, text)


class NotificationServer:
    """A fake notification server on ``address``, driven from the test's thread."""

    def __init__(
        self, address: str, capabilities: tuple[str, ...] = ("actions", "body")
    ) -> None:
        self.service = FakeNotificationServer(list(capabilities))
        self.thread = BusThread(address)
        self.thread.export(NOTIFICATIONS_PATH, self.service, NOTIFICATIONS)

    @property
    def calls(self) -> list[NotifyCall]:
        with self.service.changed:
            return list(self.service.calls)

    def wait_for_calls(self, count: int, timeout: float = 5.0) -> list[NotifyCall]:
        """The first ``count`` Notify calls, waiting up to ``timeout`` seconds for them."""
        with self.service.changed:
            if not self.service.changed.wait_for(
                lambda: len(self.service.calls) >= count, timeout
            ):
                raise TimeoutError(
                    f"{len(self.service.calls)} Notify call(s) after {timeout} s, "
                    f"expected {count}"
                )
            return list(self.service.calls[:count])

    def invoke_action(self, notification_id: int, action_key: str) -> None:
        """What a server does when the user presses a button: emit ActionInvoked."""
        self.thread.call_soon(self.service.ActionInvoked, notification_id, action_key)

    def close_notification(self, notification_id: int, reason: int = 2) -> None:
        """Emit NotificationClosed (reason 2: dismissed by the user; 1: expired)."""
        self.thread.call_soon(self.service.NotificationClosed, notification_id, reason)

    def reply(self, notification_id: int, text: str) -> None:
        """Emit NotificationReplied, as KDE does after an inline reply."""
        self.thread.call_soon(self.service.NotificationReplied, notification_id, text)

    def close(self) -> None:
        self.thread.close()


@pytest.fixture(name="session_bus")
def session_bus_fixture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PrivateSessionBus]:
    """A private session bus, set as DBUS_SESSION_BUS_ADDRESS for this test only."""
    missing = missing_dbus_daemon()
    if missing:
        pytest.skip(missing)
    bus = PrivateSessionBus(tmp_path / "dbus")
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", bus.address)
    try:
        yield bus
    finally:
        bus.stop()


@pytest.fixture(name="notification_server")
def notification_server_fixture(session_bus: PrivateSessionBus) -> Iterator[NotificationServer]:
    """A fake org.freedesktop.Notifications (capabilities "actions", "body") on ``session_bus``."""
    server = NotificationServer(session_bus.address)
    try:
        yield server
    finally:
        server.close()
