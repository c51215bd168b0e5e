"""One SSH connection to the training machine: host key check, dashboard forward, SFTP.

Why asyncssh (maintained, pure Python, SFTP and port forwarding on one
connection) on a loop of its own: the Ray Jobs calls are plain blocking HTTP
through the forwarded port, and a blocking call on the loop that serves the
tunnel would hang the tunnel (issue 26's facts). So the loop runs in a daemon
thread and every method here is synchronous, handing a coroutine to that loop.

Host keys are never accepted silently: the setting ``training.remote_host_key``
pins the server's SHA256 fingerprint. Empty or different, the connection is
refused before authenticating, with one sentence that shows the fingerprint
seen, so the user can compare it once and pin it.

What goes up (the round's examples, its job, a parent adapter) is private to the
login on the remote machine: folders 0700 and files 0600, whatever its umask.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
from rltray.app.errors import ExitCode, UserError

T = TypeVar("T")
CONNECT_TIMEOUT_S = 20.0
#: What rltray makes on the training machine holds the user's prompts, answers and
#: ratings (examples.jsonl), so it is private to the login whatever the remote umask.
PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600


class RemoteError(UserError):
    """The training machine cannot be used; the message is one sentence saying why."""

    exit_code = ExitCode.NOT_AVAILABLE


class HostKeyRefused(RemoteError):
    """The server's host key is not the pinned one; ``seen`` is its fingerprint."""

    def __init__(self, message: str, seen: str) -> None:
        super().__init__(message)
        self.seen = seen


class _PinnedClient(asyncssh.SSHClient):
    """Trusts exactly one host key fingerprint; remembers what the server showed."""

    def __init__(self, pinned: str) -> None:
        self.pinned = pinned.strip()
        self.seen = ""

    def validate_host_public_key(self, host: str, addr: str, port: int, key: Any) -> bool:
        self.seen = key.get_fingerprint("sha256")
        return bool(self.pinned) and self.seen == self.pinned


def server_fingerprint(host: str, port: int) -> str:
    """The SHA256 fingerprint of the host key ``host:port`` shows, before any login: what
    the wizard shows once for the user to compare with the server's own and accept."""

    async def go() -> Any:
        return await asyncio.wait_for(asyncssh.get_server_host_key(host, port),
                                      CONNECT_TIMEOUT_S)

    try:
        key = asyncio.run(go())
    except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
        raise RemoteError(
            f"Cannot reach {host}:{port} over SSH: {exc or type(exc).__name__}."
        ) from None
    except (ValueError, UnicodeError):  # a NUL, a label over 63 characters: no host name
        raise RemoteError(f"{host!r} is not a host name or an address.") from None
    if key is None:
        raise RemoteError(f"{host}:{port} showed no host key.")
    return str(key.get_fingerprint("sha256"))


