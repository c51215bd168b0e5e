"""One synchronous question to a D-Bus service, for checks that run outside any event loop.

The tray's "does this desktop draw tray icons?" and the self-test's "did the
desktop's tray take our icon?" are single method calls made from plain threads;
this opens a connection, asks, and closes it within a deadline, and answers None
for every failure (no bus, no such service, an error reply) because each caller
reports "cannot tell" the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

BUS = ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus")


def call(
    address: str,
    destination: str,
    path: str,
    interface: str,
    member: str,
    signature: str = "",
    body: Sequence[Any] = (),
    timeout: float = 3.0,
) -> list[Any] | None:
    """The reply's body, or None when the call could not be made or was refused."""
    import asyncio

    async def ask() -> list[Any] | None:
        from dbus_fast import Message, MessageType
        from dbus_fast.aio import MessageBus

        bus = await MessageBus(bus_address=address).connect()
        try:
            reply = await bus.call(
                Message(
                    destination=destination,
                    path=path,
                    interface=interface,
                    member=member,
                    signature=signature,
                    body=list(body),
                )
            )
        finally:
            bus.disconnect()
        if reply is None or reply.message_type != MessageType.METHOD_RETURN:
            return None
        return list(reply.body)

    try:
        return asyncio.run(asyncio.wait_for(ask(), timeout))
    except Exception:
        return None


def name_has_owner(address: str, name: str, timeout: float = 2.0) -> bool | None:
    """Whether some connection owns ``name`` on the bus; None when the bus cannot be asked."""
    reply = call(address, *BUS, "NameHasOwner", "s", [name], timeout)
    return None if reply is None else bool(reply[0])
