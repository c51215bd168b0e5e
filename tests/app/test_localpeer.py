"""The other-user check (``app/api/localpeer.py``) finds the client's own socket, or refuses.

Regression (security review, two bypasses of ``peer_uid``/``foreign_peer``):
- A1, port spoofing: the lookup matched ports only, so a client bound to
  127.0.0.N:<server port> also matched the server's own accepted socket (owned by
  the server's user), which for some N came first in /proc/net/tcp;
- A2, reset right after sending: the client's row was gone before the lookup,
  ``peer_uid`` found nothing, and "unknown" was served as "our user".
Now the full 4-tuple must match one live row, the client must connect from
127.0.0.1, and an unknown owner is refused. These run as one user: the tests
with another user (``nobody``) are in tests/web/test_other_users.py.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rltray.app.api import localpeer
from rltray.app.api.localpeer import address, foreign_peer, peer_uid
from rltray.app.api.serve import LocalServer

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="needs Linux's /proc/net/tcp"
)

HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
    "   uid  timeout inode\n"
)
ESTABLISHED, TIME_WAIT = 0x01, 0x06


def _hex(host: str, port: int) -> str:
    """``host:port`` as the kernel prints it: 32-bit words in host byte order, then the port."""
    packed = socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def _row(local: tuple[str, int], remote: tuple[str, int], uid: int, state: int = ESTABLISHED,
         inode: int = 4242) -> str:  # fmt: skip
    return (
        f"   0: {_hex(*local)} {_hex(*remote)} {state:02X} 00000000:00000000 00:00000000 "
        f"00000000 {uid:5d}        0 {inode} 1 0000000000000000 20 4 30 10 -1\n"
    )


def _table(path: Path, *rows: str) -> Path:
    path.write_text(HEADER + "".join(rows))
    return path


S = 40123  # the server's port in the hand-written tables
SERVER = ("127.0.0.1", S)


def test_the_row_is_matched_by_address_and_port_not_by_port_alone(tmp_path: Path) -> None:
    """A1: the server's accepted socket, listed first, has the same ports as the client's."""
    victim, attacker = 1000, 65534
    table = _table(
        tmp_path / "tcp",
        _row(SERVER, ("127.0.0.1", 0), victim, state=0x0A, inode=1),  # the listener
        _row(SERVER, ("127.0.0.2", S), victim),  # our accepted end: local S, remote S
        _row(("127.0.0.2", S), SERVER, attacker),  # the client's end
    )
    client = address("127.0.0.2", S)
    assert peer_uid(client, address(*SERVER), (table,)) == attacker


def test_time_wait_orphaned_missing_or_disagreeing_rows_name_no_owner(tmp_path: Path) -> None:
    client = ("127.0.0.1", 51000)
    ours = address(*SERVER)

    def lookup(*rows: str) -> int | None:
        return peer_uid(address(*client), ours, (_table(tmp_path / "tcp", *rows),))

    assert lookup(_row(client, SERVER, 1000)) == 1000
    assert lookup() is None  # A2: the client reset; its row is gone
    assert lookup(_row(client, SERVER, 0, state=TIME_WAIT, inode=0)) is None  # uid 0 shown
    assert lookup(_row(client, SERVER, 1000, inode=0)) is None  # no process holds it open
    assert lookup(_row(client, ("127.0.0.1", S + 1), 1000)) is None  # another server
    assert lookup(_row(client, SERVER, 1000), _row(client, SERVER, 1001)) is None
    assert peer_uid(address(*client), ours, (tmp_path / "missing",)) is None


def test_a_dual_stack_clients_v4_mapped_row_is_found(tmp_path: Path) -> None:
    tcp = _table(tmp_path / "tcp")
    tcp6 = _table(
        tmp_path / "tcp6", _row(("::ffff:127.0.0.1", 51000), ("::ffff:127.0.0.1", S), 1000)
    )
    assert peer_uid(address("127.0.0.1", 51000), address(*SERVER), (tcp, tcp6)) == 1000
    assert peer_uid(address("::1", 51000), address("::1", S), (tcp, tcp6)) is None


def test_an_unknown_owner_or_another_source_address_is_refused(tmp_path: Path) -> None:
    me = os.getuid()
    ours = _table(tmp_path / "tcp", _row(("127.0.0.1", 51000), SERVER, me))
    assert foreign_peer("127.0.0.1", "51000", SERVER, (ours,)) is None
    assert foreign_peer("127.0.0.1", "51001", SERVER, (ours,)) is not None  # no row
    assert foreign_peer("127.0.0.1", "51000", SERVER, (tmp_path / "unreadable",)) is not None
    spoofed = _table(tmp_path / "tcp2", _row(("127.0.0.2", 51000), SERVER, me))
    assert "127.0.0.2" in str(foreign_peer("127.0.0.2", "51000", SERVER, (spoofed,)))
    assert foreign_peer(None, "51000", SERVER, (ours,)) is not None
    assert foreign_peer("127.0.0.1", None, SERVER, (ours,)) is not None
    other = _table(tmp_path / "tcp3", _row(("127.0.0.1", 51000), SERVER, me + 1))
    assert f"uid {me + 1}" in str(foreign_peer("127.0.0.1", "51000", SERVER, (other,)))


def test_without_a_kernel_socket_table_only_the_source_address_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """macOS and Windows: the owner cannot be known, so it is not held against the client."""
    monkeypatch.setattr(localpeer, "OWNER_KNOWN", False)
    missing = (tmp_path / "missing",)
    assert foreign_peer("127.0.0.1", "51000", SERVER, missing) is None
    assert foreign_peer("127.0.0.2", "51000", SERVER, missing) is not None


# -- against a real waitress server and the real kernel table ------------------------------


@pytest.fixture
def server() -> Iterator[tuple[LocalServer, list[str]]]:
    """A LocalServer whose app records the client port of every request it serves."""
    served: list[str] = []

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        served.append(environ["REMOTE_PORT"])
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    running = LocalServer(app, "test-localpeer").start()
    try:
        yield running, served
    finally:
        running.stop()


def _ask(sock: socket.socket, port: int, method: str = "GET") -> tuple[int, bytes]:
    sock.settimeout(10)
    sock.connect(("127.0.0.1" if sock.family == socket.AF_INET else "::ffff:127.0.0.1", port))
    sock.sendall(
        f"{method} /x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n"
        "Connection: close\r\n\r\n".encode()
    )
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_an_ordinary_client_and_a_dual_stack_client_are_served(server) -> None:
    running, served = server
    assert _ask(socket.socket(), running.port) == (200, b"ok")
    try:
        dual = socket.socket(socket.AF_INET6)
    except OSError:
        pytest.skip("needs IPv6 sockets for the dual-stack client")
    assert _ask(dual, running.port) == (200, b"ok")
    assert len(served) == 2


def test_the_real_table_names_the_clients_own_socket(server) -> None:
    running, _served = server
    client = socket.create_connection(running.address, timeout=10)
    try:
        host, port = client.getsockname()
        assert peer_uid(address(host, port), address(*running.address)) == os.getuid()
    finally:
        client.close()


def test_a_client_bound_to_the_servers_port_on_127_0_0_2_is_refused(server) -> None:
    """A1 performed: the server's own accepted socket also has local port == remote port."""
    running, served = server
    spoof = socket.socket()
    spoof.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        spoof.bind(("127.0.0.2", running.port))
    except OSError as e:
        spoof.close()
        pytest.skip(f"cannot bind 127.0.0.2 here: {e}")
    status, body = _ask(spoof, running.port)
    assert status == 403 and json.loads(body)["error"]["code"] == "forbidden_user"
    assert served == []


def test_a_request_whose_client_resets_right_after_sending_is_not_served(server) -> None:
    """A2 performed: the client's row is gone before the lookup; unknown is not "ours"."""
    running, served = server
    for _ in range(10):
        s = socket.create_connection(running.address, timeout=10)
        s.sendall(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST
    time.sleep(1.0)  # the server reads each request and looks its client up meanwhile
    assert served == []
    assert _ask(socket.socket(), running.port) == (200, b"ok")  # the owner still is
