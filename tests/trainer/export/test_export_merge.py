"""The GGUF-native merge on a tiny model: stored types, the delta, byte-for-byte copies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rltray.trainer.export import gguf_adapter, merge
from tinygguf import build_tiny_adapter, build_tiny_gguf

gguf = pytest.importorskip("gguf")


def _weights(path: Path) -> dict[str, tuple[object, np.ndarray, bytes]]:
    from gguf import quants

    out = {}
    for t in gguf.GGUFReader(path).tensors:
        values = quants.dequantize(t.data, t.tensor_type).reshape(
            [int(d) for d in reversed(t.shape)]
        )
        out[t.name] = (t.tensor_type, values.astype(np.float64), t.data.tobytes())
    return out


def _expected_delta(adapter: Path, base: Path) -> dict[str, np.ndarray]:
    arch = gguf_adapter.ArchInfo.from_gguf(gguf.GGUFReader(base))
    pairs, alpha, rank = gguf_adapter.read_pairs(adapter, arch)
    return {p.gguf_name + ".weight": alpha / rank * (p.b @ p.a) for p in pairs}


def _check(base: Path, merged: Path, adapter: Path, stored: str, rel: float) -> None:
    before, after = _weights(base), _weights(merged)
    delta = _expected_delta(adapter, base)
    assert list(before) == list(after)
    for name, (qtype, values, raw) in before.items():
        if name not in delta:
            assert after[name][0] == qtype and after[name][2] == raw  # byte for byte
            continue
        assert after[name][0].name == stored
        got = after[name][1] - values
        err = np.linalg.norm(got - delta[name]) / np.linalg.norm(delta[name])
        assert err < rel, (name, err)


@pytest.mark.parametrize(("out_type", "stored", "rel"), [
    ("q8_0", "Q8_0", 0.05), ("f16", "F16", 0.01), ("base", "Q8_0", 0.05),
])
def test_the_merged_tensors_carry_the_delta(
    tiny_gguf: Path, tiny_adapter: Path, tmp_path: Path, out_type: str, stored: str, rel: float
) -> None:
    report = merge.merge(tiny_gguf, tiny_adapter, tmp_path / "m.gguf", out_type=out_type)
    assert report.types == {stored: 14} and report.merged == 14
    _check(tiny_gguf, report.out, tiny_adapter, stored, rel)


def test_a_k_quant_base_is_requantized_by_llamacpp_or_falls_back_to_q8_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip(
        "llama_cpp", reason="K-quants are quantized with llama-cpp-python's libggml"
    )
    sizes = {"hidden": 256, "ffn": 512, "heads": 4, "kv_heads": 2}
    base = build_tiny_gguf(tmp_path / "k.gguf", block_type="Q4_K", **sizes)
    adapter = build_tiny_adapter(tmp_path / "a", **sizes)
    report = merge.merge(base, adapter, tmp_path / "m.gguf", out_type="base")
    assert report.types == {"Q4_K": 14}
    assert report.size == report.base_size
    # Q4_K keeps ~7% relative error of the whole weight; the delta is about as big
    # as the weight here, so its share of the error stays well under 0.3
    _check(base, report.out, adapter, "Q4_K", 0.3)
    monkeypatch.setattr(merge, "_QUANTIZER", [None])  # llama-cpp-python not installed
    report = merge.merge(base, adapter, tmp_path / "m2.gguf", out_type="base")
    assert report.types == {"Q8_0": 14}


def test_a_row_q8_0_cannot_block_is_stored_as_f16() -> None:
    from gguf import GGMLQuantizationType as Q

    assert merge.choose_type("q8_0", Q.Q4_1, 576) == Q.Q8_0
    assert merge.choose_type("q8_0", Q.Q4_1, 100) == Q.F16
    with pytest.raises(ValueError, match="merged type must be one of"):
        merge.choose_type("q4_k_m", Q.Q4_1, 576)


def test_an_adapter_for_other_weights_is_refused_before_writing(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    wrong = build_tiny_adapter(tmp_path / "wide", hidden=128)
    with pytest.raises(ValueError, match="does not fit this GGUF"):
        merge.merge(tiny_gguf, wrong, tmp_path / "m.gguf")
    assert not list(tmp_path.glob("m.gguf*"))
