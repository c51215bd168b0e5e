"""The real CLI in a subprocess: ``python -m rltray.trainer job.json`` prints JSON lines,
writes an adapter PEFT loads, pauses on SIGTERM, on stdin closing or on its stop file with
exit 3 and resumes bit-identically.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from rltray.trainer import adapters  # noqa: E402

from tests.support.jobfiles import make_job, run_round, run_trainer, trainer_env  # noqa: E402

pytestmark = [pytest.mark.ml, pytest.mark.slow]


def test_cli_round_writes_an_adapter_peft_loads(tiny_model_dir: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    job = make_job(tmp_path / "job", tiny_model_dir)
    code, lines, stderr = run_trainer(job)
    assert code == 0, stderr[-2000:]
    assert lines[-1]["type"] == "done" and sum(x["type"] == "done" for x in lines) == 1
    assert [x["step"] for x in lines if x["type"] == "progress"] == [1, 2, 3, 4]
    names = {x["name"] for x in lines if x["type"] == "metric"}
    assert names >= {"auroc_new", "kl_round", "kl_total"}
    # the round's measured peak memory (issue 22: the wizard shows it), just before the end
    assert lines[-2]["name"] == "peak_memory_bytes" and 200 * 2**20 < lines[-2]["value"] < 2**34
    done = lines[-1]
    assert set(done) == {"type", "adapter", "accepted", "reasons", "metrics", "baseline",
                         "trained_ids", "unseen_ids"}
    assert done["trained_ids"] == [f"ex{i}" for i in range(8)] and done["unseen_ids"] == []
    assert isinstance(done["accepted"], bool) and isinstance(done["reasons"], list)
    out = Path(done["adapter"])
    assert out == tmp_path / "job" / "adapter"

    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        before = base(input_ids=ids).logits.clone()
        tuned = PeftModel.from_pretrained(base, str(out)).eval()
        after = tuned(input_ids=ids).logits
    assert (after - before).abs().max() > 1e-4  # the adapter changes the model's outputs


def _stop_with_sigterm(proc: subprocess.Popen[str], _job: Path) -> None:
    proc.send_signal(signal.SIGTERM)


def _stop_with_sighup(proc: subprocess.Popen[str], _job: Path) -> None:
    """The terminal `rltray train` ran in was closed (regression: the trainer died at once,
    with nothing kept since its last periodic checkpoint)."""
    proc.send_signal(signal.SIGHUP)


def _stop_by_closing_stdin(proc: subprocess.Popen[str], _job: Path) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.stdin = None  # communicate() below would flush it


def _stop_with_the_stop_file(_proc: subprocess.Popen[str], job: Path) -> None:
    (job.parent / "stop").write_bytes(b"")


@pytest.mark.parametrize("stop_it", [_stop_with_sigterm, _stop_by_closing_stdin,
                                     _stop_with_the_stop_file, _stop_with_sighup],
                         ids=["sigterm", "stdin", "file", "sighup"])
def test_a_stop_pauses_and_resume_matches_an_uninterrupted_run(
    stop_it: Any, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM, and the two stops that need no console (issue 23 item 11: the windowed
    tray on Windows cannot send CTRL_BREAK_EVENT): stdin closing and the stop file."""
    monkeypatch.setenv("RLTRAY_TRAINER_THREADS", "1")  # same float reductions as the CLI runs
    hyper = {"epochs": 40}  # 80 optimizer steps: still running after the first line
    job = make_job(tmp_path / "cli", tiny_model_dir, hyper=hyper)
    by_stdin = stop_it is _stop_by_closing_stdin  # else stdin is /dev/null and not watched
    proc = subprocess.Popen(
        [sys.executable, "-m", "rltray.trainer", str(job)],
        stdin=subprocess.PIPE if by_stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**trainer_env(), **({"RLTRAY_TRAINER_STDIN": "stop"} if by_stdin else {})},
    )
    lines = []
    assert proc.stdout is not None
    for raw in proc.stdout:
        lines.append(json.loads(raw))
        if lines[-1]["type"] == "progress":
            stop_it(proc, job)
            break
    rest, stderr = proc.communicate(timeout=120)
    lines += [json.loads(x) for x in rest.splitlines() if x.strip()]
    assert proc.returncode == 3, stderr[-2000:]
    if stop_it not in (_stop_with_sigterm, _stop_with_sighup):
        said = {"stdin": "stopping: stdin was closed",
                "file": f"stopping: the stop file {tmp_path / 'cli' / 'stop'} appeared"}
        assert said["stdin" if by_stdin else "file"] in [x.get("message") for x in lines]
    assert lines[-1] == {"type": "paused", "checkpoint": str(tmp_path / "cli" / "checkpoint")}
    paused_at = max(x["step"] for x in lines if x["type"] == "progress")
    assert paused_at < 80
    assert not (tmp_path / "cli" / "adapter").exists()
    assert not (tmp_path / "cli" / "stop").exists()  # acted on, so running again resumes

    code, resumed, stderr = run_trainer(job)
    assert code == 0, stderr[-2000:]
    steps = [x["step"] for x in resumed if x["type"] == "progress"]
    assert steps == list(range(paused_at + 1, 81))

    straight, _ = run_round(make_job(tmp_path / "straight", tiny_model_dir, hyper=hyper))
    a = adapters.load_adapter_tensors(straight.result.adapter)
    b = adapters.load_adapter_tensors(resumed[-1]["adapter"])
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_a_round_whose_stdin_is_watched_still_exits_0(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The runner never closes stdin after a finished round. Read through ``sys.stdin``,
    the watching thread held the buffer's lock and Python aborted at exit (SIGABRT,
    "could not acquire lock for <stdin> at interpreter shutdown"): a done round failed."""
    job = make_job(tmp_path / "job", tiny_model_dir)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rltray.trainer", str(job)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**trainer_env(), "RLTRAY_TRAINER_STDIN": "stop"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    lines = [json.loads(raw) for raw in proc.stdout]  # stdin stays open to the end
    code = proc.wait(timeout=120)
    assert code == 0, proc.stderr.read()[-2000:]
    assert lines[-1]["type"] == "done"
    proc.stdin.close()  # type: ignore[union-attr]
