"""The remote side's wrapper around ``python -m rltray.trainer JOB.json`` (stdlib only).

Uploaded into the remote run folder and run by Ray Jobs as
``exec PYTHON wrap.py PYTHON job.json``. Why a wrapper at all: Ray merges a job's
stdout and stderr into one log and replays it from the start on every read, so
the trainer's JSON lines are re-printed here with a marker and a sequence number
(:data:`MARK` ``SEQ`` ``LINE``) that the laptop's stand-in picks out and
de-duplicates; the trainer's exit code follows as one last marked line.

Why it ignores SIGTERM: Ray's stop signals every process of the job's tree at
once; the trainer takes a *second* signal as "exit now, no checkpoint", so this
wrapper must never forward one. A handler (not ``SIG_IGN``, which a child would
inherit across exec) keeps the wrapper alive until the trainer has checkpointed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

MARK = "@rltray"


def main(argv: list[str]) -> int:
    python, job = argv[1], argv[2]
    for name in ("SIGTERM", "SIGINT"):
        signal.signal(getattr(signal, name), lambda *_: None)
    proc = subprocess.Popen(
        [python, "-u", "-m", "rltray.trainer", job],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    seq = 0
    for raw in proc.stdout:
        text = raw.decode("utf-8", "replace").strip()
        if text:
            seq += 1
            print(f"{MARK} {seq} {text}", flush=True)
    while True:
        try:
            code = proc.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            continue
    seq += 1
    print(f"{MARK} {seq} " + json.dumps({"type": "_exit", "code": code}), flush=True)
    return code if code >= 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
