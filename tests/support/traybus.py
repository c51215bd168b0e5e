"""What a desktop shell does with a tray icon, over D-Bus: a watcher and a menu client.

Why: pystray's AppIndicator backend (libayatana-appindicator) registers a
StatusNotifierItem with the session's ``org.kde.StatusNotifierWatcher`` and
exports its GTK menu as ``com.canonical.dbusmenu``. A panel reads that menu's
layout and sends ``Event(id, "clicked")`` when the user clicks an item; these
helpers do exactly that, so a test clicks the real menu of a real process
(DESKTOP-STACK.md §2.3, "appindicator over D-Bus").

pystray rebuilds the menu after every activation, so item ids change: read
the layout again before each click (``DBusMenu.click`` does).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest
from dbus_fast import Message, MessageType, Variant
from dbus_fast.annotations import DBusBool, DBusInt32, DBusSignature, DBusStr
from dbus_fast.service import PropertyAccess, ServiceInterface, dbus_method, dbus_property
from dbus_fast.service import dbus_signal as signal

from tests.support.dbus_fixtures import BusThread, PrivateSessionBus

WATCHER = "org.kde.StatusNotifierWatcher"
WATCHER_PATH = "/StatusNotifierWatcher"
ITEM_IFACE = "org.kde.StatusNotifierItem"
MENU_IFACE = "com.canonical.dbusmenu"
DBusStrList = Annotated[list[str], DBusSignature("as")]


class FakeWatcher(ServiceInterface):
    """Records every item that registers (bus name of the sender + the path or name it gave)."""

    def __init__(self) -> None:
        super().__init__(WATCHER)
        self.items: list[str] = []
        self.changed = threading.Condition()

    @dbus_method()
    def RegisterStatusNotifierItem(self, service: DBusStr):
        with self.changed:
            self.items.append(service)
            self.changed.notify_all()

    @dbus_method()
    def RegisterStatusNotifierHost(self, service: DBusStr):
        pass

    @dbus_property(access=PropertyAccess.READ)
    def RegisteredStatusNotifierItems(self) -> DBusStrList:
        return list(self.items)

    @dbus_property(access=PropertyAccess.READ)
    def IsStatusNotifierHostRegistered(self) -> DBusBool:
        return True

    @dbus_property(access=PropertyAccess.READ)
    def ProtocolVersion(self) -> DBusInt32:
        return 0

    @signal()
    def StatusNotifierItemRegistered(self, service: str) -> DBusStr:
        return service

    def wait_for_item(self, timeout: float = 20.0) -> str:
        with self.changed:
            assert self.changed.wait_for(lambda: self.items, timeout), "no tray item registered"
            return self.items[0]


@dataclass
class MenuEntry:
    id: int
    label: str
    enabled: bool
    toggle_state: int | None
    children: list[MenuEntry] = field(default_factory=list)

    def find(self, *path: str) -> MenuEntry:
        node = self
        for name in path:
            match = [c for c in node.children if c.label.startswith(name)]
            assert match, f"no {name!r} among {[c.label for c in node.children]}"
            node = match[0]
        return node


def _entry(raw: Any) -> MenuEntry:
    ident, props, children = raw

    def value(key: str, default: Any) -> Any:
        v = props.get(key)
        return default if v is None else v.value

    return MenuEntry(
        id=int(ident),
        label=str(value("label", "")).replace("_", ""),
        enabled=bool(value("enabled", True)),
        toggle_state=value("toggle-state", None),
        children=[_entry(c.value) for c in children],
    )


class DBusMenu:
    """The tray's exported menu, read and clicked like a panel does."""

    def __init__(self, thread: BusThread, owner: str, path: str) -> None:
        self.thread, self.owner, self.path = thread, owner, path

    @classmethod
    def of_item(cls, thread: BusThread, registered: str, timeout: float = 20.0) -> DBusMenu:
        """Find the item's owner (the registration names a path, not a bus name) and its menu."""
        deadline = time.monotonic() + timeout
        path = registered if registered.startswith("/") else "/StatusNotifierItem"
        while True:
            for name in thread.call(lambda: _list_names(thread)):
                if not name.startswith(":"):
                    continue
                menu = thread.call(lambda n=name: _menu_path(thread, n, path))
                if menu:
                    return cls(thread, name, menu)
            assert time.monotonic() < deadline, f"no owner of {path} with a menu"
            time.sleep(0.1)

    def layout(self) -> MenuEntry:
        body = self.thread.call(
            lambda: _call(
                self.thread, self.owner, self.path, MENU_IFACE, "GetLayout", "iias", [0, -1, []]
            )
        )
        return _entry(body[1])

    def click(self, *path: str) -> None:
        """Read the layout afresh and click the item under ``path`` (labels, by prefix).

        The tray may rebuild its menu between our read and our click (it follows
        new turns and training progress); the server then refuses the stale id and
        nothing was clicked, so read again and retry, as a panel would.
        """
        for attempt in range(5):
            entry = self.layout().find(*path)
            assert entry.enabled, f"{path} is disabled"
            try:
                self.thread.call(
                    lambda e=entry: _call(self.thread, self.owner, self.path, MENU_IFACE, "Event",
                                          "isvu", [e.id, "clicked", Variant("i", 0), 0])
                )  # fmt: skip
                return
            except RuntimeError as exc:
                if "does not refer to a menu item" not in str(exc) or attempt == 4:
                    raise
                time.sleep(0.1)


