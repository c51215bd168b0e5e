"""A fresh clone of this repository, and `make` run in it as a new user runs it.

Why: what a user meets first (issue 22) is decided by the Makefile and
packaging/ in a venv that does not exist yet: which PyGObject it gets, which
setuptools builds the wheel, what make prints before rltray's first line and
after Ctrl+C. Only a fresh clone shows that; the working venv has every extra.
Shared by tests/packaging/test_fresh_clone.py and bench/clone_to_tray.py.

The clone is of a commit (HEAD by default): uncommitted edits are not in it,
as they are not in what a user clones. pip's cache is the real user's (the
tests move HOME), so wheels already downloaded on this machine are reused.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from tests.support.dbus_fixtures import BusThread, NotificationServer, PrivateSessionBus, xvfb
from tests.support.traybus import WATCHER, WATCHER_PATH, FakeWatcher

ROOT = Path(__file__).resolve().parents[2]
# read at import, before a test's fixtures move HOME
PIP_CACHE = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
# this machine's pip.conf names a missing local index; pip warns per package (not rltray's)
MACHINE_NOISE = "WARNING: Location 'file:///opt/"
RLTRAY_FIRST = ("No tray icon", "rltray is running")  # how rltray's own output begins


def desktop_gi() -> ModuleType:
    """packaging/desktop_gi.py as a module (it is a script, not a package)."""
    script = ROOT / "packaging" / "desktop_gi.py"
    spec = importlib.util.spec_from_file_location("desktop_gi", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("desktop_gi", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def missing_desktop_gi() -> str | None:
    """None when this machine has a system gi this Python loads, else what to install."""
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    if any(found.loads_in(suffixes) for found in desktop_gi().system_gis()):
        return None
    return (
        "needs the desktop's PyGObject built for this Python (Debian: apt install python3-gi "
        "gir1.2-ayatanaappindicator3-0.1)"
    )


def clone(dest: Path, rev: str = "HEAD") -> Path:
    """``git clone`` of this repository at ``rev`` into ``dest``."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True, timeout=300)
    if rev != "HEAD":
        subprocess.run(["git", "-C", str(dest), "checkout", "-q", rev], check=True)
    return dest


def user_env(home: Path, data: Path, desktop: dict[str, str] | None = None) -> dict[str, str]:
    """A user's login environment: no venv active, no test switches, a home of its own."""
    drop = (
        "VIRTUAL_ENV", "PYTHONPATH", "PYSTRAY_BACKEND", "PYTHON_KEYRING_BACKEND", "DISPLAY",
        "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "MAKEFLAGS", "MFLAGS",
    )  # fmt: skip
    env = {
        k: v
        for k, v in os.environ.items()
        # MAKELEVEL & co: under `make test` the clone's make would print "Entering directory"
        if k not in drop and not k.startswith(("RLTRAY_", "MAKE"))
    }
    venv_bin = str(ROOT / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), RLTRAY_HOME=str(data), PIP_CACHE_DIR=PIP_CACHE, **(desktop or {}))
    return env


@dataclass(frozen=True)
class Line:
    at: float  # seconds since the job started
    text: str


class Job:
    """``make ARGS`` in ``cwd`` as a terminal runs a foreground job: a process group of its
    own (Ctrl+C reaches every process in it), output and errors as timestamped lines."""

    def __init__(self, cwd: Path, args: list[str], env: dict[str, str]) -> None:
        self.started = time.monotonic()
        self.lines: list[Line] = []
        self.proc = subprocess.Popen(
            ["make", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(Line(time.monotonic() - self.started, raw.rstrip("\n")))

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def first(self, *starts: str) -> Line | None:
        """The first line that starts with one of ``starts``."""
        return next((line for line in self.lines if line.text.startswith(starts)), None)

    def wait_for(self, check: Callable[[], bool], timeout: float) -> float | None:
        """Seconds from the start until ``check()`` held; None if the job ended or time ran out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return time.monotonic() - self.started
            if self.proc.poll() is not None:
                return None
            time.sleep(0.05)
        return None

    def interrupt(self, timeout: float = 60) -> int:
        """Ctrl+C: SIGINT to the whole group; make's exit status once all output is read."""
        os.killpg(self.proc.pid, signal.SIGINT)
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # what is left of the group

    def before_rltray(self) -> tuple[int, int]:
        """Lines printed before rltray's first: (rltray's project's, this machine's pip.conf's)."""
        ours = machine = 0
        for line in self.lines:
            if line.text.startswith(RLTRAY_FIRST):
                break
            if line.text.startswith(MACHINE_NOISE):
                machine += 1
            else:
                ours += 1
        return ours, machine


SHOT = (
    "import sys, gi; gi.require_version('Gdk', '3.0'); from gi.repository import Gdk; "
    "root = Gdk.get_default_root_window(); "
    "Gdk.pixbuf_get_from_window(root, 0, 0, root.get_width(), root.get_height())"
    ".savev(sys.argv[1], 'png', [], [])"
)


def screenshot(python: Path, display: str, out: Path) -> bool:
    """The X screen as a PNG, through GDK in ``python`` (a venv with gi); False if it failed."""
    done = subprocess.run([str(python), "-c", SHOT, str(out)], env={**os.environ,
                          "DISPLAY": display}, capture_output=True, timeout=60)  # fmt: skip
    return done.returncode == 0 and out.exists()


def window_processes(pid: int) -> list[int]:
    """Settings-window processes under ``pid`` (they run in a session of their own)."""
    import psutil

    found: list[int] = []
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:  # make already ended
        return found
    for child in children:
        try:
            if "rltray.web.window" in " ".join(child.cmdline()):
                found.append(child.pid)
        except psutil.Error:  # it exited while we looked
            continue
    return found


@contextlib.contextmanager
def desktop_session(workdir: Path) -> Iterator[tuple[dict[str, str], FakeWatcher]]:
    """A desktop session's environment: Xvfb, a session bus with a notification server and
    a panel's StatusNotifierWatcher (the watcher records the tray items that register)."""
    bus = PrivateSessionBus(workdir / "dbus")
    server = NotificationServer(bus.address)
    thread = BusThread(bus.address)
    watcher = FakeWatcher()
    thread.export(WATCHER_PATH, watcher, WATCHER)
    try:
        with xvfb() as display:
            # A desktop session has an accessibility bus; this bare one may not (the
            # at-spi2-core service is not always installed), and GTK would then print a
            # dbind warning that no user sees. NO_AT_BRIDGE is GTK's own switch for that.
            env = {"DISPLAY": display, "DBUS_SESSION_BUS_ADDRESS": bus.address, "NO_AT_BRIDGE": "1"}
            yield env, watcher
    finally:
        thread.close()
        server.close()
        bus.stop()
