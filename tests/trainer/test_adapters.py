"""Adapter folder format: atomic PEFT-layout writes, all-at-once validation, conversions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rltray.trainer import adapters

CONFIG = {
    "model_type": "llama",
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def _tensors(rank: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    """LoRA tensors for every block linear layer of CONFIG, with B nonzero."""
    rng = np.random.default_rng(seed)
    shapes = adapters.module_shapes_from_config(CONFIG)
    assert shapes is not None
    out = {}
    for path, (o, i) in shapes.items():
        out[adapters.peft_name(path, "A")] = rng.normal(size=(rank, i)).astype(np.float32)
        out[adapters.peft_name(path, "B")] = rng.normal(size=(o, rank)).astype(np.float32)
    return out


def _write(folder: Path, tensors: dict[str, np.ndarray], rank: int = 2) -> Path:
    return adapters.write_adapter(
        folder,
        tensors,
        rank=rank,
        alpha=2 * rank,
        base_model="tiny",
        revision="abc",
        parent=None,
        metrics={"auroc_new": 0.7},
        data_hash="0" * 64,
    )


def test_names_round_trip() -> None:
    name = adapters.peft_name("model.layers.0.self_attn.q_proj", "A")
    assert name == "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    assert adapters.parse_peft_name(name) == ("model.layers.0.self_attn.q_proj", "A")
    assert adapters.parse_peft_name("model.embed_tokens.weight") is None
    assert (
        adapters.mlx_name("model.layers.1.mlp.up_proj", "B") == "model.layers.1.mlp.up_proj.lora_b"
    )
    assert adapters.scale_from_alpha(32, 16) == 2.0
    assert adapters.alpha_from_scale(2.0, 16) == 32.0


def test_mlx_conversion_transposes_and_round_trips() -> None:
    peft = _tensors()
    mlx = adapters.peft_to_mlx(peft)
    a = mlx["model.layers.0.self_attn.q_proj.lora_a"]
    assert a.shape == (16, 2)  # (in, r)
    back = adapters.mlx_to_peft(mlx)
    assert back.keys() == peft.keys()
    for k in peft:
        np.testing.assert_array_equal(back[k], peft[k])


def test_write_is_complete_valid_and_private(tmp_path: Path) -> None:
    out = _write(tmp_path / "v0001", _tensors())
    assert sorted(p.name for p in out.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "rltray.json",
    ]
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp left
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 2 and cfg["lora_alpha"] == 4.0
    assert cfg["target_modules"] == [
        "down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj",
    ]  # fmt: skip
    meta = json.loads((out / "rltray.json").read_text())
    assert meta["base_model"] == "tiny" and meta["revision"] == "abc"
    assert meta["data_sha256"] == "0" * 64 and meta["metrics"] == {"auroc_new": 0.7}
    assert (out / "adapter_model.safetensors").stat().st_mode & 0o077 == 0
    assert adapters.validate_adapter(out, CONFIG) == []
    loaded = adapters.load_adapter_tensors(out)
    for k, v in _tensors().items():
        np.testing.assert_array_equal(loaded[k], v)


def test_write_refuses_existing_and_leaves_nothing_on_failure(tmp_path: Path) -> None:
    tmp_path = tmp_path / "adapters"
    out = _write(tmp_path / "v1", _tensors())
    with pytest.raises(FileExistsError):
        _write(out, _tensors())
    with pytest.raises(ValueError, match="not a PEFT"):
        _write(tmp_path / "v2", {"bogus": np.zeros((2, 2), np.float32)})
    assert not (tmp_path / "v2").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["v1"]


def test_validate_reports_every_problem_at_once(tmp_path: Path) -> None:
    t = _tensors()
    t[adapters.peft_name("model.layers.0.self_attn.q_proj", "A")][0, 0] = np.nan
    t[adapters.peft_name("model.layers.1.mlp.up_proj", "B")] = np.zeros((99, 2), np.float32)
    t[adapters.peft_name("model.layers.7.mlp.up_proj", "A")] = np.zeros((2, 16), np.float32)
    t[adapters.peft_name("model.layers.7.mlp.up_proj", "B")] = np.zeros((24, 2), np.float32)
    del t[adapters.peft_name("model.layers.1.self_attn.v_proj", "B")]
    out = _write(tmp_path / "bad", t)
    cfg_path = out / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    del cfg["lora_alpha"]
    cfg_path.write_text(json.dumps(cfg))
    (out / "rltray.json").unlink()
    problems = adapters.validate_adapter(out, CONFIG)
    text = "\n".join(problems)
    assert "rltray.json is missing" in text
    assert "lora_alpha" in text
    assert "non-finite" in text and "q_proj.lora_A" in text
    assert "model.layers.1.mlp.up_proj: adapter maps 16->99" in text
    assert "model.layers.7.mlp.up_proj is not a linear layer of the base model" in text
    assert "model.layers.1.self_attn.v_proj has no lora_B" in text
    assert len(problems) == 6


def test_validate_missing_folder_and_files(tmp_path: Path) -> None:
    assert "does not exist" in adapters.validate_adapter(tmp_path / "nope")[0]
    (tmp_path / "empty").mkdir()
    problems = adapters.validate_adapter(tmp_path / "empty")
    assert len(problems) == 3
    assert adapters.validate_adapter(tmp_path / "empty", require_metadata=False) == [
        "adapter_config.json is missing",
        "adapter_model.safetensors is missing",
    ]


def test_examples_hash_is_order_sensitive() -> None:
    a = [{"id": "1", "rating": 1}, {"id": "2", "rating": -1}]
    assert adapters.examples_hash(a) == adapters.examples_hash([dict(x) for x in a])
    assert adapters.examples_hash(a) != adapters.examples_hash(a[::-1])


@pytest.mark.ml
def test_written_folder_loads_in_peft(tmp_path: Path) -> None:
    """The folder written from numpy loads in PEFT and applies B·A·alpha/r exactly."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    cfg = transformers.LlamaConfig(
        vocab_size=32, **{k: v for k, v in CONFIG.items() if k != "model_type"}
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    t = _tensors()
    out = _write(tmp_path / "v1", t)
    base_w = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    pm = peft.PeftModel.from_pretrained(model, str(out))
    merged = pm.merge_and_unload()
    a = t[adapters.peft_name("model.layers.0.self_attn.q_proj", "A")]
    b = t[adapters.peft_name("model.layers.0.self_attn.q_proj", "B")]
    expect = base_w.numpy() + (b @ a) * (4.0 / 2)
    np.testing.assert_allclose(
        merged.model.layers[0].self_attn.q_proj.weight.detach().numpy(),
        expect,
        rtol=1e-5,
        atol=1e-5,
    )
