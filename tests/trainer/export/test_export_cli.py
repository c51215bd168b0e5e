"""The export program as the tray runs it: ``python -m rltray.trainer.export``."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads nice and ioprio")
def test_the_export_runs_at_the_trainers_low_priority() -> None:
    """Regression: a merge, requantize and upload ran at the tray's normal CPU and IO
    priority for minutes after a round, whatever the user was doing then."""
    probe = (
        "import os, psutil\n"
        "from rltray.trainer.export.__main__ import main\n"
        "main(['latest', '--host', 'http://127.0.0.1:9', '--model', 'x:1'])\n"
        "print('NICE', os.nice(0), int(psutil.Process().ionice().ioclass))\n"
    )
    got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True)
    line = next(x for x in got.stdout.splitlines() if x.startswith("NICE")).split()
    assert int(line[1]) >= 10 and int(line[2]) == 3, got.stdout  # 3: IOPRIO_CLASS_IDLE
