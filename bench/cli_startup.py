"""How long `rltray status` and `rltray good` take end to end on a populated data folder.

Builds a throwaway RLTRAY_HOME with --turns captured turns (a quarter of them
rated) and an empty spool, then times each command in process through
``rltray.app.cli.main(argv, env)`` (median of --runs, after one warm-up call
that pays the imports) and as a child process through the installed
``rltray`` script (median of --proc-runs). The target is a median of at most
100 ms in process. A third in-process case times `rltray status` while another
connection holds the database's write lock, which must not slow it down. The
last line is one JSON object holding every figure, for scripts.

    python bench/cli_startup.py [--turns 1000] [--runs 20] [--proc-runs 5]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rltray.app import cli
from rltray.app.paths import Paths
from rltray.app.store import Store

TARGET_MS = 100.0


def populate(home: Path, turns: int) -> None:
    with Store.open(Paths(home)) as store:
        for n in range(turns):
            turn_id, _ = store.add_turn(
                {
                    "agent": "claude-code" if n % 3 else "codex",
                    "session": f"s{n // 20}",
                    "turn": f"t{n}",
                    "prompt": f"prompt {n}: " + "please fix the parser " * 20,
                    "response": f"response {n}: " + "the parser now handles it " * 40,
                    "context": [{"role": "user", "content": f"earlier {n}"}],
                    "cwd": "/work/project",
                    "model": "claude-test",
                    "captured_at": f"2025-01-{1 + n // 1440 % 28:02d}"
                    f"T{n // 60 % 24:02d}:{n % 60:02d}:00Z",
                }
            )
            if n % 4 == 0:
                store.rate(turn_id, 1 if n % 8 else -1, "cli")


def in_process(argv: list[str], home: Path) -> float:
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    code = cli.main(argv, env={"RLTRAY_HOME": str(home)}, stdout=out, stderr=err)
    elapsed = (time.perf_counter() - start) * 1000
    if code != 0:
        raise SystemExit(f"rltray {' '.join(argv)} exited {code}: {err.getvalue()}")
    return elapsed


def as_process(argv: list[str], home: Path) -> float:
    script = Path(sys.executable).with_name("rltray")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "rltray.app.cli"]
    env = {**os.environ, "RLTRAY_HOME": str(home)}
    start = time.perf_counter()
    result = subprocess.run([*command, *argv], capture_output=True, text=True, env=env)
    elapsed = (time.perf_counter() - start) * 1000
    if result.returncode != 0:
        raise SystemExit(f"rltray {' '.join(argv)} exited {result.returncode}: {result.stderr}")
    return elapsed


def median(times: list[float]) -> float:
    return round(statistics.median(times), 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--proc-runs", type=int, default=5)
    args = parser.parse_args(argv)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="rltray-bench-") as tmp:
        home = Path(tmp) / "home"
        populate(home, args.turns)
        in_process(["status"], home)  # warm-up: imports, page cache
        for name in ("status", "good"):
            results[f"{name}_in_process_ms"] = median(
                [in_process([name], home) for _ in range(args.runs)]
            )
        for name in ("status", "good"):
            results[f"{name}_process_ms"] = median(
                [as_process([name], home) for _ in range(args.proc_runs)]
            )
        writer = sqlite3.connect(home / "rltray.db", isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")  # another process is mid-write
        try:
            results["status_while_locked_in_process_ms"] = median(
                [in_process(["status"], home) for _ in range(min(args.runs, 5))]
            )
        except SystemExit as exc:
            print(f"status while another connection holds the write lock failed: {exc}")
            results["status_while_locked_in_process_ms"] = float("nan")
        finally:
            writer.execute("ROLLBACK")
            writer.close()
    for key, value in results.items():
        print(f"{key:36s} {value:8.2f}")
    slow = [k for k, v in results.items() if "in_process" in k and not v <= TARGET_MS]
    print("target met" if not slow else f"over the {TARGET_MS:.0f} ms target: {', '.join(slow)}")
    print(
        json.dumps(
            {
                "turns": args.turns,
                "runs": args.runs,
                "proc_runs": args.proc_runs,
                "python": sys.version.split()[0],
                "sqlite": sqlite3.sqlite_version,
                **results,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
