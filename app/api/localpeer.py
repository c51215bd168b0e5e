"""Which local user is on the other end of a loopback TCP connection (Linux).

Why: 127.0.0.1 is shared by every user of the machine, so a listener there
answers other users' processes too. A token or cookie keeps them out only
while it stays secret; if one ever leaks (a cookie sent to another user's
listener on another port, a token read from a process list), the server should
still refuse to serve anyone but its own user. On Linux the kernel says who
owns each socket: ``/proc/net/tcp`` (and ``tcp6``, for a dual-stack client,
whose addresses are IPv4-mapped) lists every TCP socket with its owner's uid.
The client's socket is the one row whose local address and port are the
request's ``REMOTE_ADDR``/``REMOTE_PORT`` and whose remote address and port are
the server's own.

On Linux the check fails closed (a security review, two bypasses): a port alone
is not enough (another user bound its socket to 127.0.0.2:<our port>, and our
own accepted socket, 127.0.0.1:<port> -> 127.0.0.2:<port>, matched first), and
"no row" is not "our user" (another user sent a request and reset the
connection at once, SO_LINGER 0; its row was gone before the lookup). So the
client must connect from the server's own address, and exactly one live row
(ESTABLISHED, or FIN_WAIT after a half-close, still held open by a process)
must name the client's end, owned by us; anything else (no row, an unreadable
/proc, a TIME_WAIT or orphaned row, whose uid the kernel shows as 0) is
refused as another user.

Elsewhere (macOS, Windows) the kernel offers no such table and the owner cannot
be known: only the source address is checked and the other defences stand alone
(SECURITY.md).
"""

from __future__ import annotations

import ipaddress
import os
import struct
import sys
from pathlib import Path

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
OWNER_KNOWN = sys.platform.startswith("linux")  # the kernel lists sockets with their owners

# /proc/net/tcp states whose uid is the owning process's: ESTABLISHED, FIN_WAIT1, FIN_WAIT2
# (a client that half-closed after sending). TIME_WAIT (06) and the like show uid 0.
LIVE_STATES = frozenset({0x01, 0x04, 0x05})

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Address = tuple[IP, int]


def _plain(ip: IP) -> IP:
    """``::ffff:127.0.0.1`` (a dual-stack socket's view of an IPv4 peer) as ``127.0.0.1``."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def address(host: str, port: int) -> Address:
    """``(host, port)`` as compared with /proc rows; ValueError when host is not an IP address."""
    return _plain(ipaddress.ip_address(host)), port


def _row_address(hex_address: str) -> Address:
    """A /proc/net/tcp{,6} address: the IP as 32-bit words in host byte order, then the port."""
    host, port = hex_address.rsplit(":", 1)
    if len(host) not in (8, 32):
        raise ValueError(hex_address)
    raw = b"".join(struct.pack("=I", int(host[i : i + 8], 16)) for i in range(0, len(host), 8))
    return _plain(ipaddress.ip_address(raw)), int(port, 16)


def peer_uid(client: Address, server: Address, tables: tuple[Path, ...] = TABLES) -> int | None:
    """The uid owning the client's end of client -> server; None when no one live row says.

    None covers: no matching row (the client already reset), an unreadable table, only
    TIME_WAIT or orphaned rows (uid 0, inode 0), or rows that disagree.
    """
    uids = set()
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            try:
                local, remote = _row_address(fields[1]), _row_address(fields[2])
                state, uid, inode = int(fields[3], 16), int(fields[7]), int(fields[9])
            except ValueError:
                continue
            if local == client and remote == server and state in LIVE_STATES and inode != 0:
                uids.add(uid)
    return uids.pop() if len(uids) == 1 else None


def foreign_peer(
    client_host: str | None,
    client_port: str | None,
    server: tuple[str, int],
    tables: tuple[Path, ...] = TABLES,
) -> str | None:
    """Why the client is (or may be) another user, to refuse it; None when it is our user.

    ``client_host``/``client_port`` are the request's REMOTE_ADDR/REMOTE_PORT, ``server`` the
    address the server is bound to. On Linux an unknown owner is refused. Where the kernel
    cannot say (``OWNER_KNOWN`` false: macOS, Windows) None also means "unknown", by design.
    """
    try:
        ours = address(*server)
        if not client_host or not client_port or not client_port.isdigit():
            raise ValueError(client_host, client_port)
        client = address(client_host, int(client_port))
    except ValueError:
        return f"the client's address {client_host}:{client_port} is not an IP address and port"
    if client[0] != ours[0]:
        return f"the client connects from {client[0]}, not from the server's own {ours[0]}"
    if not OWNER_KNOWN or not hasattr(os, "getuid"):
        return None
    uid = peer_uid(client, ours, tables)
    if uid is None:
        return "the kernel lists no live socket of this client, so its owner is unknown"
    return f"the client's socket belongs to uid {uid}" if uid != os.getuid() else None
