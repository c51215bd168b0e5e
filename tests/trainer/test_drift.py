"""Drift: the per-step drift guard, the gate's KL on the user's held-out turns, the
EMA baseline (fresh ratings only, never for a rejected round) — tiny llama, torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from rltray.trainer import drift, evaluate, objective
from rltray.trainer import guard as drift_guard

from tests.support.jobfiles import default_examples, example, make_job, run_round, setup_round

pytestmark = pytest.mark.ml


def drift_measured_afresh(job_path: Path, adapter: str) -> tuple[dict[str, float], Any]:
    """The adapter's drift on the job's held-out turns from a freshly loaded backend,
    with nothing kept from a round (first rounds: the parent is the base); and hyper."""
    from rltray.trainer import adapters, rounddata

    _job, hyper, backend, _examples, heldout = setup_round(job_path)
    backend.set_lora_state(adapters.load_adapter_tensors(adapter))
    held_enc, held_kept = rounddata.encode_all(backend.tokenizer, heldout, hyper, lambda _: None,
                                               "held-out")  # fmt: skip
    fresh = drift.DriftSet(held_enc, held_kept, "held-out", None)
    return fresh.measure(backend, hyper, rounddata.pad_id(backend.tokenizer)), hyper


def test_an_aggressive_run_stops_early_when_drift_passes_the_cap(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """aggressive at a high rate: the guard stops it and keeps the last step within the cap."""
    _, free_lines = run_round(make_job(tmp_path / "free", tiny_model_dir, preset="aggressive",
                                       hyper={"lr": 0.05, "epochs": 4, "guard_max_gap": 1}))
    seen = [x["kl_round"] for x in free_lines if x["type"] == "progress"]
    assert len(seen) == 8 and seen[2] > seen[1]  # uncapped, it runs every step, drifting
    # a cap whose guard margin the run passes at its third step
    cap = (seen[1] + seen[2]) / 2 / drift_guard.GUARD_MARGIN
    outcome, lines = run_round(make_job(
        tmp_path / "capped", tiny_model_dir, preset="aggressive",
        hyper={"lr": 0.05, "epochs": 4, "kl_cap": cap, "kl_cap_total": cap,
               "gate_profile": "tiny-test"}))  # drift and sanity decide, not capability
    progress = [x for x in lines if x["type"] == "progress"]
    total = progress[0]["total"]
    assert total == 8 and len(progress) == 3  # it did not run to the end
    stops = [x["message"] for x in lines if x["type"] == "log" and "drift guard" in x["message"]]
    assert len(stops) == 1
    last = progress[-1]
    assert f"after step {last['step']} of {total}" in stops[0]
    assert f"kept the weights of step {last['step'] - 1}" in stops[0]
    assert last["kl_round"] > drift_guard.GUARD_MARGIN * cap  # the step that passed the margin ...
    assert f"passed {drift_guard.GUARD_MARGIN:g} x the {cap:g} cap" in stops[0]
    m = outcome.result.metrics
    assert m["steps"] == last["step"] - 1 and m["stopped_early"] == stops[0]
    assert m["kl_round"] <= cap  # ... was undone: the adapter is within it
    assert outcome.result.accepted, outcome.result.reasons  # the kept step is within the caps


def test_a_guard_stop_at_the_first_step_is_rejected_and_keeps_the_baseline(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    outcome, _ = run_round(make_job(tmp_path / "job", tiny_model_dir, baseline=0.3,
                                    hyper={"kl_cap": 1e-9, "kl_cap_total": 1e-9}))  # fmt: skip
    res = outcome.result
    assert not res.accepted and res.metrics["steps"] == 0
    assert any("drift guard undid the first step" in r and "KL" in r for r in res.reasons)
    assert res.baseline == 0.3  # a rejected round leaves the baseline alone
    meta = json.loads((Path(res.adapter) / "rltray.json").read_text())
    assert meta["baseline"] == 0.3 and meta["accepted"] is False


def test_the_baseline_counts_fresh_ratings_only(tiny_model_dir: Path, tmp_path: Path) -> None:
    rows = default_examples()
    for r in rows[:4]:
        r["replay"] = True  # already counted in the round that first trained them
    outcome, _ = run_round(make_job(tmp_path / "job", tiny_model_dir, examples=rows,
                                    baseline=0.1))  # fmt: skip
    res = outcome.result
    assert res.accepted, res.reasons
    fresh = [r["rating"] for r in rows[4:]]
    assert res.baseline == pytest.approx(objective.ema_update(0.1, fresh, 0.99))


def test_gate_kl_is_measured_on_the_held_out_turns_not_the_neutral_texts(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drift the gate reads comes from the user's held-out prompts with the chat
    template; the bundled neutral file is not read at all, and a cap below that
    drift rejects naming the held-out answers."""

    def no_neutral_texts() -> list[str]:
        raise AssertionError("the gate must not read the bundled neutral texts")

    monkeypatch.setattr(evaluate, "load_neutral_texts", no_neutral_texts)
    job_path = make_job(tmp_path / "job", tiny_model_dir)
    outcome, _ = run_round(job_path)
    m = outcome.result.metrics
    assert m["drift_set"] == "held-out"
    assert m["kl_round"] > 0 and m["kl_total"] == pytest.approx(m["kl_round"])  # parent = base
    assert m["kl_round_general"] > 0

    # The same numbers again from the backend, on the held-out turns alone.
    again, hyper = drift_measured_afresh(job_path, outcome.result.adapter)
    assert again["kl_round"] == pytest.approx(m["kl_round"], rel=1e-4)

    strict = type(hyper)(**{**hyper.__dict__, "kl_cap": m["kl_round"] / 2})
    verdict = evaluate.gate(m, strict)
    assert not verdict.accept
    assert "KL to the parent on the held-out answers" in verdict.reasons[0]


