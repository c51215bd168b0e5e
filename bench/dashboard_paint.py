"""First paint of the settings window's dashboard: server time with 10,000 turns and 50 runs.

Fills a fresh data folder with N captured turns (most of them rated, over 90
days, some trained) and M finished training runs with their metrics, starts
the real web server on 127.0.0.1 (timed apart: it compiles the templates), and
times what the window does first — the launch URL, its redirect and ``GET /``,
whose HTML carries the chart data — then ``GET /`` again and the ratings
browser's first page. "Server time" is request sent
to last byte received over the loopback socket; the browser's own layout is
not in it. Prints cold (first request) and warm median / p95, and a last line
of JSON; target: cold and warm median <= 300 ms.

    .venv/bin/python bench/dashboard_paint.py [--turns 10000] [--runs 50] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from http.cookiejar import CookieJar
from pathlib import Path

TARGET_MS = 300.0


def fill(home: Path, turns: int, runs: int, seed: int = 0) -> None:
    from rltray.app.paths import Paths
    from rltray.app.store import Store

    rng = random.Random(seed)
    now = datetime.now(timezone.utc)
    with Store.open(Paths(home)) as store, store.batch():
        rated = []
        for i in range(turns):
            at = now - timedelta(minutes=rng.randint(0, 90 * 24 * 60))
            turn_id, _ = store.add_turn({
                "agent": "claude-code" if i % 2 else "codex",
                "session": f"s{i % 50}", "turn": f"t{i}",
                "prompt": f"Question {i}: " + "why does the parser fail " * 8,
                "response": "Because the tokenizer " * 60 + "\n```python\nprint(1)\n```",
                "context": [{"role": "user", "content": "earlier " * 40}],
                "cwd": f"/work/project-{i % 12}", "captured_at": at.isoformat(),
            })  # fmt: skip
            if i % 5:
                store.rate(turn_id, 1 if rng.random() < 0.6 else -1, "cli", at=at)
                rated.append(turn_id)
        for k in range(runs):
            run_id = f"run-{k:03d}"
            start = now - timedelta(days=runs - k)
            store.add_run(run_id, at=start)
            store.finish_run(run_id, "done", at=start + timedelta(minutes=rng.randint(3, 40)),
                             metrics=_run_metrics(rng))  # fmt: skip


def _run_metrics(rng: random.Random) -> dict[str, object]:
    return {
        "auroc_new": rng.uniform(0.5, 0.9),
        "kl_to_base": rng.uniform(0.001, 0.05),
        "accepted": rng.random() < 0.7,
        "fresh": 32,
        "heldout": 8,
        "progress": {"loss": rng.uniform(0.1, 1.0), "masked_tokens": rng.uniform(0.0, 0.3)},
    }


def timed(opener: urllib.request.OpenerDirector, url: str) -> tuple[float, int]:
    start = time.perf_counter()
    with opener.open(url, timeout=60) as response:
        body = response.read()
    return (time.perf_counter() - start) * 1000.0, len(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rltray-bench-") as tmp:
        home = Path(tmp) / "home"
        os.environ["RLTRAY_HOME"] = str(home)
        started = time.perf_counter()
        fill(home, args.turns, args.runs)
        fill_s = time.perf_counter() - started

        from rltray.app.paths import Paths
        from rltray.app.runtime import Runtime
        from rltray.app.service import Service
        from rltray.web.server import WebServer

        service = Service(Paths(home))
        started = time.perf_counter()
        server = WebServer(Runtime(service)).start()
        start_ms = (time.perf_counter() - started) * 1000.0
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        try:
            launch = server.launch_url("")
            started = time.perf_counter()
            with opener.open(launch, timeout=60) as first_page:  # launch -> 303 -> GET /
                size = len(first_page.read())
            cold_ms = (time.perf_counter() - started) * 1000.0
            warm = [timed(opener, server.base_url + "/")[0] for _ in range(args.repeat)]
            ratings = [timed(opener, server.base_url + "/ratings")[0] for _ in range(args.repeat)]
        finally:
            server.stop()
            service.close()

    def p95(values: list[float]) -> float:
        return sorted(values)[max(0, round(0.95 * len(values)) - 1)]

    result = {
        "turns": args.turns,
        "runs": args.runs,
        "server_start_ms": round(start_ms, 1),
        "dashboard_cold_ms": round(cold_ms, 1),
        "dashboard_warm_median_ms": round(statistics.median(warm), 1),
        "dashboard_warm_p95_ms": round(p95(warm), 1),
        "dashboard_html_bytes": size,
        "ratings_first_page_median_ms": round(statistics.median(ratings), 1),
        "fill_s": round(fill_s, 1),
        "target_ms": TARGET_MS,
        "within_target": cold_ms <= TARGET_MS and statistics.median(warm) <= TARGET_MS,
    }
    print(f"store: {args.turns} turns, {args.runs} runs (filled in {fill_s:.1f} s)")
    print(f"server start (templates compiled, imports done): {start_ms:.1f} ms")
    print(f"dashboard first paint (launch URL -> 303 -> GET /): {cold_ms:.1f} ms ({size} bytes)")
    print(f"dashboard GET / warm: median {result['dashboard_warm_median_ms']} ms,"
          f" p95 {result['dashboard_warm_p95_ms']} ms; target <= {TARGET_MS:.0f} ms")
    print(f"ratings first page: median {result['ratings_first_page_median_ms']} ms")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
