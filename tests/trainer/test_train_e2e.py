"""The round loop in process: a whole round, pause + resume bit-identical, skips, o from
behaviour log-probs — with the torch backend on the tiny llama.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from rltray.trainer import adapters, checkpoint, objective, rounddata
from rltray.trainer.backends.base import read_base_config

from tests.support.jobfiles import example, make_job, run_round

pytestmark = pytest.mark.ml

PROGRESS_KEYS = {
    "type", "step", "total", "epoch", "loss", "grad_norm", "masked_tokens", "gated_examples",
    "drift", "kl", "adv_mean", "tokens_per_s", "elapsed_s", "kl_round", "kl_total",
    "kl_round_general",
}  # fmt: skip


def test_a_round_trains_all_examples_and_writes_a_valid_adapter(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    job_path = make_job(tmp_path / "job", tiny_model_dir, baseline=0.1)
    outcome, lines = run_round(job_path)
    assert outcome.status == "done"
    progress = [x for x in lines if x["type"] == "progress"]
    # 8 examples, 4 per optimizer step, 2 epochs -> 4 steps
    assert [p["step"] for p in progress] == [1, 2, 3, 4]
    assert {p["epoch"] for p in progress} == {1, 2}
    for p in progress:
        assert set(p) == PROGRESS_KEYS and p["total"] == 4
        kl = {"kl_round", "kl_total", "kl_round_general"}
        assert all(math.isfinite(p[k]) for k in PROGRESS_KEYS - {"type"} - kl)
        # the guard measures every few steps far below its line, always the last
        assert all(p[k] is None or math.isfinite(p[k]) for k in kl)
        assert p["tokens_per_s"] > 0
    assert all(math.isfinite(progress[i]["kl_round"]) for i in (0, -1))
    assert progress[0]["masked_tokens"] == 0.0  # first step: rho = 1 everywhere
    # one epoch holds all 8 (4 good, 4 bad) examples: mean advantage = 0 - baseline
    epoch1 = [p["adv_mean"] for p in progress if p["epoch"] == 1]
    assert sum(epoch1) / len(epoch1) == pytest.approx(-0.1, abs=1e-6)
    res = outcome.result
    assert res is not None and Path(res.adapter) == tmp_path / "job" / "adapter"
    assert adapters.validate_adapter(res.adapter, read_base_config(tiny_model_dir)) == []
    m = res.metrics
    assert m["auroc_parent"] == 0.5  # fresh LoRA: implicit reward 0 for all
    assert m["heldout_good"] == 2 and m["heldout_bad"] == 2
    assert 0 < m["kl_to_base"] < 10 and m["steps"] == 4 and m["examples_trained"] == 8
    assert m["sanity_errors"] == []
    ratings = [1, -1] * 4  # rated_at order == file order here
    assert res.baseline == pytest.approx(objective.ema_update(0.1, ratings, 0.99))
    meta = json.loads((Path(res.adapter) / "rltray.json").read_text())
    assert meta["base_model"] == str(tiny_model_dir) and len(meta["data_sha256"]) == 64
    assert meta["accepted"] == res.accepted and meta["job_id"] == "job-1"
    assert not (tmp_path / "job" / "checkpoint").exists()


def test_pause_and_resume_is_bit_identical(tiny_model_dir: Path, tmp_path: Path) -> None:
    straight, _ = run_round(make_job(tmp_path / "a", tiny_model_dir))

    job_b = make_job(tmp_path / "b", tiny_model_dir)
    lines: list[dict] = []

    def stop_after_two_steps() -> bool:
        return sum(x["type"] == "progress" for x in lines) >= 2

    paused, _ = run_round(job_b, stop_after_two_steps, lines)
    assert paused.status == "paused" and paused.checkpoint == tmp_path / "b" / "checkpoint"
    assert [x["step"] for x in lines if x["type"] == "progress"] == [1, 2]
    state = checkpoint.load(paused.checkpoint)
    assert state is not None and (state.epoch, state.step, state.global_step) == (1, 0, 2)
    assert not (tmp_path / "b" / "adapter").exists()

    resumed, lines = run_round(job_b)
    assert resumed.status == "done"
    assert [x["step"] for x in lines if x["type"] == "progress"] == [3, 4]
    a = adapters.load_adapter_tensors(straight.result.adapter)
    b = adapters.load_adapter_tensors(resumed.result.adapter)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert resumed.result.metrics["kl_to_base"] == straight.result.metrics["kl_to_base"]
    assert resumed.result.metrics["auroc_new"] == straight.result.metrics["auroc_new"]


def test_reinforce_passed_in_trains_as_the_hyper_overrides_that_used_to_fake_it(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The bench's REINFORCE rows stay comparable: ``train(objective=REINFORCE)`` gives
    bit for bit what a job with REINFORCE's loss fields in its ``hyper`` gave."""
    passed, lines_a = run_round(make_job(tmp_path / "a", tiny_model_dir),
                                objective=objective.REINFORCE)
    faked, lines_b = run_round(make_job(tmp_path / "b", tiny_model_dir,
                                        hyper=dict(objective.REINFORCE.loss_fields)))
    mispo, _ = run_round(make_job(tmp_path / "c", tiny_model_dir))
    timing = {"tokens_per_s", "elapsed_s"}

    def steps(lines: list[dict]) -> list[dict]:
        return [{k: v for k, v in x.items() if k not in timing}
                for x in lines if x["type"] == "progress"]

    assert steps(lines_a) == steps(lines_b) and len(steps(lines_a)) == 4
    a = adapters.load_adapter_tensors(passed.result.adapter)
    b = adapters.load_adapter_tensors(faked.result.adapter)
    c = adapters.load_adapter_tensors(mispo.result.adapter)
    assert a.keys() == b.keys() == c.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert any(not np.array_equal(a[k], c[k]) for k in a)  # and it is not MIS-PO
    assert passed.result.metrics["kl_round"] == faked.result.metrics["kl_round"]


