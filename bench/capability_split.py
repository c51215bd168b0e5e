"""Where a round's capability cost falls: the user's kind of prompt, or everything (issue 20).

Run:  nice -n 10 .venv/bin/python bench/capability_split.py [RUN_FOLDER ...]
      (default: every learning_smollm2.py run with an adapter under .bench-out/)

Why: the gate's capability check scores the base model's greedy answers to the
round's own prompts. On a style preference (``comment``) that reads the style
itself as capability lost: the base's answers lack it, and the round makes them
less likely. This bench scores each trained adapter two ways with the trainer's
own code (``capability.round_start``, base vs adapter NLL):

* ``rated``: the gate's figure, the base's greedy answers to 8 of the round's prompts;
* ``general``: the base's greedy answers to :data:`GENERAL_PROMPTS`, everyday
  requests unlike the rated coding ones, where no coding style applies;

beside the bench's own reference NLL (row.json: all 24 references, and split by
whether a reference has the preference).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(run: Path, general: list[str]) -> dict[str, object]:
    from rltray.trainer import capability, rounddata

    from tests.support.jobfiles import setup_round

    run = run.resolve()
    job = json.loads((run / "job.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("examples", "heldout"):
            job[name] = str(run / job[name])
        job.update(out=str(Path(tmp) / "out"), parent_adapter=str(run / "adapter"))
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps(job))
        _, hyper, backend, _, heldout = setup_round(path)
        tok = backend.tokenizer
        pad = rounddata.pad_id(tok)
        held_enc, held_kept = rounddata.encode_all(tok, heldout, hyper, lambda _: None,
                                                   "held-out")
        rated = capability.choose_prompts(held_enc, held_kept, {}, [], int(hyper.ref_prompts))
        everyday = [
            tok(tok.apply_chat_template([{"role": "user", "content": p}],
                                        add_generation_prompt=True, tokenize=False),
                add_special_tokens=False)["input_ids"]
            for p in general
        ]
        out: dict[str, object] = {"run": run.name}
        for name, prompts in (("rated", rated), ("general", everyday)):
            state = capability.round_start(backend, prompts, hyper, pad, has_parent=True)
            out[name] = state["nll_parent"] / state["nll_base"] - 1.0
            out[f"{name}_base_nll"] = state["nll_base"]
    row_file = run / "row.json"
    row = json.loads(row_file.read_text()) if row_file.is_file() else {}
    out.update({k: row.get(k) for k in ("nll_change", "nll_pref_change", "nll_other_change",
                                        "pref", "base_pref")})
    return out


def main() -> int:
    from rltray.trainer.capability import GENERAL_PROMPTS

    runs = [Path(a) for a in sys.argv[1:]] or sorted(
        p for p in (ROOT / ".bench-out").glob("learning-smollm2-*/runs/*")
        if (p / "adapter" / "adapter_config.json").is_file())
    print(f"{'run':52} {'gap':>5} {'bench nll+%':>11} {'with/without pref':>17} "
          f"{'gate rated':>10} {'general':>8}")
    rows = []
    for run in runs:
        r = measure(run, list(GENERAL_PROMPTS))
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
