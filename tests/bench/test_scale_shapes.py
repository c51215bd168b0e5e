"""``bench/scale_shapes.py``: the shapes are the published models, and a tiny run works end to end.

Why: the bench's figures are quoted for SmolLM2-135M, Qwen2.5-0.5B/1.5B and
Llama-3.2-3B; a typo in a hand-written config value would time another model.
The shapes are checked against the models' published parameter counts on the
``meta`` device (no memory); the GGUF writer's names and shapes against what
``gguf_base`` reads back; a tiny GGUF is materialized by the bench's own child
function; and one tiny round runs as the user runs the bench (slow: the bench, its
matmul child and a trainer process).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.ml

#: Published parameter counts (the model cards' safetensors totals).
PUBLISHED = {"smollm2-135m": 134_515_008, "qwen2.5-0.5b": 494_032_768,
             "qwen2.5-1.5b": 1_543_714_304, "llama-3.2-3b": 3_212_749_824}


def _bench() -> ModuleType:
    bench = str(ROOT / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    return importlib.import_module("scale_shapes")


@pytest.mark.parametrize("shape", sorted(PUBLISHED))
def test_each_shape_is_the_published_model(shape: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    ss = _bench()
    d = ss.SHAPES[shape]
    assert ss.n_params(d) == PUBLISHED[shape]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(ss.hf_config(d))
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED[shape]
    names = {k: tuple(v.shape) for k, v in model.state_dict().items() if k != "lm_head.weight"}
    assert names == ss.tensor_shapes(d)  # what build_model writes is what Transformers loads
    assert model.config.tie_word_embeddings is True


def test_the_gguf_holds_every_tensor_under_llama_cpp_names(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    ss = _bench()
    d = ss.SHAPES["tiny"]
    path = ss.write_gguf(tmp_path / "tiny.gguf", {**d, "arch": "qwen2"})
    reader = gguf.GGUFReader(path)
    got = {t.name: tuple(int(x) for x in reversed(t.shape)) for t in reader.tensors}
    want = {ss.gguf_name(k): v for k, v in ss.tensor_shapes({**d, "arch": "qwen2"}).items()}
    assert got == want
    assert "blk.1.attn_k.bias" in got and "output.weight" not in got  # Qwen2 biases, tied head
    from rltray.trainer import gguf_base

    head = gguf_base.read_header(path)
    assert head["architecture"] == "qwen2"
    assert head["parameters"] == ss.n_params(d) + 2 * (d["hidden"] + 2 * 32)  # + the biases


def test_materializing_the_written_gguf_reports_time_memory_and_disk(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    ss = _bench()
    d = ss.SHAPES["tiny"]
    path = ss.write_gguf(tmp_path / "tiny.gguf", d)
    g = ss.child_materialize(str(path), str(tmp_path / "cache"))  # the child's own function
    assert g["seconds"] > 0 and g["peak_rss_gib"] > 0
    folder = next(p for p in (tmp_path / "cache").iterdir() if p.is_dir())
    config = json.loads((folder / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (
        d["hidden"], d["layers"], d["vocab"])
    assert g["folder_bytes"] == sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_tiny_round_reports_real_figures(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scale_shapes.py"), "--shapes", "tiny",
         "--ratings", "2", "--tokens", "16", "--matmul-n", "256", "--no-gguf",
         "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])["rows"][0]
    assert row["wizard_fits"] is True and row["ratings"] == 2
    r = row["rltray"]
    assert r["steps"] >= 1 and r["tok_s"] > 0 and 0 < r["of_peak"] < 1
    assert 0.05 < r["peak_rss_gib"] < 8
    assert any(line.startswith("tiny ") and " rltray " in line for line in proc.stdout.splitlines())