def test_without_held_out_turns_drift_is_measured_on_the_newest_training_turns(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    rows = [example(i, 1 if i % 2 else -1, f"Answer number {i}.") for i in range(6)]
    outcome, _ = run_round(make_job(tmp_path / "job", tiny_model_dir, examples=rows,
                                    heldout=[]))  # fmt: skip
    m = outcome.result.metrics
    assert m["drift_set"] == "training" and m["kl_round"] > 0
    assert m["preference"] == "unmeasured"


def test_with_the_guard_off_the_gate_alone_rejects_the_same_drift(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """guard_turns 0 (benchmarks of the gate): every step runs, the gate rejects."""
    outcome, lines = run_round(make_job(tmp_path / "job", tiny_model_dir,
                                        hyper={"kl_cap": 1e-6, "guard_turns": 0}))
    progress = [x for x in lines if x["type"] == "progress"]
    assert len(progress) == 4 and all(p["kl_round"] is None for p in progress)
    res = outcome.result
    assert not res.accepted and res.metrics["steps"] == 4
    assert "KL to the parent on the held-out answers" in res.reasons[0]


def test_measuring_every_few_steps_changes_nothing_the_round_learns(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Far below the cap the guard skips steps; the final step is always measured and
    the adapter is the one measuring after every step gives."""
    outcomes = {}
    for gap in (1, 4):
        outcomes[gap] = run_round(make_job(tmp_path / f"gap{gap}", tiny_model_dir,
                                           hyper={"guard_max_gap": gap}))
    every = [x["kl_round"] for x in outcomes[1][1] if x["type"] == "progress"]
    sparse = [x["kl_round"] for x in outcomes[4][1] if x["type"] == "progress"]
    assert len(every) == len(sparse) == 4 and None not in every
    assert sparse[0] == every[0] and sparse[-1] == every[-1]  # the first and the last step
    assert sparse.count(None) >= 1  # drift far below the line: at least one step unmeasured
    a, b = (outcomes[g][0].result.metrics for g in (1, 4))
    assert b["kl_round"] == pytest.approx(a["kl_round"], rel=1e-6)
    assert b["guard_seconds"] < a["guard_seconds"]


def test_the_gate_reuses_the_guards_measurement_of_the_weights_it_keeps(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard measured the final step on all 4 held-out turns: the gate's drift and
    held-out scores need no forward of their own, and read the same as a fresh one."""
    from rltray.trainer.backends.torch_peft import TorchPeftBackend

    calls: list[int] = []
    real = TorchPeftBackend.drift_sums

    def counting(self, batch, parent, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(batch.input_ids))
        return real(self, batch, parent, **kw)

    monkeypatch.setattr(TorchPeftBackend, "drift_sums", counting)
    job_path = make_job(tmp_path / "job", tiny_model_dir, hyper={"guard_turns": 4})
    outcome, lines = run_round(job_path)
    measured = [x for x in lines if x["type"] == "progress" and x["kl_round"] is not None]
    assert sum(calls) == 4 * len(measured)  # 4 held-out turns per guard measurement, no more
    m = outcome.result.metrics
    assert m["kl_round"] == pytest.approx(measured[-1]["kl_round"], abs=1e-6)

    monkeypatch.setattr(TorchPeftBackend, "drift_sums", real)
    again, _ = drift_measured_afresh(job_path, outcome.result.adapter)
    for k in ("kl_round", "kl_total", "kl_round_general", "kl_total_general"):
        assert again[k] == pytest.approx(m[k], rel=1e-4), k


def test_kept_reference_states_halve_the_guards_forwards_and_change_no_number(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round start's base forwards of the drift turns are kept (as hidden states,
    from which the head rebuilds the logits), so each guard measurement runs the
    policy's forward only; the round's numbers are the same."""
    from rltray.trainer.backends import reference_logits
    from rltray.trainer.backends.torch_peft import TorchPeftBackend

    forwards: list[int] = []
    real = TorchPeftBackend._hidden

    def counting(self, inputs):  # type: ignore[no-untyped-def]
        forwards.append(1)
        return real(self, inputs)

    monkeypatch.setattr(TorchPeftBackend, "_hidden", counting)
    free = reference_logits.budget_bytes()
    runs = {}
    for budget in (0, free):
        monkeypatch.setattr(reference_logits, "budget_bytes", lambda b=budget: b)
        forwards.clear()
        outcome, lines = run_round(make_job(tmp_path / f"b{budget}", tiny_model_dir,
                                            hyper={"guard_max_gap": 1}))
        runs[budget] = (len(forwards), outcome.result.metrics, lines)
    (n_off, m_off, lines), (n_on, m_on, _) = runs[0], runs[free]
    measured = sum(1 for x in lines if x["type"] == "progress" and x["kl_round"] is not None)
    # 4 held-out turns at batch 2: each guard measurement skips 2 base forwards
    assert measured == 4 and n_off - n_on == 2 * measured
    for k in ("kl_round", "kl_total", "kl_round_general", "kl_total_general", "auroc_new"):
        assert m_on[k] == pytest.approx(m_off[k], rel=1e-5), k


# ---- a parent far from the base (issue 20 item 6) -----------------------------------


@pytest.fixture(scope="module")
def first_round(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A first round's result: the parent of the rounds below."""
    outcome, _ = run_round(make_job(tmp_path_factory.mktemp("first") / "job", tiny_model_dir))
    return outcome.result


#: A second round that moves little (its drift to the base stays within a few % of
#: its parent's): what a round near the total cap can still do.
SMALL_STEPS = {"lr": 0.0003, "guard_max_gap": 1}


def test_a_parent_near_the_total_cap_still_trains_a_round_under_it(
    tiny_model_dir: Path, tmp_path: Path, first_round: Any
) -> None:
    """The parent at 0.85 of ``kl_cap_total``: the guard line was 0.8 x the cap, so the
    first step was undone and the round rejected, round after round; now the margin
    applies to what the round adds, and the round trains to its end under the cap."""
    parent = max(first_round.metrics[k] for k in drift_guard.TOTALS)
    cap = parent / 0.85
    outcome, lines = run_round(make_job(
        tmp_path / "job", tiny_model_dir, parent_adapter=first_round.adapter,
        hyper={**SMALL_STEPS, "kl_cap": cap, "kl_cap_total": cap}))
    m = outcome.result.metrics
    assert m["steps"] == 4 and m["stopped_early"] is None
    assert max(m[k] for k in drift_guard.TOTALS) <= cap
    logs = [x["message"] for x in lines if x["type"] == "log"]
    assert any(f"the parent is at KL {first_round.metrics['kl_total']:.4g}" in x for x in logs)
    assert not any("drift guard" in r for r in outcome.result.reasons)


def test_a_used_up_drift_budget_says_so_and_what_to_do(
    tiny_model_dir: Path, tmp_path: Path, first_round: Any
) -> None:
    """The parent already past ``kl_cap_total``: no round can be accepted from it; the
    reason names the used-up budget and offers rollback or a new line from the base."""
    cap = 0.9 * min(first_round.metrics[k] for k in drift_guard.TOTALS)
    outcome, _ = run_round(make_job(
        tmp_path / "job", tiny_model_dir, parent_adapter=first_round.adapter,
        hyper={**SMALL_STEPS, "kl_cap": cap, "kl_cap_total": cap}))
    res = outcome.result
    assert not res.accepted and res.metrics["steps"] == 0
    spent = [r for r in res.reasons if "drift budget of this line of versions is used up" in r]
    assert len(spent) == 1, res.reasons
    assert "roll back" in spent[0] and "new line of versions from the base model" in spent[0]


# ---- what a guard stop trained (issue 20 item 8) ------------------------------------


def test_a_guard_stop_in_the_first_epoch_reports_and_counts_only_what_it_trained(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Two examples a step, four steps an epoch; the guard stops at step 3 and keeps
    step 2: the kept weights saw the first 4 examples of epoch 1's order, so only
    those are trained (the app retires them) and only those fold into the baseline."""
    from rltray.trainer.rounddata import epoch_order

    hyper = {"lr": 0.05, "step_examples": 2, "warmup_steps": 8, "guard_max_gap": 1}
    _, free = run_round(make_job(tmp_path / "free", tiny_model_dir, hyper=hyper))
    w = [max(x["kl_round"], x["kl_round_general"]) for x in free if x["type"] == "progress"]
    assert w[1] < w[2], w
    cap = (w[1] * w[2]) ** 0.5 / drift_guard.GUARD_MARGIN  # step 3 passes the line, step 2 not
    outcome, _ = run_round(make_job(tmp_path / "job", tiny_model_dir, baseline=0.2, hyper={
        **hyper, "kl_cap": cap, "kl_cap_total": cap, "gate_profile": "tiny-test"}))
    res = outcome.result
    assert res.metrics["steps"] == 2 and "kept the weights of step 2" in res.metrics[
        "stopped_early"]
    rows = default_examples()
    first = sorted(epoch_order(len(rows), 7, 0)[:4])  # the job's seed is 7
    assert res.trained_ids == [rows[p]["id"] for p in first]
    assert res.unseen_ids == [r["id"] for p, r in enumerate(rows) if p not in first]
    assert res.metrics["examples_trained"] == 4 and res.metrics["examples_unseen"] == 4
    done = res.line()
    assert done["trained_ids"] == res.trained_ids and done["unseen_ids"] == res.unseen_ids
    meta = json.loads((Path(res.adapter) / "rltray.json").read_text())
    assert meta["trained_ids"] == res.trained_ids and meta["unseen_ids"] == res.unseen_ids
    assert res.accepted, res.reasons
    seen = [rows[p]["rating"] for p in first]  # rated_at order is file order here
    assert res.baseline == pytest.approx(objective.ema_update(0.2, seen, 0.99))
    everything = objective.ema_update(0.2, [r["rating"] for r in rows], 0.99)
    assert res.baseline != pytest.approx(everything)


def test_trained_positions_are_all_after_the_first_epoch() -> None:
    from rltray.trainer.rounddata import epoch_order, trained_positions

    assert trained_positions(8, 4, 7, 2) == list(range(8))  # one whole epoch
    assert trained_positions(8, 4, 7, 5) == list(range(8))
    assert trained_positions(8, 3, 7, 3) == list(range(8))  # 3 x 3 >= 8
    assert trained_positions(8, 2, 7, 0) == []
    assert trained_positions(8, 2, 7, 3) == sorted(epoch_order(8, 7, 0)[:6])
