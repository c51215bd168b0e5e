"""A round whose memory is tight hands freed tensors back to the OS (issue 25).

glibc keeps a freed block inside its heap when something allocated after it still
lives, so a training pass's activations, freed between long-lived tensors, stay in
the process's RSS. Each case runs in its own Python so the setting does not leak into
this test process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rltray.trainer.backends import allocator

ROOT = Path(__file__).resolve().parents[2]

#: 300 blocks of ~800 kB (one SmolLM2 sequence's hidden states is ~830 kB), each
#: followed by a 4 kB block that stays (a smaller one may fill an older gap), then the
#: big ones are freed.
PATTERN = r"""
import json, sys
import numpy as np
from rltray.trainer.backends import allocator

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

lean = sys.argv[1] == "lean"
if lean:
    assert allocator.return_freed_memory() and allocator.applied()
np.ones(100_000).sum()  # one freed mapped block lifts glibc's dynamic threshold above it
big, small = [], []
for _ in range(300):
    big.append(np.ones(100_000))
    small.append(np.ones(512))
held = rss_mb()
del big
print(json.dumps({"held": held, "after": rss_mb()}))
"""


def _run(mode: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", PATTERN, mode], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_freed_tensors_go_back_to_the_os_once_asked() -> None:
    if allocator._glibc() is None:
        pytest.skip("glibc's malloc (Linux) is what fragments; this C library is not glibc")
    plain, lean = _run("plain"), _run("lean")
    assert plain["held"] > 200 and lean["held"] > 200  # ~240 MB of blocks were live
    assert plain["held"] - plain["after"] < 60  # glibc kept the freed blocks in its heap
    assert lean["held"] - lean["after"] > 200  # each was its own mapping, returned


def test_it_does_nothing_where_the_c_library_is_not_glibc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(allocator, "_applied", False)
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator.return_freed_memory() is False
    assert allocator.applied() is False