class Connection:
    """An open SSH connection with its own event loop thread."""

    def __init__(
        self, host: str, port: int, user: str, host_key: str, private_key: str | None = None
    ) -> None:
        self.host, self.port, self.user = host, port, user
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="rltray-ssh", daemon=True
        )
        self._thread.start()
        self._conn: asyncssh.SSHClientConnection | None = None
        self._sftp: asyncssh.SFTPClient | None = None
        try:
            self._call(self._open(host_key, private_key), CONNECT_TIMEOUT_S + 5)
        except BaseException:
            self.close()
            raise

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _open(self, host_key: str, private_key: str | None) -> None:
        client = _PinnedClient(host_key)
        keys = [asyncssh.import_private_key(private_key)] if private_key else ()
        where = f"{self.user}@{self.host}:{self.port}"
        try:
            self._conn, _ = await asyncssh.create_connection(
                lambda: client, self.host, self.port, username=self.user,
                known_hosts=([], [], []), client_keys=keys or None,
                agent_path=None if keys else (), connect_timeout=CONNECT_TIMEOUT_S,
            )  # fmt: skip
        except asyncssh.HostKeyNotVerifiable:
            if not client.pinned:
                raise HostKeyRefused(
                    f"{where} shows the host key {client.seen}, which you have not accepted; "
                    f"compare it with the server's and accept it with `rltray config set "
                    f"training.remote_host_key {client.seen}`",
                    client.seen,
                ) from None
            raise HostKeyRefused(
                f"{where} shows the host key {client.seen}, not the accepted "
                f"{client.pinned}: refusing to connect (the server was reinstalled, or "
                "someone is in between)",
                client.seen,
            ) from None
        except asyncssh.PermissionDenied:
            raise RemoteError(
                f"{where} refused the SSH key; add its public key to the remote "
                "~/.ssh/authorized_keys and keep the key with `rltray remote key FILE`"
            ) from None
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            raise RemoteError(
                f"cannot reach {where} over SSH: {exc or type(exc).__name__}"
            ) from None
        self._sftp = await self._conn.start_sftp_client()

    # -- forwarding and commands ---------------------------------------------

    def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        """Forward a free local 127.0.0.1 port to ``remote_host:remote_port``; the port."""

        async def go() -> int:
            assert self._conn is not None
            listener = await self._conn.forward_local_port("127.0.0.1", 0, remote_host, remote_port)
            return int(listener.get_port())

        return self._call(go(), 30)

    def run(self, command: str, timeout: float = 60) -> tuple[int, str]:
        """Run ``command`` on the remote; its exit status and merged output."""

        async def go() -> tuple[int, str]:
            assert self._conn is not None
            result = await self._conn.run(command, stderr=asyncssh.STDOUT)
            return int(result.exit_status or 0), str(result.stdout or "")

        return self._call(go(), timeout)

    # -- files ---------------------------------------------------------------

    def realpath(self, path: str) -> str:
        """``path`` made absolute on the remote (a relative one is under the login's home)."""
        assert self._sftp is not None
        return str(self._call(self._sftp.realpath(path), 60))

    def exists(self, path: str) -> bool:
        assert self._sftp is not None
        return self._call(self._sftp.exists(path), 60)

    def mode(self, path: str) -> int | None:
        """The permission bits of a remote path (links followed); None when it is absent."""

        async def go() -> int | None:
            assert self._sftp is not None
            try:
                attrs = await self._sftp.stat(path)
            except asyncssh.SFTPNoSuchFile:
                return None
            return None if attrs.permissions is None else attrs.permissions & 0o7777

        return self._call(go(), 60)

    def makedirs(self, path: str) -> None:
        """Make ``path`` and its missing parents, each private to the login (0700)."""
        assert self._sftp is not None
        private = asyncssh.SFTPAttrs(permissions=PRIVATE_DIR)
        self._call(self._sftp.makedirs(path, attrs=private, exist_ok=True), 60)

    def chmod(self, path: str, mode: int) -> None:
        """Set a remote path's mode; one sentence when the login may not (not its owner)."""
        assert self._sftp is not None
        try:
            self._call(self._sftp.chmod(path, mode), 60)
        except asyncssh.SFTPError as exc:
            raise RemoteError(
                f"cannot make {path} on {self.host} private to {self.user or 'you'} "
                f"({exc.reason}): run `chown -R {self.user or '$USER'} {path} && chmod "
                f"{mode:o} {path}` there, or set training.remote_dir to a folder of your own"
            ) from None

    def put(self, local: Path, remote: str) -> None:
        """Upload a file or a folder (recursively) to ``remote``: files 0600, folders 0700.

        asyncssh creates them with the server's default mode (0644 and 0755 under the
        usual umask 022), so each is made private right after; the folder it goes into
        is already 0700, so no other user of the machine can open one meanwhile."""
        assert self._sftp is not None
        modes = {remote: PRIVATE_DIR if local.is_dir() else PRIVATE_FILE}
        if local.is_dir():
            for below in sorted(local.rglob("*")):
                name = posixpath.join(remote, *below.relative_to(local).parts)
                modes[name] = PRIVATE_DIR if below.is_dir() else PRIVATE_FILE

        async def go() -> None:
            assert self._sftp is not None
            await self._sftp.put(str(local), remote, recurse=True, preserve=False)
            for name, mode in modes.items():
                await self._sftp.chmod(name, mode)

        self._call(go(), None)

    def write_text(self, remote: str, text: str) -> None:
        """Write a remote file private to the login (0600), an existing one's mode too."""

        async def go() -> None:
            assert self._sftp is not None
            private = asyncssh.SFTPAttrs(permissions=PRIVATE_FILE)
            async with self._sftp.open(remote, "w", private) as f:
                await f.write(text)
            await self._sftp.chmod(remote, PRIVATE_FILE)

        self._call(go(), 60)

    def read_text(self, remote: str) -> str:
        async def go() -> str:
            assert self._sftp is not None
            async with self._sftp.open(remote, "r") as f:
                return str(await f.read())

        return self._call(go(), 60)

    def get(self, remote: str, local: Path) -> None:
        """Download a file or folder (recursively) to ``local``."""
        assert self._sftp is not None
        self._call(self._sftp.get(remote, str(local), recurse=True, preserve=False), None)

    def listdir(self, path: str) -> list[tuple[str, float]]:
        """The entries of a remote folder with their modification times (none: [])."""

        async def go() -> list[tuple[str, float]]:
            assert self._sftp is not None
            if not await self._sftp.exists(path):
                return []
            return [(str(n.filename), float(n.attrs.mtime or 0))
                    for n in await self._sftp.readdir(path) if n.filename not in (".", "..")]

        return self._call(go(), 60)

    def rename(self, old: str, new: str) -> None:
        assert self._sftp is not None
        self._call(self._sftp.rename(old, new), 60)

    def rmtree(self, path: str) -> None:
        assert self._sftp is not None
        if self.exists(path):
            self._call(self._sftp.rmtree(path), 120)

    def close(self) -> None:
        async def shut() -> None:
            if self._sftp is not None:
                self._sftp.exit()
            if self._conn is not None:
                self._conn.close()
                await self._conn.wait_closed()

        if self._thread.is_alive():
            with contextlib.suppress(Exception):  # a dead connection has nothing to report
                self._call(shut(), 10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)


def join(*parts: str) -> str:
    """A remote (POSIX) path."""
    return posixpath.join(*parts)
