"""Which local user is on the other end of a loopback TCP connection (Linux).

Why: 127.0.0.1 is shared by every user of the machine, so a listener there
answers other users' processes too. A token or cookie keeps them out only
while it stays secret; if one ever leaks (a cookie sent to another user's
listener on another port, a token read from a process list), the server should
still refuse to serve anyone but its own user. On Linux the kernel says who
owns each socket: ``/proc/net/tcp`` (and ``tcp6``, for a dual-stack client)
lists every TCP socket with its owner's uid. The client's socket is the one
whose local port is the request's ``REMOTE_PORT`` and whose remote port is ours.

Elsewhere (macOS, Windows, a /proc without these files) the owner is unknown
and the other defences stand alone (SECURITY.md).
"""

from __future__ import annotations

import os
from pathlib import Path

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def _port(hex_address: str) -> int:
    return int(hex_address.rsplit(":", 1)[1], 16)


def peer_uid(client_port: int, server_port: int, tables: tuple[Path, ...] = TABLES) -> int | None:
    """The uid owning the client end of the connection client_port -> server_port, if known."""
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8:
                continue
            try:
                local, remote, uid = _port(fields[1]), _port(fields[2]), int(fields[7])
            except ValueError:
                continue
            if local == client_port and remote == server_port:
                return uid
    return None


def foreign_peer(client_port: str | None, server_port: int) -> int | None:
    """The uid of the client when it is known to be another user; None for us or unknown."""
    if not hasattr(os, "getuid") or not client_port or not client_port.isdigit():
        return None
    uid = peer_uid(int(client_port), server_port)
    return uid if uid is not None and uid != os.getuid() else None
