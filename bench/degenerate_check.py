"""The gate's broken-answer check on adapters real rounds trained (issue 20).

Run:  nice -n 10 .venv/bin/python bench/degenerate_check.py [RUN_FOLDER ...]
      (default: every learning_smollm2.py run under .bench-out/learning-smollm2-*/runs)

For each run folder (its job.json, held-out ratings and trained ``adapter``), the
trainer's own code answers the round's reference prompts as the gate does
(``capability.choose_prompts`` / ``round_start``: the base's greedy answers, 8
prompts x 128 tokens) and then with the run's adapter (``capability.broken_answers``)
and prints how many of each are broken (``capability.degenerate``: empty, looping,
or without the code the base's answer had), the gate's verdict on that alone, and
the bench's own figure for comparison: the share of 160 sampled answers to
held-out tasks that were degenerate, base and adapter (row.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def check(run: Path) -> dict[str, object]:
    from rltray.trainer import capability, evaluate

    from bench.saved_runs import loaded_run, row_of

    with loaded_run(run) as (hyper, backend, pad, prompts):
        state = capability.round_start(backend, prompts, hyper, pad, has_parent=False)
        counts = capability.broken_answers(backend, state, int(hyper.ref_tokens))
    gate = SimpleNamespace(degen_cap=hyper.degen_cap)
    reasons: list[str] = []
    evaluate._broken_answers({**counts, "ref_prompts": len(prompts)}, gate, reasons, [])
    row = row_of(run)
    return {"run": run.name, **counts, "prompts": len(prompts), "rejects": bool(reasons),
            "bench_degenerate": row.get("degenerate"),
            "bench_base_degenerate": row.get("base_degenerate"),
            "accepted_then": row.get("accepted")}


def main() -> int:
    from bench.saved_runs import saved_runs

    runs = [Path(a) for a in sys.argv[1:]] or saved_runs()
    print(f"{'run':48} {'broken base/new':>15} {'rejects':>8} {'bench degen base>new':>21} "
          f"{'accepted then':>13}")
    rows = []
    for run in runs:
        r = check(run)
        rows.append(r)
        bench = (f"{r['bench_base_degenerate']:.2f}>{r['bench_degenerate']:.2f}"
                 if r["bench_degenerate"] is not None and r["bench_base_degenerate"] is not None
                 else "-")
        print(f"{r['run']:48} {r['ref_degenerate_base']:>7}/{r['ref_degenerate_new']:<7} "
              f"{r['rejects']!s:>8} {bench:>21} {r['accepted_then']!s:>13}", flush=True)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
