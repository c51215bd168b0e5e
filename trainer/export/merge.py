"""GGUF-native merge: base GGUF + PEFT adapter -> one complete GGUF (what Ollama >= 0.34.1 takes).

Why merge in GGUF and not in Hugging Face weights: the user's Ollama serves a
quantized GGUF; merging there touches only the adapted tensors and keeps every
metadata key (tokenizer, chat template, rope settings) and every other tensor
byte for byte, so the new model is the user's model plus our delta and nothing
else. No second download, no re-conversion.

Per adapted tensor: dequantize (``gguf.quants``), add ``alpha / rank * B @ A`` in
llama.cpp's row order (q/k permuted, see :mod:`..qk_rows`), store as:

* ``q8_0`` (default): near-lossless, about 1.06 bytes per weight;
* ``f16``: exact to half precision, 2 bytes per weight;
* ``base``: the base tensor's own type where the ``gguf`` library can quantize it
  (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16, BF16, F32); a K-quant (Q4_K, Q6_K, …) is
  quantized by llama.cpp's own ``ggml_quantize_chunk`` when ``llama-cpp-python`` is
  installed (its bundled ``libggml-base``); otherwise, and for i-quants that need an
  importance matrix, Q8_0.

**Never onto the base tensor's own grid** (issue 20): a trained delta is far below
half a quantization step (median |δ| ≈ 1e-4 against a Q8_0 half-step ≈ 1.7e-3 on
SmolLM2), and a base tensor that already lies on the output type's grid rounds
``w + δ`` straight back to ``w`` (a Q8_0 base merged to Q8_0 delivered 3-8% of the
adapter's shift). So when the chosen quantized type equals the base tensor's type
the tensor is stored as F16. And after quantizing, each tensor's **delivered
share** ``<Q(w+δ) - w, δ> / ||δ||²`` (1: the whole delta arrived; 0: rounded away)
is measured; below :data:`DELIVERED_FLOOR` the tensor is stored as F16 (then F32)
instead. The report carries the smallest share and the ``||δ||²``-weighted mean,
which the publication records with the version.

A row length Q8_0 cannot block (not a multiple of 32) falls back to F16.
Tensors are streamed one at a time: peak memory is one dequantized tensor, not the model.
The stored type must be in the header before any data, so each adapted tensor is
merged and measured first and written after the header: the first 512 MB of merged
tensors are kept in memory, the rest merged again when written (peak memory stays
bounded on a 30B model).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

OUT_TYPES = ("q8_0", "f16", "base")
DELIVERED_FLOOR = 0.8  # a tensor delivering less of its delta is stored finer
KEEP_BYTES = 512 * 2**20  # merged tensors kept between the two passes (the rest: merged again)


@dataclass
class MergeReport:
    """What the merge wrote, for the user and the adapters table."""

    out: Path
    size: int
    base_size: int
    merged: int  # tensors changed
    types: dict[str, int] = field(default_factory=dict)  # merged tensors by stored type
    base_types: dict[str, int] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)  # delivered share per tensor
    weights: dict[str, float] = field(default_factory=dict)  # ||delta||^2 per tensor
    base_norms: dict[str, float] = field(default_factory=dict)  # ||w||^2 per merged tensor
    stored: dict[str, str] = field(default_factory=dict)  # merged tensor -> stored type name

    def relative_size(self) -> float:
        """``||delta|| / ||w||`` over the merged tensors (0 when nothing moved)."""
        total = sum(self.base_norms.values())
        return (sum(self.weights.values()) / total) ** 0.5 if total > 0 else 0.0

    def delivered(self) -> dict[str, float] | None:
        """Smallest and ||delta||^2-weighted mean delivered share (None: no delta at all)."""
        total = sum(self.weights.values())
        if not self.shares or total <= 0:
            return None
        mean = sum(self.shares[n] * self.weights[n] for n in self.shares) / total
        return {"min": round(min(self.shares.values()), 4), "mean": round(mean, 4)}

    def describe(self) -> str:
        merged = "+".join(sorted(self.types)) or "none"
        base = "+".join(sorted(self.base_types)) or "none"
        return f"{merged} merged layers, rest as the base ({base})"


def _gguf_quantizable() -> set[Any]:
    from gguf import GGMLQuantizationType as Q

    return {Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0}


class GGMLQuantizer:
    """llama.cpp's tensor quantizer (``ggml_quantize_chunk``) from llama-cpp-python's libggml.

    Why through ctypes: the ``gguf`` library cannot quantize K-quants, and
    llama.cpp's whole-file quantizer would re-quantize every tensor (no longer
    byte for byte); this call quantizes just the merged tensor with llama.cpp's code.
    """

    def __init__(self, lib: Any) -> None:
        import ctypes

        self._chunk = lib.ggml_quantize_chunk
        self._chunk.restype = ctypes.c_size_t
        self._chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        self._needs_imatrix = lib.ggml_quantize_requires_imatrix
        self._needs_imatrix.restype = ctypes.c_bool
        self._needs_imatrix.argtypes = [ctypes.c_int]
        self._init = lib.ggml_quantize_init
        self._init.argtypes = [ctypes.c_int]

    @classmethod
    def load(cls) -> GGMLQuantizer | None:
        """The quantizer when llama-cpp-python is installed, else ``None``."""
        import ctypes

        try:
            import llama_cpp
        except ImportError:
            return None
        folder = Path(llama_cpp.__file__).parent / "lib"
        for candidate in sorted(folder.glob("*ggml-base*")):
            try:
                return cls(ctypes.CDLL(str(candidate)))
            except (OSError, AttributeError):
                continue
        return None

    def can(self, qtype: Any) -> bool:
        return not self._needs_imatrix(int(qtype))

    def quantize(self, values: np.ndarray, qtype: Any) -> np.ndarray:
        from gguf import quants

        values = np.ascontiguousarray(values, dtype=np.float32)
        rows, row = values.shape
        out = np.empty(quants.quant_shape_to_byte_shape((rows, row), qtype), dtype=np.uint8)
        self._init(int(qtype))
        written = self._chunk(int(qtype), values.ctypes.data, out.ctypes.data, 0, rows, row, None)
        if written != out.nbytes:
            raise ValueError(f"llama.cpp wrote {written} bytes for {qtype.name}, not {out.nbytes}")
        return out


_QUANTIZER: list[GGMLQuantizer | None] = []


def ggml_quantizer() -> GGMLQuantizer | None:
    if not _QUANTIZER:
        _QUANTIZER.append(GGMLQuantizer.load())
    return _QUANTIZER[0]


def choose_type(out_type: str, base_type: Any, row: int) -> Any:
    """The stored type of a merged tensor (see module docstring): never the base's own
    quantized grid, F16 where the row does not fill the chosen type's blocks."""
    from gguf import GGML_QUANT_SIZES
    from gguf import GGMLQuantizationType as Q

    if out_type not in OUT_TYPES:
        raise ValueError(f"merged type must be one of {', '.join(OUT_TYPES)}, not {out_type!r}")
    quantizer = ggml_quantizer() if out_type == "base" else None
    if out_type == "f16":
        wanted = Q.F16
    elif out_type == "base" and (
        base_type in _gguf_quantizable() or (quantizer is not None and quantizer.can(base_type))
    ):
        wanted = base_type
    else:
        wanted = Q.Q8_0
    if wanted == base_type and wanted not in (Q.F32, Q.F16, Q.BF16):
        return Q.F16  # the base already lies on this grid: w + delta would round back to w
    block = GGML_QUANT_SIZES[wanted][0]
    return wanted if row % block == 0 else Q.F16


