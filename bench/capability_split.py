"""Where a round's capability cost falls: the user's kind of prompt, or everything (issue 20).

Run:  nice -n 10 .venv/bin/python bench/capability_split.py [RUN_FOLDER ...]
      (default: every learning_smollm2.py run with an adapter under .bench-out/)

Why: the gate's capability check scores the base model's greedy answers to the
round's own prompts. On a style preference (``comment``) that reads the style
itself as capability lost: the base's answers lack it, and the round makes them
less likely. This bench scores each trained adapter two ways with the trainer's
own code (``capability.round_start``, base vs adapter NLL):

* ``rated``: the gate's figure, the base's greedy answers to 8 of the round's prompts;
* ``general``: the base's greedy answers to all 16 ``capability.GENERAL_PROMPTS``
  (rendered as the gate renders them; it uses the first 8), everyday
  requests unlike the rated coding ones, where no coding style applies;

beside the bench's own reference NLL (row.json: all 24 references, and split by
whether a reference has the preference).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(run: Path, general: int) -> dict[str, object]:
    from rltray.trainer import capability

    from bench.saved_runs import loaded_run, row_of

    out: dict[str, object] = {"run": run.name}
    with loaded_run(run) as (hyper, backend, pad, rated):
        everyday = capability.general_prompts(backend.tokenizer, general)
        for name, prompts in (("rated", rated), ("general", everyday)):
            state = capability.round_start(backend, prompts, hyper, pad, has_parent=True)
            out[name] = state["nll_parent"] / state["nll_base"] - 1.0
            out[f"{name}_base_nll"] = state["nll_base"]
    row = row_of(run)
    out.update({k: row.get(k) for k in ("nll_change", "nll_pref_change", "nll_other_change",
                                        "pref", "base_pref")})
    return out


def main() -> int:
    from bench.saved_runs import saved_runs

    runs = [Path(a) for a in sys.argv[1:]] or saved_runs()
    print(f"{'run':52} {'gap':>5} {'bench nll+%':>11} {'with/without pref':>17} "
          f"{'gate rated':>10} {'general':>8}")
    rows = []
    for run in runs:
        r = measure(run, 16)  # all of them: the gate uses the first 8
        rows.append(r)

        def pct(v: object) -> str:
            return f"{100 * float(v):+.1f}%" if v is not None else "-"  # type: ignore[arg-type]

        gap = "-"
        if r["pref"] is not None and r["base_pref"] is not None:
            gap = f"{(r['pref'] - r['base_pref']) / (1 - r['base_pref']):.2f}"  # type: ignore[operator]
        split = f"{pct(r['nll_pref_change'])} / {pct(r['nll_other_change'])}"
        print(f"{r['run']:52} {gap:>5} {pct(r['nll_change']):>11} {split:>17} "
              f"{pct(r['rated']):>10} {pct(r['general']):>8}", flush=True)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
