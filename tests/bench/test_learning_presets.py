"""Smoke run of bench/learning.py's preset mode (issue 8, "Safe presets") on both backends.

The preset mode is how we show that no preset collapses the model on torch or MLX;
if it rots, that evidence can no longer be produced. This runs it as a user does
(a child process, its own output folder) at the smallest sizes that still drive
the trainer through its job file on each backend, and checks that every row
carries the columns the claim rests on: steps run / planned, the drift guard's
verdict, the largest gradient norm and k3, and the collapse verdict.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

pytestmark = [pytest.mark.slow, pytest.mark.ml]


@pytest.mark.skipif(
    importlib.util.find_spec("mlx") is None, reason="needs mlx (pip install 'mlx[cpu]')"
)
def test_learning_preset_mode_runs_on_torch_and_mlx(tmp_path: Path) -> None:
    args = [
        str(BENCH / "learning.py"), "--quick", "--out", str(tmp_path),
        "--presets", "aggressive", "--backends", "torch,mlx", "--sources", "on",
        "--sizes", "8", "--eval-prompts", "8", "--heldout-ratings", "8",
        "--pretrain-steps", "4",
        # a 4-step base has no real preferences: the profile made for such models
        "--gate-profile", "tiny-test",
    ]
    proc = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = out["rows"]
    assert [(r["backend"], r["preset"]) for r in rows] == [
        ("torch", "aggressive"), ("mlx", "aggressive"),
    ]
    for r in rows:
        assert "error" not in r, r
        assert r["steps_planned"] == 4  # 8 ratings, 16 per step, aggressive's 4 epochs
        assert 0 <= r["steps_run"] <= r["steps_planned"]
        assert r["stopped_early"] is None or r["stopped_early"].startswith("drift guard")
        assert math.isfinite(r["max_grad_norm"]) and r["max_grad_norm"] > 0
        assert math.isfinite(r["max_k3"]) and r["max_k3"] >= 0
        assert isinstance(r["collapsed"], bool) and isinstance(r["collapse_reasons"], list)
        assert 0.0 <= r["pref"] <= 1.0 and math.isfinite(r["ppl_change"])
    # the printed table has the new columns too
    assert "guard" in proc.stdout and "collapsed" in proc.stdout