def _finer(qtype: Any) -> Any | None:
    """The next type to try when ``qtype`` rounds the delta away (None: nothing finer)."""
    from gguf import GGMLQuantizationType as Q

    if qtype == Q.F32:
        return None
    return Q.F32 if qtype in (Q.F16, Q.BF16) else Q.F16


def _restore(stored: np.ndarray, qtype: Any, shape: tuple[int, int]) -> np.ndarray:
    """What llama.cpp will read back from ``stored`` (float32, ``shape``)."""
    from gguf import quants

    if stored.dtype in (np.float16, np.float32):
        return stored.astype(np.float32).reshape(shape)
    return quants.dequantize(stored, qtype).astype(np.float32, copy=False).reshape(shape)


def delivered_share(base: np.ndarray, merged: np.ndarray, delta: np.ndarray) -> float | None:
    """``<merged - base, delta> / ||delta||^2``: how much of ``delta`` the stored tensor
    carries (1: all of it, 0: rounded away); ``None`` for a zero delta."""
    d = delta.astype(np.float64).ravel()
    norm = float(d @ d)
    if norm == 0.0:
        return None
    return float((merged.astype(np.float64).ravel() - base.astype(np.float64).ravel()) @ d / norm)


def _store(values: np.ndarray, qtype: Any) -> np.ndarray:
    from gguf import GGMLQuantizationType as Q
    from gguf import quants

    if qtype == Q.F32:
        return np.ascontiguousarray(values, dtype=np.float32)
    if qtype == Q.F16:
        return np.ascontiguousarray(values, dtype=np.float16)
    if qtype in _gguf_quantizable():
        return quants.quantize(np.ascontiguousarray(values, dtype=np.float32), qtype)
    quantizer = ggml_quantizer()
    assert quantizer is not None  # choose_type picks such a type only when it is there
    return quantizer.quantize(values, qtype)


