"""A round checkpoints on its own while it runs, so a hard kill loses little.

Why it matters for remote rounds: Ray SIGKILLs a job whose stop grace ran out, and
restarting a head SIGKILLs running jobs with no signal first; neither leaves the
pause checkpoint. The real trainer (tiny model, CPU) is killed with SIGKILL after
its second step with a checkpoint due after every step; run again, it continues
from the last periodic checkpoint and finishes (that checkpoint is the very save a
pause makes at that point, whose bit-identical resume tests/trainer shows).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.jobfiles import make_job, run_trainer, trainer_env

pytestmark = [pytest.mark.slow, pytest.mark.ml]


def test_a_hard_killed_round_resumes_from_its_periodic_checkpoint(
    tiny_model: Path, tmp_path: Path
) -> None:
    job = make_job(tmp_path / "killed", tiny_model, hyper={"epochs": 3})  # 6 steps
    env = {**trainer_env(), "RLTRAY_TRAINER_CHECKPOINT_S": "0.000001"}  # after every step
    proc = subprocess.Popen(
        [sys.executable, "-m", "rltray.trainer", str(job)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = json.loads(raw)
        if line.get("type") == "progress" and line["step"] == 3:
            proc.send_signal(signal.SIGKILL)  # no pause checkpoint: only the periodic one
            break
    proc.wait(30)
    state = json.loads((tmp_path / "killed" / "checkpoint" / "state.json").read_text())
    assert state["global_step"] in (2, 3)  # the step whose checkpoint finished last

    code, lines, err = run_trainer(job)
    assert code == 0, err[-2000:]
    steps = [ln["step"] for ln in lines if ln.get("type") == "progress"]
    assert steps[0] == state["global_step"] + 1 and steps[-1] == 6  # continued
    assert (tmp_path / "killed" / "adapter" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "killed" / "checkpoint").exists()
