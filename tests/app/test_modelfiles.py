"""Model headers read without loading weights, checked against the gguf library's reader
and the safetensors file SmolLM2's shape gives."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from rltray.app import modelfiles
from rltray.web import models

gguf = pytest.importorskip("gguf", reason="needs the gguf package (test extras) to write GGUFs")
np = pytest.importorskip("numpy")

from tests.support.tinygguf import build_tiny_gguf  # noqa: E402


def test_gguf_header_matches_the_gguf_library(tmp_path: Path) -> None:
    path = build_tiny_gguf(tmp_path / "tiny.gguf", hidden=64, blocks=3, vocab=200)
    head = modelfiles.gguf_header(path)
    reader = gguf.GGUFReader(path)
    assert head["params"] == sum(int(np.prod(t.shape)) for t in reader.tensors)
    assert (head["architecture"], head["layers"], head["hidden_size"], head["vocab_size"]) == (
        "llama", 3, 64, 200)  # fmt: skip
    assert head["name"] == "tiny" and modelfiles.is_gguf(path)


def test_a_file_that_is_not_a_gguf_or_ends_early_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    assert not modelfiles.is_gguf(text)
    with pytest.raises(modelfiles.ModelFileError, match="not a GGUF file"):
        modelfiles.gguf_header(text)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(build_tiny_gguf(tmp_path / "whole.gguf").read_bytes()[:200])
    with pytest.raises(modelfiles.ModelFileError, match="ends inside its header"):
        modelfiles.gguf_header(cut)


def _safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        size = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_a_tied_embedding_counts_once(tmp_path: Path) -> None:
    """Issue 22: SmolLM2-135M was shown as 176 million parameters (its tied embedding twice)."""
    smollm2 = {
        "model_type": "llama", "num_hidden_layers": 30, "hidden_size": 576, "vocab_size": 49152,
        "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536,
        "tie_word_embeddings": True,
    }  # fmt: skip
    assert models.estimate_params(smollm2) == 134_515_008  # what its safetensors file holds
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(smollm2))
    _safetensors(folder / "model.safetensors", {"a": [10, 20], "b": [5]})
    assert modelfiles.safetensors_params(folder) == 205
    assert models.describe_folder(folder)["params"] == 205  # the file's count wins


def test_the_memory_figure_follows_the_measured_peaks() -> None:
    smollm2 = models.memory_fit({"params": 134_515_008}, 24 * 2**30)
    # a real round on SmolLM2-135M peaked at 1.78 GiB: the estimate is near it, above
    assert 1.8 <= smollm2["need_gib"] <= 2.2 and smollm2["fits"] is True
    # one step of the Llama-3.2-3B shape measured 16.0-17.7 GiB: a 24 GB machine holds it
    llama3b = models.memory_fit({"params": 3_212_749_824}, int(23.5 * 2**30))
    assert 16.0 < llama3b["need_gib"] <= 18.8 and llama3b["fits"] is True
    assert "135 million parameters" in smollm2["message"]
    measured = models.memory_fit(
        {"params": 134_515_008}, 4 * 2**30, {"peak_bytes": int(3.9 * 2**30), "run": "r1"}
    )
    assert measured["measured_gib"] == 3.9 and measured["fits"] is False  # 3.9 > 0.8 x 4
    assert "the last round on it measured 3.9 GB" in measured["message"]
    big = models.memory_fit({"params": 7_600_000_000}, 16 * 2**30)
    assert big["fits"] is False and big["need_gib"] > 35


def _crafted_gguf(path: Path, value: bytes, n_tensors: int = 0) -> Path:
    """A GGUF v3 header with one key ``x`` whose type and value are ``value``'s bytes."""
    key = struct.pack("<Q", 1) + b"x"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, 1) + key + value)
    return path


ARRAY = struct.pack("<I", 9)  # the array value type


@pytest.mark.parametrize(
    ("value", "said"),
    [
        # an array of arrays of arrays ... 5000 deep: Python's recursion limit
        (ARRAY + struct.pack("<IQ", 9, 1) * 5000 + struct.pack("<IQ", 0, 0), "nests"),
        # 2**62 uint64s: a seek past 2**63
        (ARRAY + struct.pack("<IQ", 10, 2**62), "ends inside its header"),
        # 2**64-1 uint64s: the seek's int overflows
        (ARRAY + struct.pack("<IQ", 10, 2**64 - 1), "ends inside its header"),
        # a skipped string 2**26 bytes long in a file of a few bytes
        (ARRAY + struct.pack("<IQ", 8, 1) + struct.pack("<Q", 2**26), "ends inside its header"),
        # 2**62 strings of nothing
        (ARRAY + struct.pack("<IQ", 8, 2**62) + struct.pack("<Q", 0) * 4, "ends inside"),
    ],
    ids=["deep", "huge", "overflow", "long-string", "many-strings"],
)
def test_a_crafted_gguf_header_is_one_sentence_not_a_crash(
    tmp_path: Path, value: bytes, said: str
) -> None:
    """Regression (review2-sec gguf_bomb): nested arrays recursed without limit
    (RecursionError) and an array's size was seeked past 2**63 (ValueError), both
    escaping ``describe_gguf``, which takes only ModelFileError: the wizard's model scan
    answered 500."""
    path = _crafted_gguf(tmp_path / "crafted.gguf", value)
    with pytest.raises(modelfiles.ModelFileError, match=said):
        modelfiles.gguf_header(path)
    described = models.describe_gguf(path)
    assert said in described["error"] and "gguf" not in described


def test_a_crafted_safetensors_header_counts_nothing_and_raises_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    for header in (b"[" * 100_000 + b"]" * 100_000, b"[1, 2]",
                   json.dumps({"a": {"shape": "abc"}}).encode()):  # fmt: skip
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
        assert modelfiles.safetensors_params(folder) is None
    assert "no readable config.json (RecursionError)" in models.describe_folder(folder)["error"]