def copy_fields(reader: Any, writer: Any) -> None:
    """Every metadata key of ``reader`` into ``writer``, same order, same types."""
    from gguf import GGUFValueType

    for name, fld in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # the header counts; the architecture the writer adds first
        vtype = fld.types[0]
        sub = None
        if vtype == GGUFValueType.ARRAY:
            if len(fld.types) > 2:
                raise ValueError(f"nested arrays in {name} are not supported")
            sub = fld.types[-1]
        writer.add_key_value(name, fld.contents(), vtype, sub_type=sub)


def _base_and_delta(t: Any, pair: Any, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The base tensor as llama.cpp computes with it, and our delta in its row order."""
    from gguf import quants

    weights = quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
    weights = weights.reshape(int(t.shape[1]), int(t.shape[0]))
    return weights, np.float32(scale) * (pair.b @ pair.a)


@dataclass
class _Decision:
    """One adapted tensor: stored type, delivered share, ||delta||^2, and its bytes if kept."""

    qtype: Any
    share: float | None
    weight: float
    base_norm: float
    data: np.ndarray | None


def _decide(out_type: str, t: Any, pair: Any, scale: float, forced: str | None) -> _Decision:
    """The type :func:`choose_type` picks for one adapted tensor (or ``forced``), or a
    finer one while the delivered share is below the floor; with the stored bytes."""
    from gguf import GGMLQuantizationType as Q

    weights, delta = _base_and_delta(t, pair, scale)
    qtype = Q[forced] if forced else choose_type(out_type, t.tensor_type, int(t.shape[0]))
    merged = weights + delta
    norms = (float(np.square(delta, dtype=np.float64).sum()),
             float(np.square(weights, dtype=np.float64).sum()))
    while True:
        data = _store(merged, qtype)
        share = delivered_share(weights, _restore(data, qtype, weights.shape), delta)
        finer = None if forced else _finer(qtype)
        if share is None or share >= DELIVERED_FLOOR or finer is None:
            return _Decision(qtype, share, *norms, data)
        qtype = finer


def _tensor_info(t: Any, qtype: Any) -> tuple[tuple[int, ...], Any, int]:
    """(shape, numpy dtype, bytes) of a merged tensor stored as ``qtype``."""
    import gguf
    from gguf import quants

    rows, row = int(t.shape[1]), int(t.shape[0])
    if qtype in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32):
        dtype = np.float16 if qtype == gguf.GGMLQuantizationType.F16 else np.float32
        return (rows, row), np.dtype(dtype), rows * row * np.dtype(dtype).itemsize
    shape = quants.quant_shape_to_byte_shape((rows, row), qtype)
    return shape, np.dtype(np.uint8), int(np.prod(shape))


def _fit_problems(reader: Any, by_name: dict[str, Any]) -> list[str]:
    tensors = {t.name: t for t in reader.tensors}
    problems = [f"the base has no tensor {n}" for n in by_name if n not in tensors]
    for name, pair in by_name.items():
        t = tensors.get(name)
        want = (int(pair.b.shape[0]), int(pair.a.shape[1]))
        if t is not None and (int(t.shape[1]), int(t.shape[0])) != want:
            problems.append(f"{name} is {int(t.shape[1])}x{int(t.shape[0])} in the base")
    return problems


def merge(
    base_gguf: Path | str,
    adapter_dir: Path | str,
    out: Path | str,
    *,
    out_type: str = "q8_0",
    delta_scale: float = 1.0,
    types: dict[str, str] | None = None,
) -> MergeReport:
    """Write ``out``: ``base_gguf`` with the adapter's delta added to each adapted tensor.

    ``delta_scale`` and ``types`` (tensor name -> stored type name, as in
    :attr:`MergeReport.stored`) make the amplified probe :mod:`.fidelity` checks with."""
    import gguf

    from .gguf_adapter import ArchInfo, read_pairs

    base_gguf, out = Path(base_gguf), Path(out)
    reader = gguf.GGUFReader(base_gguf)
    arch = ArchInfo.from_gguf(reader)
    pairs, alpha, rank = read_pairs(Path(adapter_dir), arch)
    scale = alpha / rank * delta_scale
    by_name = {p.gguf_name + ".weight": p for p in pairs}
    problems = _fit_problems(reader, by_name)
    if problems:
        raise ValueError("the adapter does not fit this GGUF: " + "; ".join(problems[:5]))

    tmp = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(tmp, arch.arch)
    writer.data_alignment = reader.alignment
    copy_fields(reader, writer)
    report = MergeReport(out=out, size=0, base_size=base_gguf.stat().st_size,
                         merged=len(by_name))
    plan: list[tuple[Any, _Decision | None]] = []  # (reader tensor, None: a raw copy)
    stored: Counter[str] = Counter()
    kept = 0  # bytes of merged tensors held for the second pass
    for t in reader.tensors:
        if t.name not in by_name:
            writer.add_tensor_info(
                t.name, t.data.shape, t.data.dtype, int(t.n_bytes), raw_dtype=t.tensor_type
            )
            plan.append((t, None))
            continue
        decision = _decide(out_type, t, by_name[t.name], scale, (types or {}).get(t.name))
        assert decision.data is not None
        kept += decision.data.nbytes
        if kept > KEEP_BYTES:
            decision.data = None  # recomputed when written: memory stays one tensor
        stored[decision.qtype.name] += 1
        report.stored[t.name], report.base_norms[t.name] = decision.qtype.name, decision.base_norm
        if decision.share is not None:
            report.shares[t.name], report.weights[t.name] = decision.share, decision.weight
        shape, dtype, nbytes = _tensor_info(t, decision.qtype)
        writer.add_tensor_info(t.name, shape, dtype, nbytes, raw_dtype=decision.qtype)
        plan.append((t, decision))
    writer.write_header_to_file(tmp)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t, decision in plan:
        if decision is None:
            writer.write_tensor_data(t.data)
        elif decision.data is not None:
            writer.write_tensor_data(decision.data)
        else:
            weights, delta = _base_and_delta(t, by_name[t.name], scale)
            writer.write_tensor_data(_store(weights + delta, decision.qtype))
    writer.close()
    tmp.replace(out)
    report.size = out.stat().st_size
    report.types = dict(stored)
    report.base_types = dict(Counter(t.tensor_type.name for t in reader.tensors))
    return report
