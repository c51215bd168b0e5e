"""Smoke run of ``bench/train_speed.py --versus reinforceclaw`` at tiny sizes.

Why: the side-by-side drives two real trainers through their own entry points
(``python -m rltray.trainer JOB.json`` and ReinforceClaw's ``train_result``), and
either one changing its outputs (the ``done`` metrics, ReinforceClaw's backend
methods or its loss-function factory) would silently turn the comparison into an
error row. One interleaved round each on the tiny model (4 examples of 40-80
tokens) keeps every code path alive in well under two minutes.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.ml]


@pytest.mark.skipif(
    importlib.util.find_spec("reinforceclaw") is None,
    reason="reinforceclaw is not installed (pip install --no-deps reinforceclaw==0.1.0, "
    "or the bench extra)",
)
def test_versus_reinforceclaw_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable, str(ROOT / "bench" / "train_speed.py"), "--versus", "reinforceclaw",
            "--quick", "--examples", "4", "--reps", "1", "--matmul-n", "256",
            "--out", str(tmp_path),
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=115, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    out = json.loads(lines[-1])
    assert out["tokens"] > 0 and out["matmul_peak"][0]["gflops"] > 0
    by_tool = {r["tool"]: r for r in out["runs"]}
    assert set(by_tool) == {"rltray", "reinforceclaw"}
    for tool, run in by_tool.items():
        assert "error" not in run, run
        assert run["tok_s_steps"] > 0 and run["tok_s_wall"] > 0, tool
        assert 0 < run["step_s"] < run["wall_s"], tool
    # Both tools trained on the same text, one pass: the same token count.
    assert by_tool["reinforceclaw"]["tokens"] == by_tool["rltray"]["tokens"] == out["tokens"]
    assert by_tool["reinforceclaw"]["batch"] == 4
    assert any(line.startswith("rltray ") and " med " in line for line in lines)
    assert any(line.startswith("reinforceclaw ") and " med " in line for line in lines)
    assert "rltray / reinforceclaw: tok/s over the steps" in proc.stdout
    # one round on a fresh model in a fresh HOME: the base's answers were decoded, not kept
    assert by_tool["rltray"]["answers_kept"] == 0
    assert "answer sets taken from the cache" in proc.stdout
