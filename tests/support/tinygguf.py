"""A tiny Llama-architecture GGUF and a PEFT adapter that fits it, built in milliseconds.

Why: the Ollama tests need a real GGUF base (the fake server reads its header,
the merge path dequantizes and rewrites it) but not a real model's weights.
Block weights are Q8_0 (a real quantized type), norms and embeddings F32, and
the keys are the ones llama.cpp writes, so every code path runs as on a real file.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GO_TEMPLATE = (
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
    "<|im_start|>assistant\n"
)


def build_tiny_gguf(
    path: Path, *, hidden: int = 64, blocks: int = 2, heads: int = 4, kv_heads: int = 2,
    ffn: int = 96, vocab: int = 128, seed: int = 0, block_type: str = "Q8_0",
    arch: str = "llama", hf_tokenizer: bool = False, leave_out: Collection[str] = (),
) -> Path:
    """``block_type`` Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 (the gguf library quantizes them),
    F16, or a K-quant such as Q4_K (quantized with llama.cpp's own code; needs
    llama-cpp-python and sizes that are multiples of 256).

    ``arch`` ``qwen2`` adds q/k/v biases (Qwen2 has them), ``qwen3`` q/k norms and the
    key length; ``hf_tokenizer`` adds the merges and scores without which Transformers
    cannot build a tokenizer from the file (materializing a GGUF base needs one);
    ``leave_out`` names tensors not to write (a file a converter must refuse)."""
    import gguf
    from gguf import quants

    rng = np.random.default_rng(seed)
    head_dim = hidden // heads
    w = gguf.GGUFWriter(path, arch)
    add_tensor = w.add_tensor
    w.add_tensor = lambda name, *a, **k: None if name in leave_out else add_tensor(name, *a, **k)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name("tiny")
    w.add_block_count(blocks)
    w.add_context_length(2048)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.add_chat_template(CHAT_TEMPLATE)
    if hf_tokenizer:
        w.add_token_merges([])
        w.add_token_types([1] * vocab)
        w.add_token_scores([0.0] * vocab)
        w.add_bos_token_id(0)
        w.add_eos_token_id(1)
    if arch == "qwen3":
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)

    qtype = gguf.GGMLQuantizationType[block_type]

    def q8(shape: tuple[int, int]) -> np.ndarray:
        values = rng.normal(0, 0.05, shape).astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.F16:
            return values.astype(np.float16)
        if qtype.name in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"):
            return quants.quantize(values, qtype)
        from rltray.trainer.export.merge import ggml_quantizer

        quantizer = ggml_quantizer()
        assert quantizer is not None, "K-quants need llama-cpp-python"
        return quantizer.quantize(values, qtype)

    w.add_tensor("token_embd.weight", rng.normal(0, 0.05, (vocab, hidden)).astype(np.float32))
    for b in range(blocks):
        w.add_tensor(f"blk.{b}.attn_norm.weight", np.ones(hidden, np.float32))
        for name, shape in (
            ("attn_q", (hidden, hidden)),
            ("attn_k", (kv_heads * head_dim, hidden)),
            ("attn_v", (kv_heads * head_dim, hidden)),
            ("attn_output", (hidden, hidden)),
            ("ffn_gate", (ffn, hidden)),
            ("ffn_up", (ffn, hidden)),
            ("ffn_down", (hidden, ffn)),
        ):
            w.add_tensor(f"blk.{b}.{name}.weight", q8(shape), raw_dtype=qtype)
        if arch == "qwen2":
            for name, rows in (("attn_q", hidden), ("attn_k", kv_heads * head_dim),
                               ("attn_v", kv_heads * head_dim)):
                w.add_tensor(f"blk.{b}.{name}.bias", rng.normal(0, 0.05, rows).astype(np.float32))
        if arch == "qwen3":
            for name in ("attn_q_norm", "attn_k_norm"):
                w.add_tensor(f"blk.{b}.{name}.weight",
                             rng.normal(1, 0.1, head_dim).astype(np.float32))
        w.add_tensor(f"blk.{b}.ffn_norm.weight", np.ones(hidden, np.float32))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def build_tiny_adapter(
    out: Path, *, hidden: int = 64, blocks: int = 2, heads: int = 4, kv_heads: int = 2,
    ffn: int = 96, rank: int = 4, seed: int = 1, b_std: float = 0.1,
) -> Path:
    """A PEFT folder with LoRA on every block linear layer of the tiny model above.

    ``b_std`` 0.1 makes a delta about as big as the weights (easy to see); 3e-4 makes a
    trained-size one (median |delta| about 1e-4, as on SmolLM2 after a round)."""
    from rltray.trainer.adapters import peft_name, write_adapter

    rng = np.random.default_rng(seed)
    kv = hidden // heads * kv_heads
    shapes = {
        "self_attn.q_proj": (hidden, hidden),
        "self_attn.k_proj": (kv, hidden),
        "self_attn.v_proj": (kv, hidden),
        "self_attn.o_proj": (hidden, hidden),
        "mlp.gate_proj": (ffn, hidden),
        "mlp.up_proj": (ffn, hidden),
        "mlp.down_proj": (hidden, ffn),
    }
    tensors = {}
    for b in range(blocks):
        for leaf, (o, i) in shapes.items():
            path = f"model.layers.{b}.{leaf}"
            tensors[peft_name(path, "A")] = rng.normal(0, 0.1, (rank, i)).astype(np.float32)
            tensors[peft_name(path, "B")] = rng.normal(0, b_std, (o, rank)).astype(np.float32)
    return write_adapter(out, tensors, rank=rank, alpha=2.0 * rank, base_model="tiny")
