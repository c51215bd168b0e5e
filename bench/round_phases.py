"""Where a whole rltray round's wall time goes, phase by phase (issue 25).

Run (about a minute a round on one core of this machine)::

    nice -n 10 .venv/bin/python bench/round_phases.py                 # 60m shape, 32 ratings
    nice -n 10 .venv/bin/python bench/round_phases.py --reps 2 --shape smollm2-135m

The versus bench's round (``train_speed.py --versus reinforceclaw``: the same random
model of the shape and the same 32 ratings of 200-386 tokens, preset ``balanced``, one
pass, one thread, bf16 where the CPU has it) through the real trainer CLI in a child
process, with a timer around each phase of ``trainer/train.py`` (the end is in
``trainer/finish.py``) and the checks it calls: model load, the round start (base
log-probs of the ratings, the capability check's base answers and NLLs, the drift
references), the optimisation loop (steps and the drift guard), and the end (the exact
drift, the capability NLLs and the broken-answer check's greedy answers, the folder).
ReinforceClaw does none of the checks, which is why ``train_speed.py --versus`` reads
rltray's steps faster and its wall time not. The base answers' cache is used as a user's
round would (``--cold`` turns it off). """

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

#: (label, module, object, attribute): the phases and the checks inside them.
TIMED = (
    ("load the model", "rltray.trainer.__main__", None, "load_backend"),
    ("round start", "rltray.trainer.train", None, "_round_start"),
    ("  log-probs of the ratings", "rltray.trainer.rounddata", None, "logprob_rows"),
    ("  capability: base answers", "rltray.trainer.capability", None, "_base_answers"),
    ("  capability: NLLs", "rltray.trainer.capability", None, "_nll_of"),
    ("optimisation loop", "rltray.trainer.train", None, "_optimise"),
    ("  drift guard", "rltray.trainer.guard", "Guard", "check"),
    ("end of the round", "rltray.trainer.train", None, "finish"),
    ("  exact drift (guard's and end's)", "rltray.trainer.drift", "DriftSet", "measure"),
    ("  broken-answer check", "rltray.trainer.capability", None, "broken_answers"),
    ("  write the adapter", "rltray.trainer.adapters", None, "write_adapter"),
)

CHILD = """
import collections, functools, importlib, json, sys, time
TIMED, job = json.loads(sys.argv[1]), sys.argv[2]
spent, calls = collections.defaultdict(float), collections.Counter()
for label, module, cls, name in TIMED:
    owner = importlib.import_module(module)
    owner = getattr(owner, cls) if cls else owner
    def wrap(fn, label=label):
        @functools.wraps(fn)
        def timed(*a, **k):
            t = time.monotonic()
            try:
                return fn(*a, **k)
            finally:
                spent[label] += time.monotonic() - t
                calls[label] += 1
        return timed
    setattr(owner, name, wrap(getattr(owner, name)))
from rltray.trainer.__main__ import main
t0 = time.monotonic()
code = main([job])
print(json.dumps({"phases": spent, "calls": calls, "main_s": time.monotonic() - t0,
                  "code": code}), file=sys.stderr)
"""


def one_round(folder: Path, model: Path, rows: list[dict[str, Any]], cold: bool) -> dict:
    """Time one round in a child process; its trainer's protocol lines are discarded."""
    from versus_reinforceclaw import ONE_THREAD, write_job

    job = write_job(folder, model, rows, "torch", 1)
    env = {**os.environ, "RLTRAY_TRAINER_THREADS": "1", "RLTRAY_TRAINER_BF16": "auto",
           **ONE_THREAD, **({"RLTRAY_ANSWER_CACHE": "off"} if cold else {})}  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(TIMED), str(job)],
                          capture_output=True, text=True, env=env, check=False)  # fmt: skip
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "{}"
    got = json.loads(last) if last.startswith("{") else {}
    if proc.returncode != 0 or got.get("code") != 0:
        raise SystemExit(f"the round failed: {proc.stderr[-1500:]}")
    return got


def main(argv: list[str] | None = None) -> int:
    from train_speed import SHAPES, build_model, model_dims, model_folder
    from transformers import AutoTokenizer
    from versus_reinforceclaw import versus_examples

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="60m", choices=sorted(SHAPES))
    ap.add_argument("--examples", type=int, default=32)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--cold", action="store_true", help="no base answers kept between rounds")
    ap.add_argument("--out", type=Path, default=ROOT / ".bench-out" / "train_speed")
    a = ap.parse_args(argv)
    a.quick = False
    model = build_model(model_folder(a.out, a), model_dims(a))
    rows = versus_examples(AutoTokenizer.from_pretrained(model), a.examples, 200, 386, seed=0)
    work = a.out / f"phases-{a.shape}"
    results = []
    for rep in range(a.reps):
        results.append(one_round(work / f"round-{rep}", model, rows, a.cold))
    shutil.rmtree(work, ignore_errors=True)
    print(f"shape {a.shape}, {a.examples} ratings, one thread, bf16 where the CPU has it; "
          f"base answers {'decoded every round' if a.cold else 'kept between rounds'}")
    print(f"{'phase':32s}" + "".join(f"  round {i}" for i in range(len(results))))
    print(f"{'whole trainer process (main)':32s}"
          + "".join(f"{r['main_s']:9.1f}" for r in results))  # fmt: skip
    for label, *_ in TIMED:
        print(f"{label:32s}" + "".join(f"{r['phases'].get(label, 0.0):9.1f}" for r in results))
    print(json.dumps({"shape": a.shape, "examples": a.examples, "cold": a.cold,
                      "rounds": results}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
