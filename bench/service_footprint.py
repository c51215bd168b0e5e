"""The running rltray process: hook fired → rating notification, then its idle footprint.

Why: rltray runs all day next to the user's editor and agent; it must answer a
finished turn fast (target: the notification reaches the server ≤ 300 ms median
after the agent runs the hook) and cost nothing while idle (targets: ≤ 80 MB
RSS, ≤ 0.2% of one core over 60 s, no torch / transformers / mlx loaded).

What runs: `rltray run` as a child process (the real tray under Xvfb with a fake
StatusNotifierWatcher when Xvfb and PyGObject are present, else the headless
service, said in the output), on a private D-Bus with the fake notification
server from tests/support/dbus_fixtures.py, in a temporary HOME with the Claude Code
hooks installed by `rltray hooks install`. Each turn runs the installed
UserPromptSubmit and Stop commands exactly as Claude Code does; the latency is
from starting the Stop hook to the Notify call arriving at the server.

    python bench/service_footprint.py [--turns 20] [--idle 60]

The last line is one JSON object holding every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support

import psutil

from tests.support.dbus_fixtures import BusThread, NotificationServer, PrivateSessionBus, xvfb

HEAVY = ("torch", "transformers", "mlx", "peft")


def has_real_tray() -> bool:
    check = (
        "import gi; gi.require_version('Gtk', '3.0'); "
        "gi.require_version('AyatanaAppIndicator3', '0.1'); "
        "from gi.repository import Gtk, AyatanaAppIndicator3"
    )
    probe = subprocess.run([sys.executable, "-c", check], capture_output=True)
    return shutil.which("Xvfb") is not None and probe.returncode == 0


def hook_commands(home: Path) -> dict[str, str]:
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    return {
        event: next(h["command"] for g in settings["hooks"][event] for h in g["hooks"])
        for event in ("UserPromptSubmit", "Stop")
    }


def fire(commands: dict[str, str], env: dict[str, str], cwd: Path, n: int) -> float:
    """One turn through the installed hooks; returns the Stop hook's start time."""
    common = {"session_id": f"bench-{n}", "cwd": str(cwd), "transcript_path": None}
    prompt = {**common, "hook_event_name": "UserPromptSubmit", "prompt": f"task {n}"}
    subprocess.run(commands["UserPromptSubmit"], shell=True, input=json.dumps(prompt),
                   env=env, text=True, check=True, capture_output=True)  # fmt: skip
    stop = {**common, "hook_event_name": "Stop", "stop_hook_active": False,
            "last_assistant_message": f"Done with task {n}: the tests pass."}  # fmt: skip
    started = time.perf_counter()
    subprocess.run(commands["Stop"], shell=True, input=json.dumps(stop), env=env, text=True,
                   check=True, capture_output=True)  # fmt: skip
    return started


def heavy_libraries(pid: int) -> list[str]:
    """Mapped files of the process that belong to an ML stack (Linux /proc only)."""
    maps = Path(f"/proc/{pid}/maps")
    if not maps.exists():
        return []
    found = set()
    for line in maps.read_text().splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        for name in HEAVY:
            if f"/{name}/" in path or f"/lib{name}" in path:
                found.add(name)
    return sorted(found)


