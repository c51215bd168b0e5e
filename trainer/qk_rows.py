"""The q/k row permutation of llama.cpp's converter: which architectures, and how.

Why it matters: Hugging Face checkpoints of llama-family models order each
attention head's q/k rows for ``rotate_half`` rotary (pairs ``i, i + d/2``);
llama.cpp's NORM rotary wants interleaved pairs ``2i, 2i + 1``, so its converter
permutes the rows of ``q_proj`` and ``k_proj`` when it writes the GGUF. A LoRA
delta trained on the Hugging Face layout must get the same permutation before it
is written as a GGUF adapter (``lora_b`` carries the output rows) or merged into
the GGUF weights; without it the delta lands on the wrong rows (cosine ~0.04
with the right delta). This module is the one home of that knowledge; both
:mod:`.export.gguf_adapter` and :mod:`.export.merge` (through
``gguf_adapter.read_pairs``) use it, and so does :mod:`.gguf_numpy`, which reads a GGUF
base without torch and must undo the permutation itself (hence this module sits
beside both rather than inside ``export``, which imports ``gguf_base``).

Source: llama.cpp's ``convert_hf_to_gguf.py`` (github.com/ggml-org/llama.cpp; since
2026 its model classes live in ``conversion/*.py``), read at the copy vendored in
llama-cpp-python 0.3.36 (``vendor/llama.cpp/conversion``). An architecture is
listed when a text-model class writing it permutes ``q_proj``/``k_proj`` rows:

* through ``LlamaModel.modify_tensors`` with ``undo_permute = True`` (LlamaModel and
  subclasses that do not turn it off): ``llama`` (Llama, Mistral, Mixtral,
  InternLM3, Janus-Pro, Sarashina2-VL), ``llama-embed``, ``arcee``, ``smollm3``,
  ``nanbeige``, ``cogvlm``, ``mistral3`` (Mistral3/Ministral3 from Hugging Face:
  the nested ``Ministral3Model``; Mistral's own consolidated format is already in
  GGUF order, so its ``MistralModel`` sets ``undo_permute = False`` - the GGUF
  layout is the same), ``granite``, ``granitemoe``, ``granite_swa``,
  ``granitehybrid`` (attention layers go through ``GraniteMoeModel``),
  ``nemotron_h`` and ``nemotron_h_moe`` (subclasses of GraniteHybridModel);
* with their own copy of ``LlamaModel.permute`` in ``modify_tensors``: ``deci``,
  ``deepseek`` (v1), ``arctic``, ``chameleon``, ``minicpm``, ``olmo``, ``llada``,
  ``muse-glimmer`` (``_unpermute_for_rope``, the same row map) and ``xverse``
  (``_reverse_hf_permute``, which counts k's groups as ``n_head // n_head_kv``).

Not listed, because their converter leaves q/k rows alone: ``llama4`` and
``apertus`` (``undo_permute = False``), ``afmoe`` (skips LlamaModel's
``modify_tensors``) and every architecture outside the LlamaModel family (qwen2,
qwen3, gemma, phi3, ...). Architectures that reorder rows inside a *fused* q/k/v
weight (``baichuan`` W_pack, ``internlm2`` wqkv, ``bailingmoe`` query_key_value,
``graniteswitch`` qkv_proj; and, with no rotary permutation but a regrouping of q, k
and v, ``falcon``, ``bloom`` and ``gptneox`` query_key_value: a review found their
deltas on the wrong rows, cosine 0.36 on a tiny Falcon with two kv heads) are in
:data:`FUSED_QKV`: an adapter on that fused layer is refused rather than written
with rows we do not place.
"""

from __future__ import annotations

import numpy as np

