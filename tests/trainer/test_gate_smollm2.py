"""The publish gate on a small real instruct model (SmolLM2-135M-Instruct, cached GGUF).

Slow (a few minutes on 2 CPU cores): two short rounds through the shipped round
loop. A ``careful`` round is accepted, its preference judged and its capability
kept; a round at 20x balanced's learning rate with the drift guard off (so the
gate alone decides) drifts far from the base on the held-out answers and is
rejected for it. (``balanced``'s own rate lands at +5.0% reference NLL on this
4-rating world, right at the capability cap of issue 20 item 5, where ``careful``
learns the same held-out preference at +1.6%.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("gguf")

from rltray.trainer import presets

from tests.support.jobfiles import example, make_job, run_round

pytestmark = [pytest.mark.ml, pytest.mark.slow]

TASKS = ("reverses a string", "checks whether a number is prime", "returns the factorial of n",
         "counts the vowels in a string", "flattens a list of lists", "returns the median of "
         "a list", "checks whether a year is a leap year", "removes duplicates from a list",
         "merges two sorted lists", "returns the sum of the digits of an integer",
         "swaps the keys and values of a dictionary", "rotates a list by k positions")


def answer(task: str, docstring: bool) -> str:
    doc = f'    """Return the result: this function {task}."""\n' if docstring else ""
    return f"Here is the function:\n\n```python\ndef solve(x):\n{doc}    return x\n```\n"


def rows(tasks: tuple[str, ...], start: int) -> list[dict]:
    out = []
    for k, task in enumerate(tasks):
        good = k % 2 == 0
        out.append(example(start + k, 1 if good else -1, answer(task, good),
                           prompt=f"Write a Python function that {task}."))
    return out


def round_with(tmp: Path, model: Path, preset: str = "balanced", **hyper: object):
    """A round of ``preset`` (the preset's own rate unless ``hyper`` says otherwise)."""
    job = make_job(tmp, model, examples=rows(TASKS[:4], 0), heldout=rows(TASKS[4:], 50),
                   preset=preset)
    spec = json.loads(job.read_text())
    spec["hyper"] = {"max_seq_len": 160, "batch_size": 4, "step_examples": 4, **hyper}
    job.write_text(json.dumps(spec))
    outcome, lines = run_round(job)
    assert outcome.status == "done"
    return outcome.result, lines


def test_the_gate_accepts_a_good_round_and_rejects_a_collapsed_one(
    smollm2_dir: Path, tmp_path: Path
) -> None:
    good, _ = round_with(tmp_path / "good", smollm2_dir, preset="careful")
    assert good.accepted, good.reasons
    m = good.metrics
    assert m["drift_set"] == "held-out" and 0 < m["kl_round"] <= 0.05
    assert m["heldout_good"] == 4 and m["heldout_bad"] == 4  # the preference was judged
    assert m["preference"] in ("better", "unchanged")
    assert m["ref_prompts"] == 8 and abs(m["ref_nll_increase"]) < 0.05  # capability kept

    info = presets.model_info(json.loads((smollm2_dir / "config.json").read_text()))
    lr = presets.resolve("balanced", info).lr
    bad, _ = round_with(tmp_path / "collapsed", smollm2_dir, lr=20 * lr, guard_turns=0)
    assert not bad.accepted
    assert any("KL to the parent on the held-out answers" in r for r in bad.reasons), bad.reasons
    assert bad.metrics["kl_round"] > 10 * m["kl_round"]
