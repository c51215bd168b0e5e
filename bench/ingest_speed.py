"""How long storing waiting hook records takes (target: 10,000 records in <= 3 s).

Writes N spool records exactly as the hook leaves them (turns of realistic size,
every fifth followed by a `/rl` command for it) into a fresh data folder, then
times one `spool.ingest` pass over a real SQLite file. Prints records/s and the
total; run with `.venv/bin/python bench/ingest_speed.py [--records N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import string
import tempfile
import time
from pathlib import Path

from rltray.app import spool
from rltray.app.paths import Paths
from rltray.app.store import Store

TARGET_S = 3.0


def prose(rng: random.Random, words: int) -> str:
    return " ".join(
        "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(words)
    )


def write_records(paths: Paths, count: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    incoming = paths.spool_incoming
    ns = 1_700_000_000_000_000_000
    written = 0
    turn = 0
    while written < count:
        turn += 1
        session = f"session-{turn % 37}"
        record = {
            "v": 1,
            "kind": "turn",
            "agent": "claude-code" if turn % 2 else "codex",
            "session": session,
            "turn": f"turn-{turn}",
            "prompt": prose(rng, 40),
            "response": prose(rng, 300) + "\n```python\ndef f(x):\n    return x * 2\n```\n",
            "context": [{"role": "user", "content": prose(rng, 30)}],
            "cwd": f"/home/dev/project-{turn % 5}",
            "model": "claude-test",
            "captured_at": "2026-11-23T10:00:00Z",
            "event": "stop",
        }
        ns += 1000
        (incoming / f"{ns:020d}-1-{turn:08x}.json").write_text(json.dumps(record))
        written += 1
        if turn % 5 == 0 and written < count:
            command = {
                "v": 1,
                "kind": "command",
                "agent": record["agent"],
                "session": session,
                "command": "good" if turn % 10 else "bad",
                "target_turn": f"turn-{turn}",
                "comment": None,
                "captured_at": "2026-11-23T10:00:01Z",
            }
            ns += 1000
            (incoming / f"{ns:020d}-1-c{turn:07x}.json").write_text(json.dumps(command))
            written += 1


def run_once(count: int) -> tuple[float, spool.IngestReport]:
    with tempfile.TemporaryDirectory() as tmp:
        paths = Paths(Path(tmp) / "home").ensure()
        write_records(paths, count)
        with Store.open(paths) as store:
            start = time.perf_counter()
            report = spool.ingest(paths, store)
            elapsed = time.perf_counter() - start
        assert not os.listdir(paths.spool_incoming), "records left behind"
    return elapsed, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times = []
    for _ in range(args.repeats):
        elapsed, report = run_once(args.records)
        times.append(elapsed)
    median = statistics.median(times)
    print(f"ingest of {args.records} spool records ({report.turns} turns, "
          f"{report.commands} commands, {report.rejected} rejected)")
    print(f"  median {median:.2f} s over {args.repeats} runs "
          f"({args.records / median:,.0f} records/s; runs: "
          + ", ".join(f"{t:.2f}" for t in times) + ")")
    verdict = "meets" if median <= TARGET_S else "MISSES"
    print(f"  target <= {TARGET_S:.1f} s for 10,000 records: {verdict}")


if __name__ == "__main__":
    main()
