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

from rltray.trainer.backends import torch_peft

from tests.support.jobfiles import make_job, run_round, setup_round

pytestmark = pytest.mark.ml


def test_the_cpu_budget_decides_sequences_per_pass(tiny_model_dir: Path, tmp_path: Path) -> None:
    _, _, backend, _, _ = setup_round(make_job(tmp_path / "j", tiny_model_dir))
    config = backend.model.config
    per_token = config.hidden_size * config.num_hidden_layers * torch_peft.ACTIVATION_BYTES
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
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-6, err_msg=key)
