"""Training on the GGUF that Ollama serves: materialize once, train, publish back."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from rltray.trainer import gguf_base

from tests.support.exportkit import BASE, start_fake

pytest.importorskip("gguf", reason="needs the gguf package (pip install -e '.[export]')")


def _header_only_gguf(path: Path, arch: str) -> Path:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_an_architecture_transformers_cannot_dequantize_is_one_sentence(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    model = _header_only_gguf(tmp_path / "m.gguf", "rwkv7")
    with pytest.raises(gguf_base.GGUFBaseError) as err:
        gguf_base.materialize(model, cache=tmp_path / "cache")
    assert str(err.value) == (
        "Transformers cannot dequantize GGUF models of architecture 'rwkv7': set "
        "training.base_model to the matching Hugging Face weights (a folder or hub id) instead."
    )
    assert not any((tmp_path / "cache").glob("*/config.json"))


def test_a_file_that_is_not_gguf_is_refused_by_the_trainer(tmp_path: Path) -> None:
    from rltray.trainer.backends.base import resolve_model_folder
    from rltray.trainer.job import JobError

    junk = tmp_path / "model.bin"
    junk.write_bytes(b"not a model")
    with pytest.raises(JobError, match="is a file but not a GGUF model"):
        resolve_model_folder(junk)


def test_an_ollama_blob_is_keyed_by_its_name_other_files_by_their_hash(tmp_path: Path) -> None:
    data = b"GGUF" + b"\0" * 60
    plain = tmp_path / "x.gguf"
    plain.write_bytes(data)
    assert gguf_base.file_sha256(plain, tmp_path / "c") == hashlib.sha256(data).hexdigest()
    blob = tmp_path / ("sha256-" + "ab" * 32)
    blob.write_bytes(data)  # Ollama names blobs by content: no need to read 4 GB again
    assert gguf_base.file_sha256(blob, tmp_path / "c") == "ab" * 32


@pytest.mark.slow
def test_materialized_folder_is_the_gguf_as_a_plain_hf_model(
    smollm2_gguf: Path, smollm2_hf: Path
) -> None:
    assert smollm2_hf.name == hashlib.sha256(smollm2_gguf.read_bytes()).hexdigest()
    config = json.loads((smollm2_hf / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == (
        "llama", 30, 576,
    )
    assert "quantization_config" not in config  # dense weights, loadable by any backend
    assert gguf_base._hf_chat_template(smollm2_hf) == gguf_base.gguf_chat_template(smollm2_gguf)
    marker = smollm2_hf / gguf_base.MARKER
    before = marker.stat().st_mtime_ns
    assert gguf_base.materialize(smollm2_gguf, cache=smollm2_hf.parent) == smollm2_hf
    assert marker.stat().st_mtime_ns == before  # cached: not converted twice


@pytest.mark.slow
def test_pairing_reports_every_difference_at_once(
    smollm2_gguf: Path, smollm2_hf: Path, tiny_gguf: Path, tmp_path: Path
) -> None:
    from rltray.trainer.export.ollama_client import Ollama

    fake = start_fake(tmp_path / "o", "0.35.0", tiny_gguf)
    fake.install("smollm2:135m", smollm2_gguf)
    try:
        with Ollama(fake.url) as client:
            smol, tiny = client.show("smollm2:135m"), client.show(BASE)
    finally:
        fake.stop()
    template = gguf_base.gguf_chat_template(smollm2_gguf)
    assert gguf_base.pairing_problems(smollm2_hf, smol.model_info, template) == []
    problems = gguf_base.pairing_problems(
        smollm2_hf, tiny.model_info, gguf_base.gguf_chat_template(tiny_gguf)
    )
    assert problems == [
        "layers 30 vs Ollama's 2",
        "hidden size 576 vs Ollama's 64",
        "vocabulary 49152 vs Ollama's 128",
        "the chat template differs",
    ]


@pytest.mark.slow
@pytest.mark.ml
def test_train_on_the_gguf_ollama_serves_then_publish_it_back(
    smollm2_gguf: Path, smollm2_hf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole loop: Ollama's blob -> trainer (torch) -> adapter -> merged tag in Ollama."""
    pytest.importorskip("peft")
    from rltray.trainer import adapters
    from rltray.trainer.export.ollama_client import Ollama
    from rltray.trainer.export.ollama_publish import publish

    from tests.support.jobfiles import make_job, run_trainer

    fake = start_fake(tmp_path / "o", "0.35.0", smollm2_gguf)
    fake.install("smollm2:135m", smollm2_gguf)
    try:
        with Ollama(fake.url) as client:
            blob = client.show("smollm2:135m").blob_path
        assert blob is not None and blob.name.startswith("sha256-")
        # the cache from the session fixture: this blob has the same sha256, so no reconversion
        monkeypatch.setenv(gguf_base.CACHE_ENV, str(smollm2_hf.parent))
        job = make_job(tmp_path / "job", blob, hyper={"lr": 1e-3, "max_seq_len": 64})
        code, lines, err = run_trainer(job, timeout=900)
        assert code == 0, err[-2000:]
        done = lines[-1]
        assert done["type"] == "done" and Path(done["adapter"]).is_dir()
        assert adapters.validate_adapter(done["adapter"]) == []
        with Ollama(fake.url) as client:
            pub = publish(
                client, "smollm2:135m", Path(done["adapter"]), 1, workdir=tmp_path / "w"
            )
    finally:
        fake.stop()
    assert pub.tag == "smollm2-135m-rltray:v1" and pub.path == "merged"
    assert fake.models["smollm2-135m-rltray:latest"].model_digest != (
        fake.models["smollm2:135m"].model_digest
    )


@pytest.mark.slow
def test_the_streamed_conversion_equals_transformers_whole_model_load(
    smollm2_gguf: Path, smollm2_hf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cached folder (streamed, one tensor at a time) is bit for bit what Transformers'
    own from_pretrained(gguf_file=) + save_pretrained writes, config included."""
    import torch
    from safetensors.torch import load_file
    from transformers import modeling_gguf_pytorch_utils as g

    link = tmp_path / "link" / "model.gguf"
    link.parent.mkdir()
    link.symlink_to(smollm2_gguf)
    whole = tmp_path / "whole"
    whole.mkdir()
    gguf_base._convert_whole(link, whole, torch.float16)
    streamed = load_file(smollm2_hf / "model.safetensors")
    loaded = load_file(whole / "model.safetensors")
    assert streamed.keys() == loaded.keys()
    assert all(torch.equal(streamed[k], loaded[k]) for k in streamed)
    assert json.loads((smollm2_hf / "config.json").read_text()) == json.loads(
        (whole / "config.json").read_text()
    )
    # an architecture whose Transformers processor works across tensors is not streamed
    monkeypatch.setitem(g.TENSOR_PROCESSORS, "llama", g.Gemma2TensorProcessor)
    other = tmp_path / "other"
    other.mkdir()
    assert gguf_base._convert_streamed(link, other, torch.float16) is False
    assert list(other.iterdir()) == []
