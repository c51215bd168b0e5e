"""A real sshd on 127.0.0.1 and a real single-node Ray head with token auth, per module.

Both are started here and stopped here by their own pids (never ``ray stop``, which
kills every Ray process on the machine by name). The Ray head declares one logical
GPU (``--num-gpus 1``; no hardware needed) and binds its dashboard to 127.0.0.1:
the tests reach it only through the SSH forward, as users do.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
RAY = Path(sys.executable).with_name("ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen, what: str, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not listen on {port} within {limit:.0f} s")


def stop_group(proc: subprocess.Popen, grace: float = 20) -> None:
    """Stop a process we started in its own session, and its children, by its group id."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def start_sshd(work: Path) -> tuple[subprocess.Popen, int, str, str]:
    """A private sshd on a free 127.0.0.1 port with fresh ed25519 host and client keys
    in ``work``: (process, port, host key's SHA256 fingerprint, client private key).
    Its own session: stop it with :func:`stop_group`. Also used by bench/remote_round.py."""
    assert SSHD is not None
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / name)],
                       check=True)  # fmt: skip
    (work / "authorized_keys").write_text((work / "client.pub").read_text())
    port = free_port()
    (work / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {work / 'host'}\n"
        f"AuthorizedKeysFile {work / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPidFile none\n"
        "PermitRootLogin prohibit-password\nAllowTcpForwarding local\n"
        "Subsystem sftp internal-sftp\n"
    )
    with open(work / "sshd.log", "wb") as log:
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(work / "sshd_config")], stderr=log, start_new_session=True
        )
    try:
        wait_port(port, proc, "sshd", 20)
        listed = subprocess.run(
            ["ssh-keygen", "-l", "-E", "sha256", "-f", str(work / "host.pub")],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    except BaseException:
        stop_group(proc)
        raise
    return proc, port, listed.stdout.split()[1], (work / "client").read_text()


@dataclass
class Sshd:
    port: int
    user: str
    host_key: str  # SHA256:...
    client_key: str  # the private key's text (what goes into the keyring)


@dataclass
class RayHead:
    dashboard_port: int
    token: str
    pid: int
    temp_dir: Path


@pytest.fixture(scope="module")
def sshd() -> Iterator[Sshd]:
    pytest.importorskip("asyncssh", reason="pip install -e '.[remote]' (asyncssh)")
    if SSHD is None:
        pytest.skip("needs sshd: apt-get install openssh-server (make test installs it as root)")
    work = Path(tempfile.mkdtemp(prefix="rltray-sshd-"))
    proc, port, fp, client_key = start_sshd(work)
    try:
        import pwd

        user = pwd.getpwuid(os.geteuid()).pw_name
        yield Sshd(port, user, fp, client_key)
    finally:
        stop_group(proc)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayHead]:
    pytest.importorskip("ray", reason="pip install -e '.[remote]' (ray[default]) for the test head")
    temp = Path(tempfile.mkdtemp(prefix="rtr-", dir="/tmp"))  # short: Ray's socket paths
    token = secrets.token_hex(24)
    dash = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}  # fmt: skip
    cmd = [
        str(RAY), "start", "--head", "--block", "--num-gpus", "1", "--num-cpus", "2",
        "--node-ip-address", "127.0.0.1", "--dashboard-host", "127.0.0.1",
        "--port", str(free_port()), "--dashboard-port", str(dash),
        "--ray-client-server-port", str(free_port()),
        "--dashboard-agent-listen-port", str(free_port()),
        "--temp-dir", str(temp), "--disable-usage-stats",
    ]  # fmt: skip
    with open(temp / "head.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_port(dash, proc, "the Ray head", 120)
        _wait_jobs_api(dash, token)
        yield RayHead(dash, token, proc.pid, temp)
    finally:
        stop_group(proc, grace=5)
        shutil.rmtree(temp, ignore_errors=True)


def _wait_jobs_api(port: int, token: str, limit: float = 90) -> None:
    import urllib.request

    deadline = time.monotonic() + limit
    while True:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/jobs/")
        req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("peft")
    from rltray.trainer.tiny import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")
