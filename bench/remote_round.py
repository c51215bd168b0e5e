"""Remote-round benchmark (issue 26): what going through SSH + Ray Jobs costs a round.

Run:  nice -n 5 .venv/bin/python bench/remote_round.py [--epochs 2]

What it does: builds the tiny Llama the tests train, starts a private sshd on a free
127.0.0.1 port and a single-node Ray head with token auth (one logical GPU), rates
16 turns into two fresh data folders, and runs the same round twice through the
real ``TrainingRunner``: once locally, once through the remote stand-in (SSH, the
dashboard forward, SFTP upload, Ray Jobs, log polling, SFTP fetch with SHA-256
check). Prints, for each: "Train now" (``runner.start()``) to the first progress
line, the whole round, and for the remote one the stand-in's own figures (upload,
submit to the first marked log line, fetch); plus the Ray head's start time and
memory (PSS of the head's process group, idle and after the round). Stops only
the processes it started, by their ids. Needs openssh-server, asyncssh and
``ray[default]`` (the ``remote`` and ``ray-head`` extras). The last stdout line is
one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import keyring  # noqa: E402
import psutil  # noqa: E402

from tests.conftest import MemoryKeyring  # noqa: E402 (secrets in a dict, never the user's keyring)
from tests.remote.conftest import free_port, start_sshd, stop_group, wait_port  # noqa: E402

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
HYPER = {"rank": 4, "alpha": 8.0, "lr": 0.01, "warmup_steps": 1, "batch_size": 2,
         "step_examples": 4, "max_seq_len": 96, "gate_profile": "tiny-test"}  # fmt: skip
REMOTE_KEYS = ("remote_upload_s", "remote_submit_s", "remote_fetch_s")
ENV = {"RLTRAY_TRAINER_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def start_head(temp: Path, token: str) -> tuple[subprocess.Popen, int, float]:
    dash = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}  # fmt: skip
    cmd = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
           "--num-gpus", "1", "--num-cpus", "2", "--node-ip-address", "127.0.0.1",
           "--dashboard-host", "127.0.0.1", "--port", str(free_port()),
           "--dashboard-port", str(dash), "--ray-client-server-port", str(free_port()),
           "--dashboard-agent-listen-port", str(free_port()), "--temp-dir", str(temp),
           "--disable-usage-stats"]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    wait_port(dash, proc, "the Ray head", 180)
    from tests.remote.conftest import _wait_jobs_api

    _wait_jobs_api(dash, token)
    return proc, dash, time.monotonic() - t0


def group_rss(pgid: int) -> int:
    """Proportional set size (PSS) of the head's process group: shared libraries counted
    once across Ray's processes, where a plain RSS sum counts them in every process."""
    total = 0
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid:
                info = p.memory_full_info()
                total += getattr(info, "pss", info.rss)
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return total


def one_round(home: Path, training: Any, epochs: int) -> dict[str, Any]:
    """Rate 16 turns in a fresh data folder and train one round; its timings."""
    os.environ["RLTRAY_HOME"] = str(home)
    from rltray.app.config import Config
    from rltray.app.paths import Paths
    from rltray.app.store import Store
    from rltray.app.training.runner import TrainingRunner

    paths = Paths.from_env()
    with Store.open(paths) as store:
        for i in range(16):
            turn_id, _ = store.add_turn({
                "v": 1, "kind": "turn", "agent": "claude-code", "session": "s",
                "turn": f"t{i}", "prompt": f"Question {i}: how do I fix it?",
                "response": "Add a regression test first." if i % 2 == 0 else "Delete the test.",
                "context": [], "cwd": "/w", "model": "m", "event": "stop", "transcript": None,
                "captured_at": f"2025-01-01T00:00:{i:02d}Z",
            })  # fmt: skip
            store.rate(turn_id, 1 if i % 2 == 0 else -1, "cli", at=T0 + timedelta(minutes=i))
        first = threading.Event()
        runner = TrainingRunner(
            store, paths, lambda: Config(training=training),
            on_change=lambda p: first.set() if p.get("step") else None,
            hyper={**HYPER, "epochs": epochs}, device="cpu", env=ENV,
        )  # fmt: skip
        t0 = time.monotonic()
        run_id = runner.start()
        first.wait(600)
        t_first = time.monotonic() - t0
        runner.wait(900)
        total = time.monotonic() - t0
        run = store.get_run(run_id)
        assert run is not None and run.status == "done", (
            run.status if run else None,
            run.error if run else "",
        )
        m = run.metrics
        return {"first_progress_s": round(t_first, 2), "round_s": round(total, 2),
                **{k: m[k] for k in REMOTE_KEYS if k in m}}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    keyring.set_keyring(MemoryKeyring())
    from rltray.app import secrets as keyring_secrets
    from rltray.app.config import TrainingSettings
    from rltray.trainer.tiny import build_tiny_llama

    work = Path(tempfile.mkdtemp(prefix="rltray-bench-remote-"))
    temp = Path(tempfile.mkdtemp(prefix="rtb-", dir="/tmp"))
    sshd = head = None
    try:
        model = build_tiny_llama(work / "model")
        sshd, port, fp, client_key = start_sshd(work)
        token = secrets.token_hex(24)
        head, dash, head_start = start_head(temp, token)
        time.sleep(5)  # let the head settle before reading its memory
        idle_rss = group_rss(head.pid)
        keyring_secrets.set_secret("remote-ssh-key", client_key)
        keyring_secrets.set_secret("ray-token", token)
        local = TrainingSettings(base_model=str(model), backend="torch", python=sys.executable)
        import pwd

        remote = local.model_copy(update={
            "remote_host": "127.0.0.1", "remote_port": port, "remote_host_key": fp,
            "remote_user": pwd.getpwuid(os.geteuid()).pw_name, "remote_dashboard_port": dash,
            "remote_dir": str(work / "remote"), "remote_python": sys.executable,
        })  # fmt: skip
        results = {"local": one_round(work / "home-local", local, args.epochs)}
        results["remote"] = one_round(work / "home-remote", remote, args.epochs)
        after_rss = group_rss(head.pid)
        figures = {
            "head_start_s": round(head_start, 2), "head_rss_idle_mb": round(idle_rss / 2**20),
            "head_rss_after_round_mb": round(after_rss / 2**20), **results,
        }  # fmt: skip
        lo, re_ = results["local"], results["remote"]
        print(f"Ray head: ready in {head_start:.1f} s; {idle_rss / 2**20:.0f} MB idle, "
              f"{after_rss / 2**20:.0f} MB after one round (PSS of its process group)")  # fmt: skip
        print(
            f"{'':8} {'first progress':>15} {'round':>8} {'upload':>8} {'submit':>8} {'fetch':>8}"
        )
        for name, r in (("local", lo), ("remote", re_)):
            cells = [f"{r[k]:>7.2f}s" if k in r else f"{'-':>8}" for k in REMOTE_KEYS]
            head_cells = f"{name:8} {r['first_progress_s']:>14.2f}s {r['round_s']:>7.2f}s "
            print(head_cells + " ".join(cells))
        print(f"overhead: +{re_['first_progress_s'] - lo['first_progress_s']:.2f} s to the first "
              f"progress line, +{re_['round_s'] - lo['round_s']:.2f} s per round")  # fmt: skip
        print(json.dumps(figures))
        return 0
    finally:
        for proc in (head, sshd):
            if proc is not None:
                stop_group(proc, grace=10)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
