"""Every architecture llama.cpp's converter permutes gets its q/k delta on the right rows.

Issue 20 item 2: the old list (llama, granite, granitemoe, deci, olmo) missed smollm3,
arcee, mistral3, granitehybrid, llada and more, whose deltas landed on the wrong rows
(cosine ~0.04 with the right delta) in both the GGUF adapter and the merge.

Each case builds a tiny GGUF of that architecture (one block, 8 heads, 2 kv heads,
head dim 8) and a LoRA on q/k/v, runs the real adapter writer and the real merge, and
compares the delta each wrote with the right one. The right one is built here from
the definition of the two rotary layouts, not with the module's reshape: within each
head block of ``hd`` rows, GGUF row ``2i + j`` holds Hugging Face row ``j * hd/2 + i``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rltray.trainer import qk_rows
from rltray.trainer.export import gguf_adapter, merge

gguf = pytest.importorskip("gguf")

HEADS, KV_HEADS, HEAD_DIM, RANK = 8, 2, 8, 4
HIDDEN = HEADS * HEAD_DIM


def _known(arch: str) -> bool:
    """The installed gguf library names the architecture and gives it separate q and k."""
    archs = {name: enum for enum, name in gguf.MODEL_ARCH_NAMES.items()}
    if arch not in archs:
        return False
    tensors = gguf.MODEL_TENSORS[archs[arch]]
    return gguf.MODEL_TENSOR.ATTN_Q in tensors and gguf.MODEL_TENSOR.ATTN_K in tensors


def _tiny_base(path: Path, arch: str) -> Path:
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(1)
    w.add_uint32(f"{arch}.attention.head_count", HEADS)
    w.add_uint32(f"{arch}.attention.head_count_kv", KV_HEADS)
    rng = np.random.default_rng(0)
    for name, rows in (("attn_q", HIDDEN), ("attn_k", KV_HEADS * HEAD_DIM),
                       ("attn_v", KV_HEADS * HEAD_DIM)):
        w.add_tensor(f"blk.0.{name}.weight", rng.normal(0, 0.05, (rows, HIDDEN)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _tiny_adapter(out: Path) -> tuple[Path, dict[str, np.ndarray]]:
    from rltray.trainer.adapters import peft_name, write_adapter

    rng = np.random.default_rng(1)
    tensors, deltas = {}, {}
    for leaf, rows in (("q_proj", HIDDEN), ("k_proj", KV_HEADS * HEAD_DIM),
                       ("v_proj", KV_HEADS * HEAD_DIM)):
        path = f"model.layers.0.self_attn.{leaf}"
        a = rng.normal(0, 0.1, (RANK, HIDDEN)).astype(np.float32)
        b = rng.normal(0, 0.1, (rows, RANK)).astype(np.float32)
        tensors[peft_name(path, "A")], tensors[peft_name(path, "B")] = a, b
        deltas[leaf] = 2.0 * (b.astype(np.float64) @ a)  # alpha / rank = 2
    return write_adapter(out, tensors, rank=RANK, alpha=2.0 * RANK, base_model="tiny"), deltas


def _gguf_order(delta: np.ndarray, groups: int) -> np.ndarray:
    hd = delta.shape[0] // groups
    source = [g * hd + j * (hd // 2) + i for g in range(groups) for i in range(hd // 2)
              for j in range(2)]
    return delta[source]


def _right_deltas(arch: str, deltas: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    k_groups = HEADS // KV_HEADS if arch == "xverse" else KV_HEADS
    permuted = arch in qk_rows.PERMUTED_ARCHS
    return {
        "attn_q": _gguf_order(deltas["q_proj"], HEADS) if permuted else deltas["q_proj"],
        "attn_k": _gguf_order(deltas["k_proj"], k_groups) if permuted else deltas["k_proj"],
        "attn_v": deltas["v_proj"],
    }


def _tensors(path: Path) -> dict[str, np.ndarray]:
    return {t.name: np.array(t.data, dtype=np.float64) for t in gguf.GGUFReader(path).tensors}


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel(), b.ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


ISSUE_ARCHS = ("smollm3", "arcee", "mistral3", "granitehybrid", "llada")


def test_the_list_holds_the_architectures_the_issue_found_missing() -> None:
    assert set(ISSUE_ARCHS) <= set(qk_rows.PERMUTED_ARCHS)
    assert not set(qk_rows.PERMUTED_ARCHS) & {"qwen2", "qwen3", "gemma", "phi3", "llama4"}


@pytest.mark.parametrize("arch", [*sorted(qk_rows.PERMUTED_ARCHS), "qwen2", "phi3"])
def test_the_delta_lands_on_the_right_rows(arch: str, tmp_path: Path) -> None:
    if not _known(arch):
        pytest.skip(f"the installed gguf library has no separate q/k tensors for {arch!r}")
    base = _tiny_base(tmp_path / "base.gguf", arch)
    adapter, deltas = _tiny_adapter(tmp_path / "v0001")
    right = _right_deltas(arch, deltas)

    info = gguf_adapter.ArchInfo.from_gguf(gguf.GGUFReader(base))
    lora = gguf_adapter.export(adapter, tmp_path / "adapter.gguf", arch_info=info)
    written = _tensors(lora)
    for name, want in right.items():
        got = 2.0 * written[f"blk.0.{name}.weight.lora_b"] @ written[f"blk.0.{name}.weight.lora_a"]
        assert _cos(got, want) > 0.999, ("adapter", arch, name)

    report = merge.merge(base, adapter, tmp_path / "merged.gguf", out_type="f16")
    before, after = _tensors(base), _tensors(report.out)
    for name, want in right.items():
        got = after[f"blk.0.{name}.weight"] - before[f"blk.0.{name}.weight"]
        assert _cos(got, want) > 0.999, ("merge", arch, name)


def test_an_adapter_on_a_fused_permuted_qkv_layer_is_refused(tmp_path: Path) -> None:
    info = gguf_adapter.ArchInfo("baichuan", 1, HEADS, HEADS)
    a, b = np.zeros((RANK, HIDDEN), np.float32), np.zeros((3 * HIDDEN, RANK), np.float32)
    with pytest.raises(ValueError, match="fused W_pack"):
        gguf_adapter.oriented_delta_factors("model.layers.0.self_attn.W_pack", a, b, info)


@pytest.mark.parametrize("arch", ["falcon", "bloom", "gptneox"])
def test_an_adapter_on_a_regrouped_fused_qkv_layer_is_refused(arch: str) -> None:
    """Regression (a review): llama.cpp's converter regroups these fused query_key_value
    rows (Falcon by kv group, Bloom and GPT-NeoX per head into Q, K, V); the delta was
    added in Hugging Face row order, onto the wrong rows, and the fidelity check, reading
    the same file, agreed."""
    info = gguf_adapter.ArchInfo(arch, 1, HEADS, KV_HEADS)
    a, b = np.zeros((RANK, HIDDEN), np.float32), np.zeros((3 * HIDDEN, RANK), np.float32)
    path = "transformer.h.0.self_attention.query_key_value"
    with pytest.raises(ValueError, match="fused query_key_value"):
        gguf_adapter.oriented_delta_factors(path, a, b, info)


def test_an_arctic_name_lookup_leaves_every_other_architecture_s_names_alone() -> None:
    """gguf's own map for Arctic rewrites the class-wide block table; ours must not, or
    a Llama base materialized later in the same process loses its ffn norms."""
    if not _known("arctic"):
        pytest.skip("the installed gguf library does not know 'arctic'")
    info = gguf_adapter.ArchInfo("arctic", 1, HEADS, KV_HEADS)
    assert gguf_adapter.gguf_base_name("model.layers.0.self_attn.q_proj", info) == "blk.0.attn_q"
    llama = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 1)
    norm = "model.layers.0.post_attention_layernorm"
    assert llama.get_name(norm + ".weight", try_suffixes=(".weight",)) == "blk.0.ffn_norm.weight"


def test_unpermuting_puts_each_gguf_row_back_where_hugging_face_keeps_it() -> None:
    """Issue 23 item 2: a GGUF base read without torch (``gguf_numpy``) must undo the
    permutation itself. Built from the definition in this file's docstring: GGUF row
    ``2i + j`` of each head block holds Hugging Face row ``j * hd/2 + i``."""
    groups, hd, cols = 3, 8, 5
    gguf_rows = np.arange(groups * hd * cols, dtype=np.float32).reshape(groups * hd, cols)
    want = np.empty_like(gguf_rows)
    for g in range(groups):
        for i in range(hd // 2):
            for j in range(2):
                want[g * hd + j * hd // 2 + i] = gguf_rows[g * hd + 2 * i + j]
    np.testing.assert_array_equal(qk_rows.unpermute_rows(gguf_rows, groups), want)
    np.testing.assert_array_equal(qk_rows.permute_rows(want, groups), gguf_rows)
    bias = gguf_rows[:, 0]
    np.testing.assert_array_equal(qk_rows.unpermute_rows(bias, groups), want[:, 0])
