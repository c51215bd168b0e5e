"""Tiny local tokenizers with real models' chat templates and special tokens.

Why: how a rated answer is tokenised depends on the template and on how its special
tokens are declared (Phi-3's ``<|end|>`` eats the newline after it). The real
tokenizers are downloads; these keep the real templates (copied verbatim from
``microsoft/Phi-3.5-mini-instruct`` and ``meta-llama/Meta-Llama-3-8B-Instruct``)
and special tokens, with a byte-level BPE trained in process on the tiny model's
corpus (every string round-trips).
"""

from __future__ import annotations

from typing import Any

PHI3_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
    "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)


def build(specials: list[tuple[str, bool]], template: str, lstrip: tuple[str, ...] = (),
          **named: str) -> Any:
    """A byte-level BPE with ``specials`` (text, rstrip; ``lstrip`` names those that eat
    the whitespace before them) and ``named`` bos/eos/pad."""
    from rltray.trainer.tiny import DEFAULT_CORPUS
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    added = [AddedToken(t, rstrip=r, lstrip=t in lstrip, normalized=False, special=True)
             for t, r in specials]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=added, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(DEFAULT_CORPUS) * 4, trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False,
                                 model_max_length=1_000_000, **named)
    hf.chat_template = template
    return hf


def phi3_tokenizer() -> Any:
    """Phi-3.5-mini's specials: the role tokens and ``<|end|>`` strip the whitespace after
    them (``rstrip`` in its tokenizer_config), eos ``<|endoftext|>`` follows the turn."""
    specials = [("<|endoftext|>", False), ("<s>", False), ("<|assistant|>", True),
                ("<|end|>", True), ("<|system|>", True), ("<|user|>", True)]
    return build(specials, PHI3_TEMPLATE, bos_token="<s>", eos_token="<|endoftext|>",
                  pad_token="<|endoftext|>")


def llama3_tokenizer() -> Any:
    """Llama-3-Instruct's specials: eos is the turn's ``<|eot_id|>``."""
    specials = [("<|begin_of_text|>", False), ("<|end_of_text|>", False),
                ("<|start_header_id|>", False), ("<|end_header_id|>", False),
                ("<|eot_id|>", False)]
    return build(specials, LLAMA3_TEMPLATE, bos_token="<|begin_of_text|>",
                  eos_token="<|eot_id|>", pad_token="<|end_of_text|>")