def test_too_long_example_is_skipped_and_reported(tiny_model_dir: Path, tmp_path: Path) -> None:
    rows = [
        example(0, 1, "Short good answer."),
        example(1, -1, "Short bad answer."),
        example(2, 1, "Answer.", prompt="word " * 400),
    ]
    job_path = make_job(tmp_path / "job", tiny_model_dir, examples=rows, heldout=[],
                        hyper={"epochs": 1})  # fmt: skip
    outcome, lines = run_round(job_path)
    skipped = [x for x in lines if x["type"] == "skipped"]
    assert [s["id"] for s in skipped] == ["ex2"] and skipped[0]["reason"]
    assert outcome.status == "done" and outcome.result.metrics["examples_trained"] == 2
    assert outcome.result.metrics["examples_skipped"] == 1
    # the tray leaves the skipped rating untrained: the baseline counts it when it trains
    from rltray.trainer.presets import Hyper

    assert outcome.result.accepted
    counted = objective.ema_update(0.0, [1.0, -1.0], Hyper().ema_decay)
    assert outcome.result.baseline == pytest.approx(counted)


def test_epoch_order_depends_only_on_seed_and_epoch() -> None:
    assert rounddata.epoch_order(10, 3, 0) == rounddata.epoch_order(10, 3, 0)
    assert rounddata.epoch_order(10, 3, 0) != rounddata.epoch_order(10, 3, 1)
    assert sorted(rounddata.epoch_order(10, 3, 1)) == list(range(10))


def test_a_checkpoint_of_a_different_round_is_discarded(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Changing a hyperparameter between pause and resume must not resume stale state."""
    job_path = make_job(tmp_path / "job", tiny_model_dir)
    lines: list[dict] = []
    paused, _ = run_round(job_path, lambda: any(x["type"] == "progress" for x in lines), lines)
    assert paused.status == "paused"
    make_job(tmp_path / "job", tiny_model_dir, hyper={"lr": 0.005})
    outcome, lines = run_round(job_path)
    assert outcome.status == "done"
    assert any(x["type"] == "log" and "discarding" in x["message"] for x in lines)
    assert [x["step"] for x in lines if x["type"] == "progress"] == [1, 2, 3, 4]


def test_a_first_round_computes_round_start_log_probs_once(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No parent: the fresh LoRA (B = 0) is the base, so only base passes run at the start."""
    from rltray.trainer.backends.torch_peft import TorchPeftBackend

    calls: list[bool] = []
    real = TorchPeftBackend.logprobs

    def counting(self, batch, *, adapter):  # type: ignore[no-untyped-def]
        calls.append(adapter)
        return real(self, batch, adapter=adapter)

    monkeypatch.setattr(TorchPeftBackend, "logprobs", counting)
    outcome, _ = run_round(make_job(tmp_path / "job", tiny_model_dir))
    assert outcome.status == "done"
    # round start: 8 training + 4 held-out at batch 2 = 6 base passes; at the end the
    # held-out scores come from the drift measurement's forward, not a pass of their own;
    # the capability check scores its two sets of reference answers (the round's prompts,
    # then the everyday ones) once under the base (no parent pass: the parent is the
    # base) and once under the new adapter at the end
    assert calls == [False] * 6 + [False, False, True, True]
    assert outcome.result.metrics["auroc_parent"] == 0.5