#: GGUF architecture -> the converter class(es) that permute its q/k rows.
PERMUTED_ARCHS: dict[str, str] = {
    "llama": "LlamaModel (also InternLM3Model, JanusProModel, Sarashina2VLTextModel)",
    "llama-embed": "LlamaEmbedNemotronModel(LlamaModel)",
    "arcee": "ArceeModel(LlamaModel)",
    "smollm3": "SmolLM3Model(LlamaModel)",
    "nanbeige": "NanbeigeModel(LlamaModel)",
    "cogvlm": "CogVLMModel(LlamaModel)",
    "mistral3": "Mistral3Model.Ministral3Model(LlamaModel)",
    "granite": "GraniteModel(LlamaModel)",
    "granitemoe": "GraniteMoeModel(GraniteModel)",
    "granite_swa": "GraniteSWAModel, GraniteMoeSWAModel",
    "granitehybrid": "GraniteHybridModel(Mamba2Model, GraniteMoeModel)",
    "nemotron_h": "NemotronHModel(GraniteHybridModel)",
    "nemotron_h_moe": "NemotronHPuzzleModel(NemotronHModel)",
    "deci": "DeciModel.permute",
    "deepseek": "DeepseekModel.permute",
    "arctic": "ArcticModel (LlamaModel.permute)",
    "chameleon": "ChameleonModel (LlamaModel.permute)",
    "minicpm": "MiniCPMModel (LlamaModel.permute)",
    "olmo": "OlmoModel (LlamaModel.permute)",
    "llada": "LLaDAModel.permute",
    "muse-glimmer": "MuseGlimmerModel (_unpermute_for_rope)",
    "xverse": "XverseModel._reverse_hf_permute",
}

#: Architectures whose converter counts k's row groups as ``n_head // n_head_kv``.
K_GROUPS_BY_RATIO = frozenset({"xverse"})

#: Architectures whose converter reorders rows inside one fused q/k/v weight: GGUF name ->
#: the HF layer. The first four permute q/k for rotary; ``falcon`` regroups its
#: ``n_head_kv`` groups into all q, then k, then v (FalconModel.modify_tensors), and
#: ``bloom`` and ``gptneox`` turn per-head [q, k, v] into [Q, K, V].
FUSED_QKV: dict[str, str] = {
    "baichuan": "W_pack",
    "internlm2": "wqkv",
    "bailingmoe": "query_key_value",
    "graniteswitch": "qkv_proj",
    "falcon": "query_key_value",
    "bloom": "query_key_value",
    "gptneox": "query_key_value",
}


def permute_rows(weights: np.ndarray, groups: int) -> np.ndarray:
    """llama.cpp's row permutation (``LlamaModel.permute``) over ``groups`` row blocks."""
    rows = weights.shape[0]
    return (
        weights.reshape(groups, 2, rows // groups // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def unpermute_rows(weights: np.ndarray, groups: int) -> np.ndarray:
    """The inverse of :func:`permute_rows`: GGUF row order back to Hugging Face's.

    Why here: reading a GGUF base without torch (``gguf_numpy``) must undo exactly
    the permutation this module applies on the way out.
    """
    rows = weights.shape[0]
    return (
        weights.reshape(groups, rows // groups // 2, 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def qk_groups(arch: str, leaf: str, n_head: int, n_head_kv: int) -> int | None:
    """How many row blocks the converter permutes for layer ``leaf``; ``None``: no permutation."""
    if arch not in PERMUTED_ARCHS:
        return None
    if leaf == "q_proj":
        return n_head
    if leaf == "k_proj":
        if n_head_kv == n_head:
            return n_head
        return n_head // n_head_kv if arch in K_GROUPS_BY_RATIO else n_head_kv
    return None


def orient_rows(
    arch: str, module_path: str, b: np.ndarray, n_head: int, n_head_kv: int
) -> np.ndarray:
    """``b`` (output rows of the delta) in the GGUF's row order for this layer."""
    groups = qk_groups(arch, module_path.rsplit(".", 1)[-1], n_head, n_head_kv)
    return b if groups is None else permute_rows(b, groups)


def fused_problem(arch: str, module_path: str) -> str | None:
    """Why an adapter on this layer cannot be exported (a fused, permuted q/k/v), or None."""
    fused = FUSED_QKV.get(arch)
    if fused is not None and module_path.rsplit(".", 1)[-1] == fused:
        return (
            f"llama.cpp reorders the rows inside {arch}'s fused {fused} layer, which "
            "rltray cannot place yet: train without that layer in the LoRA targets"
        )
    return None
