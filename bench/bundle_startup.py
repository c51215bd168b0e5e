"""The installed bundle: its size, cold start to tray icon, `--selftest` wall time, hook time.

Why: a user downloads the bundle and starts it at login; what they wait for is
the download (the archive), the icon appearing, and, inside every agent turn,
the hook command that now starts the bundle's executable instead of a Python.

What runs: the PyInstaller bundle built from this tree (tests/packaging/
bundlebuild.py: reused while the sources are unchanged, else built first),
under Xvfb with a private dbus-daemon, the fake notification server
(tests/support/dbus_fixtures.py) and the fake StatusNotifierWatcher
(tests/support/traybus.py), each run in a fresh temporary HOME and data folder.

* cold start to tray icon: from exec of `rltray run` to the watcher receiving
  RegisterStatusNotifierItem (a fresh process each time; the files are in the
  page cache after the first run, which is reported apart);
* `--selftest` wall time: exec to exit;
* hook: the installed Claude Code Stop command (rltray-hook) run through /bin/sh,
  exec to exit, and the same argv started by the main executable for comparison.

    python bench/bundle_startup.py [--runs 5]

The last line is one JSON object holding every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support

from tests.support.bundlebuild import CACHE, build  # noqa: E402
from tests.support.dbus_fixtures import BusThread, NotificationServer, PrivateSessionBus, xvfb  # noqa: E402
from tests.support.traybus import WATCHER, WATCHER_PATH, FakeWatcher  # noqa: E402


def fresh_env(base: dict[str, str], root: Path) -> dict[str, str]:
    home = Path(tempfile.mkdtemp(dir=root))
    (home / ".claude").mkdir()
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHON_KEYRING_BACKEND")
    env = {k: v for k, v in base.items() if k not in drop}
    return {**env, "HOME": str(home), "RLTRAY_HOME": str(home / "data"),
            "PATH": "/usr/local/bin:/usr/bin:/bin"}  # fmt: skip


def to_tray_icon(exe: Path, env: dict[str, str], address: str) -> float:
    thread = BusThread(address)
    watcher = FakeWatcher()
    thread.export(WATCHER_PATH, watcher, WATCHER)
    try:
        started = time.monotonic()
        proc = subprocess.Popen(
            [str(exe), "run"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            watcher.wait_for_item(timeout=60)
            return time.monotonic() - started
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    finally:
        thread.close()


def selftest_seconds(exe: Path, env: dict[str, str], address: str) -> float:
    thread = BusThread(address)
    thread.export(WATCHER_PATH, FakeWatcher(), WATCHER)
    try:
        started = time.monotonic()
        done = subprocess.run([str(exe), "--selftest"], env=env, capture_output=True, timeout=120)
        seconds = time.monotonic() - started
    finally:
        thread.close()
    if done.returncode != 0:
        raise SystemExit(f"--selftest failed:\n{done.stdout.decode()}")
    return seconds


def hook_seconds(exe: Path, env: dict[str, str], runs: int) -> dict[str, list[float]]:
    """The installed Stop command (rltray-hook), and the same argv started by the main exe."""
    subprocess.run([str(exe), "hooks", "install", "--agent", "claude-code"], env=env,
                   capture_output=True, check=True, timeout=60)  # fmt: skip
    settings = json.loads((Path(env["HOME"]) / ".claude" / "settings.json").read_text())
    command = settings["hooks"]["Stop"][0]["hooks"][0]["command"]
    argv = shlex.split(command)
    assert argv[0] == str(exe.with_name("rltray-hook")), argv
    commands = {"rltray-hook": command, "rltray": shlex.join([str(exe), *argv[1:]])}
    payload = json.dumps({"session_id": "bench", "cwd": env["HOME"], "hook_event_name": "Stop",
                          "stop_hook_active": False, "last_assistant_message": "done"})
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, line in commands.items():
            started = time.monotonic()
            subprocess.run(line, shell=True, input=payload.encode(), env=env, check=True)
            times[name].append(time.monotonic() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    folder, report = build()
    exe = folder / "rltray"
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    archives = sorted(CACHE.glob("rltray-*.tar.gz"))
    packed = archives[-1].stat().st_size if archives else None
    print(report.strip())
    root = Path(tempfile.mkdtemp(prefix="rltray-bench-bundle-"))
    bus = PrivateSessionBus(root / "dbus")
    server = NotificationServer(bus.address)
    try:
        with xvfb() as display:
            base = {**os.environ, "DISPLAY": display, "DBUS_SESSION_BUS_ADDRESS": bus.address}
            tray = [to_tray_icon(exe, fresh_env(base, root), bus.address)
                    for _ in range(args.runs)]  # fmt: skip
            selftest = [selftest_seconds(exe, fresh_env(base, root), bus.address)
                        for _ in range(args.runs)]  # fmt: skip
            hooks = hook_seconds(exe, fresh_env(base, root), max(args.runs, 10))
    finally:
        server.close()
        bus.stop()
    result = {
        "bundle_mb_on_disk": round(size / 1e6, 1),
        "archive_mb": round(packed / 1e6, 1) if packed else None,
        "tray_icon_first_s": round(tray[0], 3),
        "tray_icon_median_s": round(statistics.median(tray[1:] or tray), 3),
        "selftest_first_s": round(selftest[0], 3),
        "selftest_median_s": round(statistics.median(selftest[1:] or selftest), 3),
        "hook_stop_median_ms": round(statistics.median(hooks["rltray-hook"]) * 1000, 1),
        "hook_via_main_exe_median_ms": round(statistics.median(hooks["rltray"]) * 1000, 1),
        "runs": args.runs,
    }
    for key, value in result.items():
        print(f"{key:>22}: {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
