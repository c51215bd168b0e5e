"""``bench/train_speed.py --shape``: the shape named on the command line is the model built.

Why: the real-model shapes (SmolLM2-135M, a Qwen2.5-0.5B-sized Llama) are where
issue 8's speed figures are quoted; a shape that silently fell back to the 60M
default, lost its tied head, or wrote over ``model-60m`` would report the wrong
model's tokens/s. The check stays cheap: the config is written as ``build_model``
writes it and the model is built on the ``meta`` device (no memory, no weights),
and its exact parameter count is compared with the real models' published ones.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.ml

#: shape -> exact parameter count. SmolLM2-135M: 134,515,008 as published. Qwen2.5-0.5B
#: has 494,032,768; the stand-in lacks its q/k/v biases, 24 x (896 + 2 x 128) = 27,648.
PARAMS = {"smollm2-135m": 134_515_008, "qwen-0.5b": 494_032_768 - 27_648}


def _train_speed() -> ModuleType:
    """Import bench/train_speed.py as a module (bench is scripts, not a package)."""
    bench = str(ROOT / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)  # its mode modules import it by name
    return importlib.import_module("train_speed")


@pytest.mark.parametrize("shape", sorted(PARAMS))
def test_shape_reaches_the_built_config(shape: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    ts = _train_speed()
    a = ts.parse_args(["--shape", shape, "--out", str(tmp_path)])
    d = ts.model_dims(a)
    cfg = ts.llama_config(d, SimpleNamespace(bos_token_id=1, eos_token_id=2, pad_token_id=0))
    assert cfg.tie_word_embeddings is True
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (
        d["hidden"], d["layers"], d["vocab"])
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    assert sum(p.numel() for p in model.parameters()) == PARAMS[shape]
    # The head is the embedding (tied); the lookup is free but the head's matmul runs,
    # so the matmul parameters are every weight but the RMSNorms (2 per layer + 1).
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert ts.matmul_params(d) == PARAMS[shape] - (2 * d["layers"] + 1) * d["hidden"]
    assert ts.model_folder(a.out, a) == tmp_path / f"model-{shape}"


def test_default_shape_keeps_its_folder_and_quick_excludes_shape(tmp_path: Path) -> None:
    ts = _train_speed()
    a = ts.parse_args(["--out", str(tmp_path)])
    assert ts.model_dims(a)["hidden"] == 512
    assert ts.model_folder(a.out, a) == tmp_path / "model-60m"
    q = ts.parse_args(["--quick"])
    assert ts.model_folder(Path("x"), q) == Path("x") / "model-quick"
    with pytest.raises(SystemExit):
        ts.parse_args(["--quick", "--shape", "qwen-0.5b"])
