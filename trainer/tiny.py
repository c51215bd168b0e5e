"""Build a tiny, randomly initialised Llama model folder for tests and benchmarks.

Why: every ML test and the learning benchmark need a real model folder that the
*same* loaders users hit can open (``transformers.AutoModelForCausalLM`` /
``AutoTokenizer`` and ``mlx_lm.load``), yet nothing may be downloaded and the
machine is small. :func:`build_tiny_llama` writes, in about a second:

* ``config.json`` (``model_type: llama``) and ``model.safetensors`` (fp32, random
  init from ``seed``) via ``LlamaForCausalLM.save_pretrained``;
* a byte-level BPE tokenizer trained locally with the ``tokenizers`` library on
  ``vocab_corpus`` (or a small built-in code/chat corpus). Byte level means every
  string, including any unicode, round-trips exactly: unknown characters fall back
  to their UTF-8 bytes, which are all in the base alphabet;
* a Llama-3-like chat template with its own special tokens::

      <|bos|><|start|>system\\n...<|end|><|start|>user\\n...<|end|><|start|>assistant\\n...<|end|>

  ``<|end|>`` is the end-of-sequence token (it ends an assistant turn, as
  Llama-3's ``<|eot_id|>`` does), ``<|pad|>`` pads, ``<|bos|>`` starts every text
  (added by the template for chats and by the post-processor for plain text).

Everything is deterministic given the arguments, so parameter counts are exact
and two builds with the same seed hold identical weights.
"""

from __future__ import annotations

import json
from pathlib import Path

BOS = "<|bos|>"
END = "<|end|>"
START = "<|start|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = (BOS, END, START, PAD)

#: Target vocabulary (special tokens + 256 bytes + merges). Small keeps the embedding
#: cheap; the default corpus has enough text to reach it, so the default model's
#: parameter count is fixed.
DEFAULT_VOCAB_SIZE = 512

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start|>' + message['role'] + '\\n' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start|>assistant\\n' }}{% endif %}"
)

DEFAULT_CORPUS: tuple[str, ...] = (
    "def add(a, b):\n    return a + b\n",
    "def main() -> None:\n    for i in range(10):\n        print(i)\n",
    "import os\nimport sys\n\nif __name__ == '__main__':\n    sys.exit(main())\n",
    "class Store:\n    def __init__(self, path):\n        self.path = path\n"
    "    def close(self):\n        self.conn.close()\n",
    "function greet(name) {\n  return `Hello, ${name}!`;\n}\nconsole.log(greet('world'));\n",
    "fn main() {\n    let x = vec![1, 2, 3];\n    println!(\"{:?}\", x);\n}\n",
    "SELECT id, name FROM users WHERE active = 1 ORDER BY created_at DESC;\n",
    "git commit -m 'fix: handle empty input' && git push origin main\n",
    "Can you fix the failing test in tests/test_store.py? The error is a KeyError.",
    "Sure. The test fails because the dictionary key is missing. Here is the fix.",
    "I updated the function to return None when the file does not exist.",
    "Please refactor this module so that each class lives in its own file.",
    "The build passes now. I ran the test suite and all tests are green.",
    "You are a helpful coding assistant. Answer briefly and show the code.",
    "Why does this loop never terminate? The counter is never incremented.",
    "Thanks, that works. Now add type hints and a docstring that says why.",
    "Error: module not found. Install the package or check the import path.",
    "The quick brown fox jumps over the lazy dog. Numbers: 0 1 2 3 4 5 6 7 8 9.",
    "for (int i = 0; i < n; ++i) { sum += values[i]; } return sum;\n",
    "try:\n    value = int(text)\nexcept ValueError:\n    value = 0\n",
    "with open(path, encoding='utf-8') as handle:\n    data = json.load(handle)\n",
    "Unicode: café, naïve, 日本語, emoji 🙂 — all must round-trip.",
)


def build_tokenizer(folder: Path, vocab_corpus: list[str] | None = None,
                    vocab_size: int = DEFAULT_VOCAB_SIZE):
    """Train a byte-level BPE on the corpus, wrap and save it; returns the HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = list(vocab_corpus) if vocab_corpus else list(DEFAULT_CORPUS)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeat the corpus so rare pairs still reach the merge threshold (min_frequency 0).
    tok.train_from_iterator(corpus * 4, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=END,
        pad_token=PAD,
        additional_special_tokens=[START],
        clean_up_tokenization_spaces=False,
        model_max_length=1_000_000,
    )
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(str(folder))
    return hf


def build_tiny_llama(
    folder: str | Path,
    *,
    vocab_corpus: list[str] | None = None,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    seed: int = 0,
    max_position: int = 512,
) -> Path:
    """Write a tiny Llama model + tokenizer into ``folder`` (created) and return it.

    Weights are untied (``lm_head`` separate from the embedding, like Llama-3-8B) so
    tests can check that LoRA never targets either. fp32 so torch and MLX agree to
    ~1e-5 on logits.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if hidden_size % heads or heads % kv_heads:
        raise ValueError("hidden_size must divide by heads and heads by kv_heads")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out, vocab_corpus)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden_size // heads,
        max_position_embeddings=max_position,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.02,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(str(out), safe_serialization=True)
    # Older loaders (mlx-lm, transformers 4.x) read a top-level rope_theta; v5 writes
    # only rope_parameters. Write both so every loader uses the same frequency.
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg.setdefault("rope_theta", 10000.0)
    cfg["tie_word_embeddings"] = False
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def parameter_count(hidden_size: int, layers: int, heads: int, kv_heads: int,
                    intermediate: int, vocab: int) -> int:
    """Exact parameter count of an untied, bias-free Llama with these sizes."""
    head_dim = hidden_size // heads
    attn = 2 * hidden_size * heads * head_dim + 2 * hidden_size * kv_heads * head_dim
    mlp = 3 * hidden_size * intermediate
    norms = 2 * hidden_size
    return 2 * vocab * hidden_size + layers * (attn + mlp + norms) + hidden_size
