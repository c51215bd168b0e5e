"""A paused round whose drift guard stops it resumes bit-identical (issue 20 item 7).

The guard measures every few steps far below its line and keeps a LoRA snapshot of
each unmeasured step, so a stop walks back to the newest step within the line. A
round paused between an unmeasured crossing of the line and the next measurement
used to lose those snapshots and the known-good step: resumed, it kept the step
above the line where the unpaused round walked back. Scheduled rounds pause
whenever the user comes back, so this is normal use. Torch, tiny llama.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from rltray.trainer import adapters
from rltray.trainer import guard as drift_guard

from tests.support.jobfiles import make_job, run_round

pytestmark = pytest.mark.ml

#: Eight steps whose warm-up makes step 3 jump about tenfold over step 2 (rate ramps
#: over 8 steps): far below the line at step 2 the guard skips step 3, which crosses.
HYPER = {"lr": 0.05, "epochs": 4, "warmup_steps": 8}


def worst_drift(line: dict) -> float:
    """The largest drift of a first round's progress line (to the base = to the parent)."""
    return max(line["kl_round"], line["kl_round_general"])


def _same_result(a_out, b_out) -> None:
    """The same adapter, bit for bit, and the same metrics but the timings."""
    a = adapters.load_adapter_tensors(a_out.result.adapter)
    b = adapters.load_adapter_tensors(b_out.result.adapter)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    ma, mb = ({k: v for k, v in o.result.metrics.items()  # all but the timings
               if not k.endswith(("_s", "_seconds"))} for o in (a_out, b_out))
    assert mb == ma and b_out.result.reasons == a_out.result.reasons
    assert b_out.result.trained_ids == a_out.result.trained_ids


def test_a_round_paused_after_an_unmeasured_crossing_resumes_to_the_same_guard_stop(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    _, free = run_round(make_job(tmp_path / "free", tiny_model_dir,
                                 hyper={**HYPER, "guard_max_gap": 1}))
    w = [worst_drift(x) for x in free if x["type"] == "progress"]
    # a line step 2 sits below a ninth of (the guard then skips step 3) and step 3 above
    assert 9 * w[1] < w[2], w
    line = math.sqrt(9 * w[1] * w[2])
    cap = line / drift_guard.GUARD_MARGIN
    capped = {**HYPER, "kl_cap": cap, "kl_cap_total": cap}

    straight, lines = run_round(make_job(tmp_path / "a", tiny_model_dir, hyper=capped))
    seen = [x["kl_round"] for x in lines if x["type"] == "progress"]
    assert len(seen) == 4 and seen[2] is None and None not in (seen[0], seen[1], seen[3])
    assert straight.result.metrics["steps"] == 2  # steps 3 and 4 undone

    job_b = make_job(tmp_path / "b", tiny_model_dir, hyper=capped)
    lines_b: list[dict] = []

    def after_the_crossing() -> bool:
        return sum(x["type"] == "progress" for x in lines_b) >= 3

    paused, _ = run_round(job_b, after_the_crossing, lines_b)
    assert paused.status == "paused"
    resumed, after = run_round(job_b)
    assert [x["step"] for x in after if x["type"] == "progress"] == [4]
    _same_result(straight, resumed)
    assert "kept the weights of step 2" in resumed.result.metrics["stopped_early"]


@pytest.mark.parametrize("hyper", [HYPER, {**HYPER, "kl_cap": 1e-7, "kl_cap_total": 1e-7}],
                         ids=["every-step", "guard-stop"])
def test_a_stop_in_the_checks_after_the_last_step_resumes_at_those_checks(
    tiny_model_dir: Path, tmp_path: Path, hyper: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause (or a kill) in the finish resumes there: no step runs again, and the
    result is the uninterrupted round's, a drift guard stop included."""
    monkeypatch.setenv("RLTRAY_ANSWER_CACHE", "off")  # every round decodes its own answers
    straight, _ = run_round(make_job(tmp_path / "a", tiny_model_dir, hyper=hyper))
    assert straight.status == "done"
    steps = [x for x in _ if x["type"] == "progress"]

    job = make_job(tmp_path / "b", tiny_model_dir, hyper=hyper)
    lines: list[dict] = []

    def in_the_finish() -> bool:  # every progress line is out: the steps are over
        return len([x for x in lines if x["type"] == "progress"]) == len(steps)

    paused, _ = run_round(job, in_the_finish, lines)
    assert paused.status == "paused" and paused.checkpoint is not None
    assert any("paused in the checks" in x.get("message", "") for x in lines)
    resumed, after = run_round(job)
    assert not [x for x in after if x["type"] == "progress"]
    assert any("resumed after the last optimizer step" in x.get("message", "") for x in after)
    _same_result(straight, resumed)
    if hyper.get("kl_cap") == 1e-7:
        assert resumed.result.metrics["stopped_early"] and not resumed.result.accepted

    class Killed(BaseException):
        pass

    job_c = make_job(tmp_path / "c", tiny_model_dir, hyper=hyper)
    lines_c: list[dict] = []

    def killed_in_the_finish() -> bool:
        if len([x for x in lines_c if x["type"] == "progress"]) == len(steps):
            raise Killed  # the runner's kill: nothing after this point is written
        return False

    with pytest.raises(Killed):
        run_round(job_c, killed_in_the_finish, lines_c)
    resumed_c, after_c = run_round(job_c)
    assert not [x for x in after_c if x["type"] == "progress"]
    _same_result(straight, resumed_c)
