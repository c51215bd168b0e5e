"""The base model loads into fp32 without also holding its bf16 file (issue 25): the same
weights as ``from_pretrained(dtype=float32)``, at a lower peak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rltray.trainer.backends.torch_load import load_causal_lm  # noqa: E402

pytestmark = pytest.mark.ml


@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random Llama of ~36M parameters stored in bf16 (a 71 MB file, no tensor over
    8 MB), so the file is worth measuring and no single weight hides the difference."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=8192, hidden_size=512, intermediate_size=1536,
                         num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("bf16") / "model"
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    return folder


def test_the_same_weights_as_from_pretrained(bf16_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(bf16_model, dtype=torch.float32)
    loaded, returned = load_causal_lm(bf16_model, torch.float32, trust=False, revision=None)
    want, got = plain.state_dict(), loaded.state_dict()
    assert want.keys() == got.keys()
    for key in want:
        assert got[key].dtype == want[key].dtype == torch.float32, key
        assert torch.equal(got[key], want[key]), key
    assert loaded.dtype == torch.float32 and loaded.config.dtype == torch.float32
    if sys.platform.startswith("linux"):
        file_bytes = sum(p.stat().st_size for p in bf16_model.glob("*.safetensors"))
        assert returned > 0.9 * file_bytes  # nearly every page of the file went back


def test_a_cache_snapshot_of_links_hands_its_pages_back_too(bf16_model: Path,
                                                            tmp_path: Path) -> None:
    """A Hugging Face cache snapshot is a folder of links to blobs outside it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("pages are handed back on Linux only")
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    for i, f in enumerate(sorted(bf16_model.iterdir())):
        blob = blobs / f"blob{i}"
        blob.write_bytes(f.read_bytes())
        (snapshot / f.name).symlink_to(blob)
    model, returned = load_causal_lm(snapshot, torch.float32, trust=False, revision=None)
    file_bytes = sum(p.stat().st_size for p in bf16_model.glob("*.safetensors"))
    assert returned > 0.9 * file_bytes
    assert next(model.parameters()).dtype == torch.float32


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                    reason="needs Linux's /proc/self/clear_refs to reset the peak RSS")
def test_the_load_does_not_peak_at_the_weights_plus_the_file(bf16_model: Path) -> None:
    bench = Path(__file__).resolve().parents[2] / "bench" / "load_peak.py"
    done = subprocess.run([sys.executable, str(bench), str(bf16_model), "--json"],
                          capture_output=True, text=True, timeout=600, check=True)
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    file_bytes = sum(p.stat().st_size for p in bf16_model.glob("*.safetensors"))
    plain, lean = rows["from_pretrained"]["load"], rows["torch_load"]["load"]
    assert lean < plain - file_bytes // 2, (plain, lean, file_bytes)
    assert rows["torch_load"]["returned"] > 0.9 * file_bytes
