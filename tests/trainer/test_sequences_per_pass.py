"""On a CPU a training forward pass takes only as many sequences as fit the activation
budget (issue 25: SmolLM2-135M's step peaked at 3.08 GB RSS with 4 sequences a pass and
1.45 GB with one, at the same speed). The maths is the same: the adapter a round trains
one sequence at a time matches the one it trains four at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from rltray.trainer.backends import lean, torch_pass_memory, torch_peft

from tests.support.jobfiles import make_job, run_round, setup_round

pytestmark = pytest.mark.ml


def test_the_cpu_budget_decides_sequences_per_pass(tiny_model_dir: Path, tmp_path: Path) -> None:
    _, _, backend, _, _ = setup_round(make_job(tmp_path / "j", tiny_model_dir))
    config = backend.model.config
    per_token = config.hidden_size * config.num_hidden_layers * lean.ACTIVATION_BYTES
    fits = torch_peft.CPU_ACTIVATION_BUDGET // per_token  # tokens one pass may hold
    assert backend.sequences_per_pass(96, 4) == 4  # a tiny model keeps its batch
    assert backend.sequences_per_pass(fits // 2, 4) == 2
    assert backend.sequences_per_pass(fits * 3, 4) == 1  # never fewer than one
    assert backend.sequences_per_pass(96, 0) == 1


def test_one_sequence_a_pass_trains_the_same_adapter(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batched, lines = run_round(make_job(tmp_path / "batched", tiny_model_dir))
    assert batched.status == "done"
    assert not any("per forward pass" in str(x.get("message")) for x in lines)
    monkeypatch.setattr(torch_peft, "CPU_ACTIVATION_BUDGET", 1)
    single, lines = run_round(make_job(tmp_path / "single", tiny_model_dir))
    assert single.status == "done"
    told = [x["message"] for x in lines if "per forward pass" in str(x.get("message"))]
    assert told and told[0].startswith("1 sequence(s) per forward pass, not batch_size 2")
    from safetensors.numpy import load_file

    a = load_file(str(Path(batched.result.adapter) / "adapter_model.safetensors"))
    b = load_file(str(Path(single.result.adapter) / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    # batched and single passes sum in different orders; Adam's normalisation lifts that
    # rounding to ~3e-6 on some weights (an AVX-512 EPYC), well under the weights' 1e-2
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-5, err_msg=key)


def test_a_sequence_over_the_budget_recomputes_its_blocks_to_the_same_adapter(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One sequence a pass either way; over the share of the machine's memory the decoder
    blocks keep only their inputs and are run again in the backward (each checkpointed
    call is counted), and the adapter comes out the same."""
    import torch.utils.checkpoint

    monkeypatch.setattr(torch_peft, "CPU_ACTIVATION_BUDGET", 1)
    asked: list[bool] = []  # a tight round also hands freed memory back (test_allocator)
    monkeypatch.setattr(torch_peft.allocator, "return_freed_memory", lambda: asked.append(True))
    kept, lines = run_round(make_job(tmp_path / "kept", tiny_model_dir))
    assert not asked and not any("runs lean" in str(x.get("message")) for x in lines)
    monkeypatch.setattr(lean, "RECOMPUTE_SHARE", 0)  # any sequence is over the line
    calls = []
    real = torch.utils.checkpoint.checkpoint

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(kwargs.get("use_reentrant"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", counted)
    recomputed, lines = run_round(make_job(tmp_path / "recomputed", tiny_model_dir))
    assert any("this round runs lean" in str(x.get("message")) for x in lines)  # told why
    assert kept.status == recomputed.status == "done"
    assert calls and set(calls) == {False}  # every block of every training pass
    assert asked
    from safetensors.numpy import load_file

    a = load_file(str(Path(kept.result.adapter) / "adapter_model.safetensors"))
    b = load_file(str(Path(recomputed.result.adapter) / "adapter_model.safetensors"))
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-6, atol=1e-8, err_msg=key)
    _, _, backend, _, _ = setup_round(make_job(tmp_path / "j", tiny_model_dir))
    monkeypatch.setattr(lean, "RECOMPUTE_SHARE", 1 / 4)
    assert not backend.recomputes(96)  # a tiny model keeps everything on any machine
    roomy_chunk = backend._head_chunk()
    backend._lean.available_at_start = 4 * backend._activation_bytes(96) - 1  # a tight machine
    assert backend.recomputes(96) and not backend.recomputes(95)
    asked.clear()
    backend.sequences_per_pass(95, 2)  # the round's plan, from its widest sequence
    assert not backend.tight and not asked and backend._head_chunk() == roomy_chunk
    backend.sequences_per_pass(96, 2)  # tight: lean from the round's first pass
    assert backend.tight and asked and backend._head_chunk() == roomy_chunk // 4
    monkeypatch.setenv("RLTRAY_TRAINER_RECOMPUTE", "0")  # the user's word decides
    assert not backend.recomputes(96)
    monkeypatch.setenv("RLTRAY_TRAINER_RECOMPUTE", "1")
    assert backend.recomputes(2)
    monkeypatch.setenv("RLTRAY_TRAINER_RECOMPUTE", "Yes")
    assert backend.recomputes(2)
    monkeypatch.setenv("RLTRAY_TRAINER_RECOMPUTE", "perhaps")  # not a switch word: auto
    assert backend.recomputes(96) and not backend.recomputes(95)
    # only the blocks' own flags change for the pass, and they are put back after it
    model = backend.model
    model.eval()
    off = torch_pass_memory.recompute_blocks(model, True)
    blocks = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False)]
    assert len(blocks) == model.config.num_hidden_layers
    assert all(b.training for b in blocks) and not model.training
    assert not any(m.training for b in blocks for m in b.modules() if m is not b)  # no dropout
    off()
    assert not any(getattr(b, "gradient_checkpointing", False) or b.training for b in blocks)