def measure(turns: int, idle_s: float, tray: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="rltray-bench-") as tmp:
        root = Path(tmp)
        home, data, project = root / "home", root / "data", root / "project"
        for folder in (home / ".claude", data, project):
            folder.mkdir(parents=True)
        (home / ".claude" / "settings.json").write_text("{}")
        bus = PrivateSessionBus(root / "dbus")
        server = NotificationServer(bus.address)
        watcher_thread = None
        env = {**os.environ, "HOME": str(home), "RLTRAY_HOME": str(data),
               "DBUS_SESSION_BUS_ADDRESS": bus.address}  # fmt: skip
        env.pop("DISPLAY", None)
        display_ctx = xvfb() if tray else None
        try:
            if display_ctx is not None:
                from tests.support.traybus import WATCHER, WATCHER_PATH, FakeWatcher

                env["DISPLAY"] = display_ctx.__enter__()
                env["PYSTRAY_BACKEND"] = "appindicator"
                watcher_thread = BusThread(bus.address)
                watcher_thread.export(WATCHER_PATH, FakeWatcher(), WATCHER)
            cli = [sys.executable, "-m", "rltray.app.cli"]
            subprocess.run([*cli, "hooks", "install", "--agent", "claude-code"], env=env,
                           check=True, capture_output=True)  # fmt: skip
            subprocess.run([*cli, "config", "set", "notify.ask", "every"], env=env,
                           check=True, capture_output=True)  # fmt: skip
            commands = hook_commands(home)
            proc = subprocess.Popen([*cli, "run"], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)  # fmt: skip
            try:
                deadline = time.monotonic() + 60
                while not (data / "endpoint.json").exists():
                    assert proc.poll() is None, "rltray run exited"
                    assert time.monotonic() < deadline, "rltray run did not start"
                    time.sleep(0.05)
                time.sleep(1.0)  # let the notifier finish its probe
                latencies = []
                for n in range(turns):
                    before = len(server.calls)
                    started = fire(commands, env, project, n)
                    call = server.wait_for_calls(before + 1, timeout=30)[before]
                    latencies.append(call.received - started)
                    time.sleep(0.2)
                process = psutil.Process(proc.pid)
                time.sleep(2.0)  # settle after the last turn
                cpu0 = process.cpu_times()
                t0 = time.monotonic()
                rss, uss, pss = [], [], []
                while time.monotonic() - t0 < idle_s:
                    full = process.memory_full_info()
                    rss.append(full.rss)
                    uss.append(getattr(full, "uss", 0))
                    pss.append(getattr(full, "pss", 0))
                    time.sleep(1.0)
                cpu1 = process.cpu_times()
                wall = time.monotonic() - t0
                heavy = heavy_libraries(proc.pid)
                threads = process.num_threads()
            finally:
                proc.terminate()
                proc.wait(30)
        finally:
            if watcher_thread is not None:
                watcher_thread.close()
            if display_ctx is not None:
                display_ctx.__exit__(None, None, None)
            server.close()
            bus.stop()
    latencies.sort()
    busy = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return {
        "mode": "tray (AppIndicator under Xvfb)" if tray else "headless (no tray available)",
        "turns": turns,
        "hook_to_notify_median_ms": round(statistics.median(latencies) * 1000, 1),
        "hook_to_notify_p95_ms": round(
            latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))] * 1000, 1
        ),
        "idle_seconds": round(wall, 1),
        "idle_rss_max_mb": round(max(rss) / 2**20, 1),
        "idle_rss_median_mb": round(statistics.median(rss) / 2**20, 1),
        "idle_uss_median_mb": round(statistics.median(uss) / 2**20, 1),
        "idle_pss_median_mb": round(statistics.median(pss) / 2**20, 1),
        "idle_cpu_percent_of_one_core": round(100 * busy / wall, 3),
        "threads": threads,
        "ml_libraries_loaded": heavy,
        "targets": {"hook_to_notify_median_ms": 300, "rss_mb": 80, "cpu_percent": 0.2},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle sampling")
    parser.add_argument("--headless", action="store_true", help="measure without the tray")
    args = parser.parse_args(argv)
    if shutil.which("dbus-daemon") is None:
        print("needs dbus-daemon (Debian: apt install dbus)", file=sys.stderr)
        return 2
    r = measure(args.turns, args.idle, tray=has_real_tray() and not args.headless)
    print(f"rltray run — {r['mode']}")
    print(
        f"  hook fired → notification at the server: median {r['hook_to_notify_median_ms']} ms, "
        f"p95 {r['hook_to_notify_p95_ms']} ms over {r['turns']} turns (target ≤ 300 ms median)"
    )
    print(
        f"  idle {r['idle_seconds']} s: RSS median {r['idle_rss_median_mb']} MB, "
        f"max {r['idle_rss_max_mb']} MB (target ≤ 80); unique to it (USS) "
        f"{r['idle_uss_median_mb']} MB, PSS {r['idle_pss_median_mb']} MB; "
        f"CPU {r['idle_cpu_percent_of_one_core']}% of one core (target ≤ 0.2); "
        f"{r['threads']} threads"
    )
    print(f"  ML libraries loaded: {r['ml_libraries_loaded'] or 'none'}")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
