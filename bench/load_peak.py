"""The base model's load alone: its peak RSS with Transformers' fp32 load and with the
trainer's (issue 25, ``trainer/backends/torch_load.py``).

Run:  .venv/bin/python bench/load_peak.py MODEL_FOLDER [--json]

Each load runs in a fresh process; the peak is reset after the imports
(``/proc/self/clear_refs``), so the figures are the load's own: Linux only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys, torch
from pathlib import Path
from transformers import AutoModelForCausalLM
from rltray.trainer.backends.torch_load import load_causal_lm

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

open("/proc/self/clear_refs", "w").write("5")  # the peak from here on
before = status("VmHWM")
returned = 0
if sys.argv[2] == "from_pretrained":
    AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
else:
    _, returned = load_causal_lm(Path(sys.argv[1]), torch.float32, trust=False, revision=None)
print(status("VmHWM"), before, returned)
"""


def peak(folder: Path, how: str) -> dict[str, int]:
    """One load in a fresh process: its peak RSS over the imports', and the pages handed back."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder), how], cwd=ROOT,
                          capture_output=True, text=True, timeout=3600, check=True)
    hwm, before, returned = (int(x) for x in done.stdout.split()[-3:])
    return {"peak": hwm, "imports": before, "load": hwm - before, "returned": returned}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--json", action="store_true", help="one JSON line, nothing else")
    a = ap.parse_args(argv)
    if not Path("/proc/self/clear_refs").exists():
        print("needs Linux's /proc/self/clear_refs to reset the peak RSS", file=sys.stderr)
        return 2
    rows = {how: peak(a.folder, how) for how in ("from_pretrained", "torch_load")}
    if a.json:
        print(json.dumps(rows))
        return 0
    gib = 2**30
    print(f"{'':<16} {'peak RSS':>10} {'load':>10} {'handed back':>12}")
    for how, r in rows.items():
        print(f"{how:<16} {r['peak'] / gib:>8.2f} G {r['load'] / gib:>8.2f} G "
              f"{r['returned'] / gib:>10.2f} G")
    return 0


if __name__ == "__main__":
    sys.exit(main())
