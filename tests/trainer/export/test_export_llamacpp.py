"""Our GGUF adapter and merged GGUF, loaded by real llama.cpp, move SmolLM2 like PEFT does.

The check: on one chat prompt, the shift of llama.cpp's logits (with our adapter,
or from our merged file) away from the base GGUF's logits must point the same way
as PEFT's shift on the dequantized model: cosine over every position and token.

Measured here (SmolLM2-135M Q4_1, rank 8, alpha 16, B std 0.15, every 3rd layer):
adapter GGUF 0.997, merged F16 0.998, merged Q8_0 0.996 (merged in the base's Q4_1
was 0.959; "base" now stores F16, see trainer/export/merge.py); the base logits of
llama.cpp and Transformers agree at 0.9997. Thresholds below leave room for other
CPUs: 0.98.

Why the adapter is that large: llama.cpp quantizes activations before each
quantized matmul, so any change, however small, flips some roundings and moves
the logits by about 0.27 RMS (norm ~250 over this prompt) regardless of its size
(B scaled from 1e-5 to 1e-2: llama.cpp's shift stayed at norm 210-270 while PEFT's
went from 0.05 to 52). A direction test needs a shift well above that floor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.exportkit import cosine, llama_logits, smollm2_random_adapter

pytestmark = [
    pytest.mark.slow,
    # PEFT warns that layers our random adapter leaves out start at zero: intended
    pytest.mark.filterwarnings("ignore:Found missing adapter keys"),
]

llama_cpp = pytest.importorskip(
    "llama_cpp",
    reason="needs llama-cpp-python (built from source by `make test`; "
    "pip install llama-cpp-python==0.3.36)",
)

ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def base_logits(smollm2_gguf: Path) -> tuple[list[int], np.ndarray]:
    return llama_logits(smollm2_gguf)


@pytest.fixture(scope="module")
def hf_model(smollm2_hf: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smollm2_hf, dtype=torch.float32).eval()


def _peft_shift(hf_model, adapter: Path, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
    import torch
    from peft import PeftModel

    model = PeftModel.from_pretrained(hf_model, str(adapter))
    x = torch.tensor([tokens])
    with torch.no_grad():
        with model.disable_adapter():
            base = model(x).logits[0].double().numpy()
        adapted = model(x).logits[0].double().numpy()
    model.unload()
    return base, adapted - base


@pytest.fixture(scope="module")
def adapter_case(smollm2_hf: Path, hf_model, base_logits, tmp_path_factory):
    folder = smollm2_random_adapter(
        smollm2_hf, tmp_path_factory.mktemp("smol-adapter") / "v0001", leaves=ALL, b_std=0.15
    )
    tokens, _ = base_logits
    peft_base, peft_shift = _peft_shift(hf_model, folder, tokens)
    return folder, peft_base, peft_shift


def test_llamacpp_and_transformers_agree_on_the_base(base_logits, adapter_case) -> None:
    _, llama_base = base_logits
    _, peft_base, _ = adapter_case
    assert cosine(llama_base, peft_base) > 0.999


def test_adapter_gguf_moves_llamacpp_like_peft(
    smollm2_gguf: Path, base_logits, adapter_case, tmp_path: Path
) -> None:
    import gguf
    from rltray.trainer.export import gguf_adapter

    folder, _, peft_shift = adapter_case
    arch = gguf_adapter.ArchInfo.from_gguf(gguf.GGUFReader(smollm2_gguf))
    out = gguf_adapter.export(folder, tmp_path / "adapter.gguf", arch_info=arch)
    _, llama_base = base_logits
    _, adapted = llama_logits(smollm2_gguf, out)
    shift = adapted - llama_base
    assert np.linalg.norm(shift) > 0.5 * np.linalg.norm(peft_shift)  # it does move
    assert cosine(shift, peft_shift) >= 0.98


@pytest.mark.parametrize(("out_type", "floor"), [("f16", 0.98), ("q8_0", 0.98), ("base", 0.98)])
def test_merged_gguf_moves_llamacpp_like_peft(
    smollm2_gguf: Path, base_logits, adapter_case, tmp_path: Path, out_type: str, floor: float
) -> None:
    from rltray.trainer.export import merge

    folder, _, peft_shift = adapter_case
    report = merge.merge(smollm2_gguf, folder, tmp_path / "merged.gguf", out_type=out_type)
    _, llama_base = base_logits
    _, merged = llama_logits(report.out)
    shift = merged - llama_base
    assert np.linalg.norm(shift) > 0.5 * np.linalg.norm(peft_shift)
    assert cosine(shift, peft_shift) >= floor
    # "base" on this Q4_1 base stores F16: never back onto the base's own grid (issue 20)
    expected = {"f16": "F16", "q8_0": "Q8_0", "base": "F16"}[out_type]
    assert report.types == {expected: 70}  # 10 layers x 7 linear layers


def test_merge_keeps_every_key_and_untouched_tensor_byte_for_byte(
    smollm2_gguf: Path, adapter_case, tmp_path: Path
) -> None:
    import gguf
    from rltray.trainer.export import merge

    folder, _, _ = adapter_case
    report = merge.merge(smollm2_gguf, folder, tmp_path / "merged.gguf")
    base, merged = gguf.GGUFReader(smollm2_gguf), gguf.GGUFReader(report.out)
    assert list(base.fields) == list(merged.fields)
    for name, fld in base.fields.items():
        if name != "GGUF.tensor_count":
            assert merged.fields[name].contents() == fld.contents(), name
            assert merged.fields[name].types == fld.types, name
    touched = {f"blk.{b}.{t}.weight" for b in range(0, 30, 3) for t in (
        "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")}
    assert [t.name for t in merged.tensors] == [t.name for t in base.tensors]
    for old, new in zip(base.tensors, merged.tensors, strict=True):
        if old.name in touched:
            assert new.tensor_type == gguf.GGMLQuantizationType.Q8_0
            assert list(new.shape) == list(old.shape)
        else:
            assert new.tensor_type == old.tensor_type
            assert new.data.tobytes() == old.data.tobytes(), old.name
    assert report.base_size == smollm2_gguf.stat().st_size


def test_the_qk_row_permutation_is_what_makes_q_and_k_right(
    smollm2_gguf: Path, smollm2_hf: Path, hf_model, base_logits, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gguf
    from rltray.trainer import qk_rows
    from rltray.trainer.export import gguf_adapter

    folder = smollm2_random_adapter(
        smollm2_hf, tmp_path / "qk", leaves=("q_proj", "k_proj"), b_std=0.6, every=1
    )
    tokens, llama_base = base_logits
    _, peft_shift = _peft_shift(hf_model, folder, tokens)
    arch = gguf_adapter.ArchInfo.from_gguf(gguf.GGUFReader(smollm2_gguf))
    right = gguf_adapter.export(folder, tmp_path / "right.gguf", arch_info=arch)
    monkeypatch.setattr(qk_rows, "PERMUTED_ARCHS", {})
    wrong = gguf_adapter.export(folder, tmp_path / "wrong.gguf", arch_info=arch)
    cos_right = cosine(llama_logits(smollm2_gguf, right)[1] - llama_base, peft_shift)
    cos_wrong = cosine(llama_logits(smollm2_gguf, wrong)[1] - llama_base, peft_shift)
    assert cos_right >= 0.95
    assert cos_wrong < cos_right - 0.2
