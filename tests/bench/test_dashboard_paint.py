"""bench/dashboard_paint.py runs as the user runs it, at a small size, and prints real figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dashboard_paint_bench_runs() -> None:
    done = subprocess.run(
        [sys.executable, "bench/dashboard_paint.py", "--turns", "300", "--runs", "3",
         "--repeat", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["turns"] == 300 and result["runs"] == 3
    assert result["dashboard_cold_ms"] > 0 and result["dashboard_html_bytes"] > 1000
    assert " - - [" not in done.stderr  # the server does not log a line per request
