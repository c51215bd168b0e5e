"""The capability check (issue 20 item 5) on the real tiny Llama: greedy base answers,
their NLL under an adapter, and the gate's verdict — in a whole round too.

A round at 50x the test rate stays inside the drift caps (KL to the parent ~0.03 of
the 0.05 cap) yet makes the base's own answers ~9% less likely: only the capability
check rejects it. The same round at the test rate (+1.6%) is accepted.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from rltray.trainer import capability, data, evaluate, presets, rounddata

from tests.support.jobfiles import make_job, run_round, setup_round

pytestmark = pytest.mark.ml

GATE = SimpleNamespace(auroc_tolerance=0.05, kl_cap=0.1, kl_cap_total=0.6,
                       gate_profile="standard", nll_cap=0.05)
DRIFT_OK = {"kl_round": 0.01, "kl_total": 0.01, "sanity_errors": []}


def loaded(tmp: Path, model: Path, **hyper: object):
    _, hyper_, backend, _, heldout = setup_round(make_job(tmp, model, hyper=hyper))
    pad = rounddata.pad_id(backend.tokenizer)
    held_enc, held_kept = rounddata.encode_all(backend.tokenizer, heldout, hyper_,
                                               lambda _: None, "held-out")
    return hyper_, backend, pad, held_enc, held_kept


def test_greedy_is_the_base_models_argmax_with_the_lora_off(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import torch

    _, backend, _, held_enc, held_kept = loaded(tmp_path / "j", tiny_model_dir)
    prompts = capability.choose_prompts(held_enc, held_kept, {}, [], 2)
    assert len(prompts) == 2 and len(prompts[0]) <= len(prompts[1])  # shortest first
    answer = backend.greedy([prompts[0]], 12, set())[0]
    assert len(answer) == 12  # no stop token given: the full budget
    # a batch (left-padded: the prompts differ in length) answers as one at a time does
    longer = prompts[1] + prompts[1][-3:]
    alone = backend.greedy([longer], 12, set())[0]
    assert backend.greedy([prompts[0], longer], 12, set()) == [answer, alone]
    # a LoRA that changes the policy does not change the base's answer
    state = backend.lora_state()
    rng = np.random.default_rng(0)
    backend.set_lora_state({k: rng.normal(0, 0.5, v.shape).astype(np.float32)
                            for k, v in state.items()})
    assert backend.greedy([prompts[0]], 12, set()) == [answer]
    assert backend.greedy([prompts[0]], 12, set(), adapter=True) != [answer]  # the adapter's
    # each token is the argmax of the base's full forward (no cache) at its position
    ids = torch.tensor([prompts[0] + answer])
    with torch.no_grad(), backend.model.disable_adapter():
        logits = backend.model(input_ids=ids).logits[0]
    start = len(prompts[0])
    assert [int(logits[start - 1 + j].argmax()) for j in range(12)] == answer
    # a stop token ends the answer and is kept in it
    cut = answer[: answer.index(answer[2]) + 1]
    assert backend.greedy([prompts[0], longer], 12, {answer[2]})[0] == cut


def test_both_prompt_sets_share_one_greedy_batch_unless_padding_would_swell_it(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hyper, backend, pad, held_enc, held_kept = loaded(tmp_path / "j", tiny_model_dir)
    prompts = capability.choose_prompts(held_enc, held_kept, {}, [], 3)
    everyday = capability.general_prompts(backend.tokenizer, int(hyper.general_prompts))
    assert prompts and everyday
    stop = capability.stop_ids(backend.tokenizer)
    alone = (backend.greedy(prompts, int(hyper.ref_tokens), stop),
             backend.greedy(everyday, int(hyper.ref_tokens), stop))
    rows: list[int] = []
    greedy = backend.greedy

    def counted(batch: list[list[int]], *args: object, **kw: object) -> list[list[int]]:
        rows.append(len(batch))
        return greedy(batch, *args, **kw)

    monkeypatch.setattr(backend, "greedy", counted)
    ref = capability.round_start(backend, prompts, hyper, pad, has_parent=False)
    assert rows == [len(prompts) + len(everyday)]  # one generation for both sets
    assert (ref["answers"], ref["general"]["answers"]) == alone  # each row as it was alone
    rows.clear()
    monkeypatch.setattr(capability, "MERGE_PADDING", 0.0)  # as if the prompts were long
    apart = capability.round_start(backend, prompts, hyper, pad, has_parent=False)
    assert rows == [len(prompts), len(everyday)]
    assert (apart["answers"], apart["general"]["answers"]) == alone
    assert apart["general"]["nll_base"] == ref["general"]["nll_base"]


def test_long_round_prompts_keep_the_everyday_prompts_in_their_own_batch() -> None:
    short, everyday = [[1] * 40] * 8, [[1] * 30] * 8
    assert capability.one_batch(short, everyday, 128)  # 16 x 168 against 8 x 168 + 8 x 158
    long = [[1] * 2000] * 8  # a merged batch would pad eight 30-token rows to 2000
    assert not capability.one_batch(long, everyday, 128)
    assert capability.one_batch(long, [], 128) and capability.one_batch([], everyday, 128)


def test_a_damaging_adapter_is_rejected_and_a_harmless_one_accepted(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    hyper, backend, pad, held_enc, held_kept = loaded(tmp_path / "j", tiny_model_dir)
    prompts = capability.choose_prompts(held_enc, held_kept, {}, [], 4)
    ref = capability.round_start(backend, prompts, hyper, pad, has_parent=False)
    assert ref["nll_base"] == ref["nll_parent"] and len(ref["answers"]) == 4
    state = {k: v.copy() for k, v in backend.lora_state().items()}
    rng = np.random.default_rng(1)

    def verdict(scale: float) -> evaluate.Verdict:
        backend.set_lora_state({k: (v + rng.normal(0, scale, v.shape)).astype(np.float32)
                                for k, v in state.items()})
        return evaluate.gate({**DRIFT_OK, **capability.finish(backend, ref, pad)}, GATE)

    harmless = verdict(1e-4)
    assert harmless.accept, harmless.reasons
    assert abs(harmless.metrics["ref_nll_increase"]) < 0.01
    assert any(n.endswith("capability kept") for n in harmless.notes)
    damaging = verdict(0.5)
    assert not damaging.accept
    assert damaging.metrics["ref_nll_increase"] > 0.05
    assert damaging.reasons[0].endswith("above the +5% cap (nll_cap): the model lost capability")


def test_the_gate_lets_a_line_over_the_cap_give_capability_back() -> None:
    over = {**DRIFT_OK, "ref_nll_base": 1.0, "ref_nll_parent": 1.2, "ref_nll_new": 1.1,
            "ref_nll_increase": 0.1, "ref_prompts": 4}
    v = evaluate.gate(over, GATE)
    assert v.accept and "gave capability back" in v.notes[-1]
    assert not evaluate.gate({**over, "ref_nll_new": 1.3, "ref_nll_increase": 0.3}, GATE).accept
    broken = evaluate.gate({**over, "ref_nll_new": float("nan"), "ref_nll_increase": None}, GATE)
    assert not broken.accept and "finite probability" in broken.reasons[0]
    off = evaluate.gate(DRIFT_OK, GATE)
    assert off.accept and "capability check off" in off.notes[-1]


def test_a_round_that_loses_capability_inside_the_drift_caps_is_rejected(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    calm, _ = run_round(make_job(tmp_path / "calm", tiny_model_dir))
    assert calm.status == "done" and calm.result.accepted, calm.result.reasons
    m = calm.result.metrics
    assert m["ref_prompts"] == 4 and m["ref_tokens"] > 0 and m["ref_nll_increase"] < 0.05
    hot, _ = run_round(make_job(tmp_path / "hot", tiny_model_dir, hyper={"lr": 0.5}))
    assert hot.status == "done" and not hot.result.accepted
    m = hot.result.metrics
    caps = presets.DEFAULTS
    assert m["kl_round"] < caps.kl_cap and m["kl_total"] < caps.kl_cap_total  # caps pass it
    assert len(hot.result.reasons) == 1 and "lost capability" in hot.result.reasons[0]


def test_a_paused_round_scores_the_same_reference_answers(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The reference answers live in the checkpoint: a resumed round does not regenerate."""
    job = make_job(tmp_path / "j", tiny_model_dir)
    straight, _ = run_round(make_job(tmp_path / "s", tiny_model_dir))
    lines: list[dict] = []
    paused, _ = run_round(job, should_stop=lambda: any(x.get("type") == "progress"
                                                       for x in lines), lines=lines)
    assert paused.status == "paused"
    from rltray.trainer import checkpoint

    saved = checkpoint.load(paused.checkpoint)
    assert saved is not None and len(saved.reference["answers"]) == 4
    calls: list[bool] = []  # adapter on?
    from rltray.trainer.backends.torch_peft import TorchPeftBackend

    real = TorchPeftBackend.greedy

    def counted(self, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(bool(k.get("adapter")))
        return real(self, *a, **k)

    TorchPeftBackend.greedy = counted  # type: ignore[method-assign]
    try:
        resumed, _ = run_round(job)
    finally:
        TorchPeftBackend.greedy = real  # type: ignore[method-assign]
    # the base's answers come from the checkpoint; only the new adapter answers (the
    # broken-answer count at the end)
    assert calls == [True] and resumed.status == "done"
    keys = ("ref_nll_base", "ref_nll_parent", "ref_nll_new", "ref_tokens", "general_nll_base",
            "general_nll_new", "general_prompts")
    assert resumed.result.metrics["general_prompts"] == 8
    assert {k: resumed.result.metrics[k] for k in keys} == {
        k: straight.result.metrics[k] for k in keys}


def test_everyday_prompts_hold_nll_cap_and_the_rounds_own_the_looser_rated_cap() -> None:
    """Issue 20: a style the user asked for makes the base's answers to their own kind of
    prompt less likely (comment, SmolLM2: +14.5% there, +3.2% on everyday prompts); only
    the everyday prompts measure capability at +5%."""
    gate = SimpleNamespace(**{**vars(GATE), "rated_nll_cap": 0.2})
    style = {**DRIFT_OK, "ref_nll_base": 1.0, "ref_nll_parent": 1.0, "ref_nll_new": 1.145,
             "ref_nll_increase": 0.145, "ref_prompts": 8, "general_nll_base": 2.0,
             "general_nll_parent": 2.0, "general_nll_new": 2.064, "general_nll_increase": 0.032,
             "general_prompts": 8}  # fmt: skip
    v = evaluate.gate(style, gate)
    assert v.accept, v.reasons
    assert any("8 everyday prompts" in n and n.endswith("capability kept") for n in v.notes)
    forgot = evaluate.gate({**style, "general_nll_new": 2.2, "general_nll_increase": 0.1}, gate)
    assert forgot.reasons == ["the base model's own answers to 8 everyday prompts: NLL 2.000 -> "
                              "2.200 nats/token (+10.0%), above the +5% cap (nll_cap): the "
                              "model lost capability"]
    broke = evaluate.gate({**style, "ref_nll_new": 1.3, "ref_nll_increase": 0.3}, gate)
    assert not broke.accept and "(rated_nll_cap)" in broke.reasons[0]
    # without the everyday figures (general_prompts 0, an older checkpoint) the round's own
    # prompts are held to nll_cap, as before
    old = {k: v for k, v in style.items() if not k.startswith("general_")}
    held = evaluate.gate(old, gate)
    assert not held.accept and "(nll_cap)" in held.reasons[0]
    assert any("everyday prompts not measured" in n for n in held.notes)


def test_everyday_prompts_are_rendered_as_a_turns_prompt(tiny_tokenizer) -> None:
    got = capability.general_prompts(tiny_tokenizer, 3)
    assert len(got) == 3 and capability.general_prompts(tiny_tokenizer, 0) == []
    ids, start, _ = data.render(tiny_tokenizer, [
        {"role": "user", "content": capability.GENERAL_PROMPTS[1]},
        {"role": "assistant", "content": "Sure."}])
    assert got[1] == list(ids[:start])  # the template's generation prompt included
    assert "sleeping better" in tiny_tokenizer.decode(got[1])
    assert len(set(capability.GENERAL_PROMPTS)) == 16


def test_prompts_come_from_training_turns_when_nothing_is_held_out(tiny_tokenizer) -> None:
    from rltray.trainer.job import example_from_dict

    from tests.support.jobfiles import default_examples

    exs = [example_from_dict(d) for d in default_examples()]
    enc = {i: data.encode(tiny_tokenizer, e, 96, index=i) for i, e in enumerate(exs)}
    got = capability.choose_prompts({}, [], enc, sorted(enc), 3)
    every = [list(e.input_ids[: e.response_start]) for e in enc.values()]
    assert len(got) == 3 and all(p in every for p in got)
    assert [len(p) for p in got] == sorted(len(p) for p in every)[:3]  # shortest first
    assert capability.choose_prompts({}, [], enc, sorted(enc), 0) == []
    assert tiny_tokenizer.eos_token_id in capability.stop_ids(tiny_tokenizer)


def test_mlx_greedy_answers_as_torch_does(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Both backends answer the same prompt with the same greedy tokens, LoRA off."""
    pytest.importorskip("mlx.core")
    pytest.importorskip("mlx_lm")
    from rltray.trainer.backends.mlx import MlxBackend

    hyper, torch_backend, _, held_enc, held_kept = loaded(tmp_path / "j", tiny_model_dir)
    prompt = capability.choose_prompts(held_enc, held_kept, {}, [], 1)[0]
    mlx_backend = MlxBackend(SimpleNamespace(base_model=str(tiny_model_dir), revision=None,
                                             parent_adapter=None, seed=0,
                                             trust_remote_code=False), hyper)
    mlx_backend.load()
    state = mlx_backend.lora_state()
    mlx_backend.set_lora_state({k: np.full(v.shape, 0.3, np.float32) for k, v in state.items()})
    stop = capability.stop_ids(torch_backend.tokenizer)
    assert mlx_backend.greedy([prompt], 16, stop) == torch_backend.greedy([prompt], 16, stop)
    # a batch (left-padded: the prompts differ in length) answers as one at a time does
    longer = prompt + prompt[-3:]
    alone = mlx_backend.greedy([longer], 16, set())
    both = mlx_backend.greedy([prompt, longer], 16, set())
    assert both[1] == alone[0] and both == torch_backend.greedy([prompt, longer], 16, set())
    # a stop token ends its row, is kept, and leaves the other row running
    first = both[0]
    cut = first[: first.index(first[2]) + 1]
    assert mlx_backend.greedy([prompt, longer], 16, {first[2]})[0] == cut
    # with the LoRA on, the adapter answers
    assert mlx_backend.greedy([prompt], 16, set(), adapter=True) != [first]


def test_the_tiny_test_profile_turns_the_check_off_and_says_so() -> None:
    tiny = SimpleNamespace(**{**vars(GATE), "gate_profile": "tiny-test"})
    lost = {**DRIFT_OK, "ref_nll_base": 1.0, "ref_nll_parent": 1.0, "ref_nll_new": 2.0,
            "ref_nll_increase": 1.0, "ref_prompts": 4}
    v = evaluate.gate(lost, tiny)
    assert v.accept and "capability check off (gate profile 'tiny-test'" in v.notes[-1]
    assert not evaluate.gate(lost, GATE).accept


def test_broken_answers_are_empty_looping_or_lost_the_code() -> None:
    """Issue 20: the gate had no degeneracy check; these are what it counts."""
    code = "Here it is:\n```python\ndef f():\n    return 1\n```"
    assert not capability.degenerate(code, code)
    assert capability.degenerate("   ", code)
    assert capability.degenerate("the same words again and " * 20, "plain text")
    assert capability.degenerate("def f(): return 1 is what you want", code)  # no fence
    assert not capability.degenerate("A plain explanation.", "Another plain one.")


def test_the_gate_rejects_a_rise_in_broken_answers_beyond_degen_cap() -> None:
    ok = {**DRIFT_OK, "ref_nll_base": 1.0, "ref_nll_parent": 1.0, "ref_nll_new": 1.01,
          "ref_nll_increase": 0.01, "ref_prompts": 8}  # fmt: skip
    gate = SimpleNamespace(**{**vars(GATE), "degen_cap": 0.15})
    one = evaluate.gate({**ok, "ref_degenerate_base": 1, "ref_degenerate_new": 2}, gate)
    assert one.accept and "1 from the base, 2 from the new adapter" in one.notes[-1]
    few = {**ok, "ref_prompts": 4, "ref_degenerate_base": 0, "ref_degenerate_new": 1}
    assert evaluate.gate(few, gate).accept  # one answer of four is not evidence enough
    two = evaluate.gate({**ok, "ref_degenerate_base": 1, "ref_degenerate_new": 3}, gate)
    assert not two.accept
    assert two.reasons == ["broken answers (empty, looping, or without the code the base "
                           "wrote) to the same 8 prompts: 1 from the base, 3 from the new "
                           "adapter, +25% above the 15% cap (degen_cap)"]
