"""The publish gate's preference test by simulation: how often does it reject, or call better?

Run (pure python + numpy, about a minute on one core):

    .venv/bin/python bench/gate_power.py                   # the tables in bench/README.md
    .venv/bin/python bench/gate_power.py --trials 500      # quicker, noisier

What it does: for a true held-out AUROC ``a`` it draws the implicit rewards of
``good`` good and ``bad`` bad held-out answers from two normal distributions
whose AUROC is exactly ``a`` (bad ~ N(0, 1), good ~ N(sqrt(2) x Phi^-1(a), 1)),
puts them in a ``metrics`` dict with drift well inside the caps, and asks the
real gate (``evaluate.gate``, balanced's ``auroc_tolerance``). Two settings:

* **round 1** — the parent is the base, whose reward is identically 0;
* **round >= 2** — the parent scores the same answers at true AUROC
  ``--parent`` and the new adapter's score is correlated with it (``--rho``,
  the part of each answer's score the round does not change); the table is by
  the new adapter's true AUROC.

Every cell is the share of ``--trials`` draws (fixed seed per cell, so the
tables are the same on every run) the gate rejected (``worse``); with
``--better`` also the share it called ``measurably better``. The last stdout
line is a JSON object with every figure. ``tests/trainer/test_gate_power.py``
pins the issue-20 targets with :func:`rates` from this file.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from statistics import NormalDist
from types import SimpleNamespace
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
AUROCS = (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9)
SIZES = (4, 8, 16, 32)
#: Balanced's gate settings; drift and sanity are set well inside them.
HYPER = SimpleNamespace(auroc_tolerance=0.05, kl_cap=0.1, kl_cap_total=0.6,
                        gate_profile="standard")


def shift_for(auroc: float) -> float:
    """Mean gap d of two unit normals with AUROC ``auroc``: P(good > bad) = Phi(d / sqrt 2)."""
    return math.sqrt(2.0) * NormalDist().inv_cdf(auroc)


def draw(rng: np.random.Generator, auroc: float, per_class: int,
         parent: float | None, rho: float) -> dict[str, Any]:
    """One held-out set's metrics: per-answer rewards of the new adapter (and of the parent)."""
    labels = np.array([1] * per_class + [-1] * per_class)
    good = labels > 0
    if parent is None:
        new = rng.standard_normal(labels.size) + good * shift_for(auroc)
        old = None
    else:
        noise = rng.standard_normal(labels.size)
        old_arr = noise + good * shift_for(parent)
        fresh = rng.standard_normal(labels.size)
        new = rho * noise + math.sqrt(1 - rho * rho) * fresh + good * shift_for(auroc)
        old = old_arr.tolist()
    return {
        "heldout_scores_new": new.tolist(), "heldout_scores_parent": old,
        "heldout_labels": labels.tolist(), "heldout_good": per_class, "heldout_bad": per_class,
        "kl_round": 0.01, "kl_total": 0.01, "sanity_errors": [],
    }  # fmt: skip


def rates(auroc: float, per_class: int, trials: int, *, seed: int = 0,
          parent: float | None = None, rho: float = 0.8) -> dict[str, float]:
    """Shares of ``trials`` simulated rounds the gate called worse (rejected) and better."""
    from rltray.trainer import evaluate

    cell = [seed, per_class, round(auroc * 1000), round((parent or 0) * 1000)]
    rng = np.random.default_rng(cell)
    counts = {"worse": 0, "better": 0, "unchanged": 0, "unmeasured": 0}
    for _ in range(trials):
        verdict = evaluate.gate(draw(rng, auroc, per_class, parent, rho), HYPER)
        counts[verdict.metrics["preference"]] += 1
        assert verdict.accept == (verdict.metrics["preference"] != "worse")
    return {k: v / trials for k, v in counts.items()}


def table(title: str, cells: dict[tuple[float, int], dict[str, float]], key: str) -> list[str]:
    lines = [f"{title}", "",
             "| true AUROC | " + " | ".join(f"{n} + {n}" for n in SIZES) + " |",
             "|---|" + "---|" * len(SIZES)]
    for a in AUROCS:
        lines.append(f"| {a:.2f} | " + " | ".join(f"{cells[a, n][key]:.0%}" for n in SIZES)
                     + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parent", type=float, default=0.7,
                    help="true AUROC of the parent in the round >= 2 table")
    ap.add_argument("--rho", type=float, default=0.8,
                    help="correlation of parent and new score of one answer (round >= 2)")
    ap.add_argument("--better", action="store_true", help="also print the 'better' tables")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT.parent))
    out: dict[str, Any] = {"trials": a.trials, "seed": a.seed, "parent": a.parent, "rho": a.rho}
    for name, parent in (("round1", None), ("round2", a.parent)):
        cells = {(x, n): rates(x, n, a.trials, seed=a.seed, parent=parent, rho=a.rho)
                 for x in AUROCS for n in SIZES}
        title = ("Round 1 (parent = the base): share rejected" if parent is None else
                 f"Round >= 2 (parent at true AUROC {parent}, rho {a.rho}): share rejected")
        print("\n".join(table(title, cells, "worse")) + "\n")
        if a.better:
            print("\n".join(table(title.replace("rejected", "called better"), cells, "better"))
                  + "\n")
        out[name] = {f"{x}@{n}": cells[x, n] for x, n in cells}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
