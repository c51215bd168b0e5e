"""Smoke runs of the benchmarks at minimal sizes, so they cannot rot unnoticed.

Each bench runs as the user runs it (a child process, its own output folder) and
must exit 0 with a last stdout line that is one JSON object holding real figures.
Sizes are the smallest that still exercise every code path: the trainer through
its job file, KTO through TRL, SFT, the style classifier, the metrics, and each
training backend once.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

pytestmark = [pytest.mark.slow, pytest.mark.ml]


def _run(args: list[str], timeout: float) -> dict:
    proc = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    return json.loads(last)


def test_synthetic_styles_are_recognised_for_both_generators() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import random

        import synthetic
    finally:
        sys.path.remove(str(BENCH))
    rng = random.Random(0)
    for task in range(len(synthetic.TASKS)):
        for style in synthetic.STYLES:
            assert synthetic.classify(synthetic.base_response(task, style, rng)) == style
            assert synthetic.classify(synthetic.cloud_response(task, style, rng)) == style
    assert synthetic.classify("def f(): pass") == "other"
    user = synthetic.SimulatedUser("terse", noise=0.0)
    assert user.rate(synthetic.base_response(0, "terse", rng), rng) == 1
    assert user.rate(synthetic.base_response(0, "apology", rng), rng) == -1
    train, held = synthetic.split_tasks(0)
    assert not set(train) & set(held) and len(train) + len(held) == len(synthetic.TASKS)


def test_learning_bench_smoke(tmp_path: Path) -> None:
    out = _run(
        [
            str(BENCH / "learning.py"), "--quick", "--out", str(tmp_path),
            "--methods", "mispo,kto,sft", "--sources", "on", "--sizes", "8",
            "--eval-prompts", "8", "--heldout-ratings", "8", "--pretrain-steps", "4",
            "--ablations", "",
        ],
        timeout=300,
    )
    rows = out["rows"]
    assert {r["method"] for r in rows} == {"mispo", "kto", "sft"}
    for r in rows:
        assert "error" not in r, r
        assert 0.0 <= r["pref"] <= 1.0
        assert r["kl"] >= 0.0 and math.isfinite(r["ppl_change"])
    mispo = next(r for r in rows if r["method"] == "mispo")
    assert mispo["steps"] >= 1  # progress lines came back through the job contract
    assert 0.0 <= out["base"]["pref"] <= 1.0


def test_train_speed_smoke(tmp_path: Path) -> None:
    out = _run(
        [
            str(BENCH / "train_speed.py"), "--quick", "--backends", "torch", "--out",
            str(tmp_path), "--steps", "1", "--matmul-n", "256",
        ],
        timeout=300,
    )
    (row,) = out["backends"]
    assert "error" not in row, row
    assert row["train_tokens_per_s"] > 0 and row["peak_rss_mb"] > 0
    assert out["matmul_peak"]["torch"]["gflops"] > 0


def test_attention_cost_times_both_attention_forms_and_the_decoding_matmuls() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "attention_cost.py"), "--tokens", "48", "--reps", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines() if " forward " in line]
    assert [(r[0], r[1]) for r in rows] == [
        ("bfloat16", "sdpa"), ("bfloat16", "plain"), ("float32", "sdpa"), ("float32", "plain"),
    ]
    for r in rows:  # forward, backward and both, in milliseconds, every one measured
        numbers = [float(r[i]) for i in (3, 6, 9)]
        assert all(n > 0 for n in numbers) and math.isclose(numbers[0] + numbers[1],
                                                           numbers[2], abs_tol=0.02)
    assert "0.1 MiB of probabilities" in proc.stdout  # 9 x 48 x 48 x 6 bytes
    last = proc.stdout.strip().splitlines()[-1]
    assert float(last.rsplit(":", 1)[1].split()[0]) > 0


def test_round_phases_times_every_phase_of_a_real_round(tmp_path: Path) -> None:
    got = _run([str(BENCH / "round_phases.py"), "--shape", "quick", "--examples", "4",
                "--out", str(tmp_path)], 600)  # fmt: skip
    (round_,) = got["rounds"]
    phases = round_["phases"]
    for phase in ("load the model", "round start", "optimisation loop", "end of the round",
                  "  broken-answer check"):
        assert phases[phase] > 0, phase
    assert round_["main_s"] >= phases["optimisation loop"] + phases["end of the round"]