async def _call(
    thread: BusThread, dest: str, path: str, iface: str, member: str, sig: str, body: list[Any]
) -> list[Any]:
    reply = await thread.bus.call(
        Message(
            destination=dest, path=path, interface=iface, member=member, signature=sig, body=body
        )
    )
    assert reply is not None
    if reply.message_type == MessageType.ERROR:
        raise RuntimeError(f"{member} failed: {reply.error_name} {reply.body}")
    return list(reply.body)


async def _list_names(thread: BusThread) -> list[str]:
    (names,) = await _call(
        thread, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
        "ListNames", "", []
    )  # fmt: skip
    return list(names)


async def _menu_path(thread: BusThread, owner: str, path: str) -> str | None:
    try:
        (value,) = await _call(
            thread, owner, path, "org.freedesktop.DBus.Properties", "Get", "ss",
            [ITEM_IFACE, "Menu"]
        )  # fmt: skip
    except RuntimeError:
        return None
    return str(value.value)


CHECK_GTK = (
    "import gi; gi.require_version('Gtk', '3.0'); "
    "gi.require_version('AyatanaAppIndicator3', '0.1'); "
    "from gi.repository import Gtk, AyatanaAppIndicator3"
)


def missing_tray_desktop() -> str | None:
    """What a real tray under Xvfb needs and this machine lacks, in one sentence; None if all."""
    if shutil.which("Xvfb") is None:
        return "needs Xvfb (Debian: apt install xvfb; `make test` installs it as root)"
    probe = subprocess.run([sys.executable, "-c", CHECK_GTK], capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return (
            "needs PyGObject with GTK 3 and AyatanaAppIndicator3 (Debian: apt install "
            "python3-gi gir1.2-gtk-3.0 gir1.2-ayatanaappindicator3-0.1; `make test` installs "
            f"them and gives the venv the system's gi, packaging/desktop_gi.py): {last}"
        )
    return None


@pytest.fixture(name="panel")
def panel_fixture(session_bus: PrivateSessionBus) -> Iterator[tuple[FakeWatcher, BusThread]]:
    """A desktop panel on the test's bus: the watcher items register with, and the bus
    thread that reads and clicks their menus (import it with session_bus_fixture)."""
    thread = BusThread(session_bus.address)
    fake = FakeWatcher()
    thread.export(WATCHER_PATH, fake, WATCHER)
    try:
        yield fake, thread
    finally:
        thread.close()
