"""The GGUF-native merge on a tiny model: stored types, the delta, byte-for-byte copies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rltray.trainer.export import gguf_adapter, merge

from tests.support.tinygguf import build_tiny_adapter, build_tiny_gguf

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
    ("q8_0", "F16", 0.01), ("f16", "F16", 0.01), ("base", "F16", 0.01),
])
def test_the_merged_tensors_carry_the_delta(
    tiny_gguf: Path, tiny_adapter: Path, tmp_path: Path, out_type: str, stored: str, rel: float
) -> None:
    # the tiny base is Q8_0: every output type that would land on its grid stores F16
    report = merge.merge(tiny_gguf, tiny_adapter, tmp_path / "m.gguf", out_type=out_type)
    assert report.types == {stored: 14} and report.merged == 14
    _check(tiny_gguf, report.out, tiny_adapter, stored, rel)


@pytest.mark.parametrize(("out_type", "stored"), [("q8_0", "Q8_0"), ("base", "F16")])
def test_a_base_off_the_output_grid_is_quantized_to_it(
    tiny_adapter: Path, tmp_path: Path, out_type: str, stored: str
) -> None:
    base = build_tiny_gguf(tmp_path / "q41.gguf", block_type="Q4_1")
    report = merge.merge(base, tiny_adapter, tmp_path / "m.gguf", out_type=out_type)
    assert report.types == {stored: 14}
    _check(base, report.out, tiny_adapter, stored, 0.05)


def _measured_shares(base: Path, merged: Path, adapter: Path) -> list[float]:
    """The delivered share of every merged tensor, read back from the files."""
    before, after = _weights(base), _weights(merged)
    shares = []
    for name, delta in _expected_delta(adapter, base).items():
        got = after[name][1] - before[name][1]
        shares.append(float((got * delta).sum() / (delta * delta).sum()))
    return shares


@pytest.mark.parametrize(("block_type", "out_type"), [
    ("Q8_0", "q8_0"), ("Q8_0", "base"), ("Q8_0", "f16"), ("Q4_1", "q8_0"), ("Q4_1", "base"),
    ("F16", "f16"), ("F16", "base"),
])
def test_a_trained_size_delta_is_delivered_not_rounded_away(
    tmp_path: Path, block_type: str, out_type: str
) -> None:
    """Issue 20 item 1: a trained delta (median |delta| ~1e-4, under half a Q8_0 step) on
    a Q8_0 base merged to Q8_0 came out as the base (3-8% delivered, here ~3%)."""
    base = build_tiny_gguf(tmp_path / "b.gguf", block_type=block_type)
    adapter = build_tiny_adapter(tmp_path / "a", b_std=3e-4)
    delta = np.concatenate([d.ravel() for d in _expected_delta(adapter, base).values()])
    assert 5e-5 < np.median(np.abs(delta)) < 2e-4  # trained size
    report = merge.merge(base, adapter, tmp_path / "m.gguf", out_type=out_type)
    shares = _measured_shares(base, report.out, adapter)
    assert min(shares) >= merge.DELIVERED_FLOOR, shares
    delivered = report.delivered()
    assert delivered is not None and delivered["min"] == pytest.approx(min(shares), abs=1e-3)
    assert delivered["mean"] >= 0.95


def test_a_tensor_that_still_rounds_its_delta_away_is_stored_finer(tmp_path: Path) -> None:
    """A base stored as F16 whose values sit on the Q8_0 grid (a Q8_0 model converted up):
    Q8_0 is not its type, yet rounds the delta back; the measured share sends it to F16."""
    from gguf import quants

    base = build_tiny_gguf(tmp_path / "b.gguf", block_type="F16")
    reader = gguf.GGUFReader(base)
    on_grid = tmp_path / "on-grid.gguf"
    writer = gguf.GGUFWriter(on_grid, "llama")
    merge.copy_fields(reader, writer)
    for t in reader.tensors:
        values = np.array(t.data)
        if t.tensor_type == gguf.GGMLQuantizationType.F16:
            q = quants.quantize(values.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
            values = quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).astype(np.float16)
        writer.add_tensor(t.name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    adapter = build_tiny_adapter(tmp_path / "a", b_std=3e-4)
    report = merge.merge(on_grid, adapter, tmp_path / "m.gguf", out_type="q8_0")
    assert report.types == {"F16": 14}
    assert min(_measured_shares(on_grid, report.out, adapter)) >= merge.DELIVERED_FLOOR


def test_a_k_quant_base_is_never_requantized_onto_its_own_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip(
        "llama_cpp", reason="K-quants are quantized with llama-cpp-python's libggml"
    )
    sizes = {"hidden": 256, "ffn": 512, "heads": 4, "kv_heads": 2}
    base = build_tiny_gguf(tmp_path / "k.gguf", block_type="Q4_K", **sizes)
    adapter = build_tiny_adapter(tmp_path / "a", **sizes)
    # never onto the base's own Q4_K grid (issue 20 item 1): F16
    report = merge.merge(base, adapter, tmp_path / "m.gguf", out_type="base")
    assert report.types == {"F16": 14}
    _check(base, report.out, adapter, "F16", 0.01)
    report = merge.merge(base, adapter, tmp_path / "m.gguf", out_type="q8_0")
    assert report.types == {"Q8_0": 14}
    _check(base, report.out, adapter, "Q8_0", 0.05)
    monkeypatch.setattr(merge, "_QUANTIZER", [None])  # llama-cpp-python not installed
    assert merge.choose_type("base", gguf.GGMLQuantizationType.Q4_K, 256).name == "Q8_0"


def test_a_row_q8_0_cannot_block_is_stored_as_f16() -> None:
    from gguf import GGMLQuantizationType as Q

    assert merge.choose_type("q8_0", Q.Q4_1, 576) == Q.Q8_0
    assert merge.choose_type("q8_0", Q.Q4_1, 100) == Q.F16
    assert merge.choose_type("q8_0", Q.Q8_0, 576) == Q.F16  # the base's own grid
    assert merge.choose_type("base", Q.Q4_1, 576) == Q.F16
    with pytest.raises(ValueError, match="merged type must be one of"):
        merge.choose_type("q4_k_m", Q.Q4_1, 576)


def test_an_adapter_for_other_weights_is_refused_before_writing(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    wrong = build_tiny_adapter(tmp_path / "wide", hidden=128)
    with pytest.raises(ValueError, match="does not fit this GGUF"):
        merge.merge(tiny_gguf, wrong, tmp_path / "m.gguf")
    assert not list(tmp_path.glob("m.gguf*"))


def test_tensors_merged_again_when_not_kept_are_the_same_bytes(
    tiny_gguf: Path, tiny_adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = merge.merge(tiny_gguf, tiny_adapter, tmp_path / "kept.gguf")
    monkeypatch.setattr(merge, "KEEP_BYTES", 0)  # a model too big to hold: merge twice
    again = merge.merge(tiny_gguf, tiny_adapter, tmp_path / "again.gguf")
    assert kept.out.read_bytes() == again.out.read_bytes()
