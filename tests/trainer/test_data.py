"""Tokenisation and batching: response masks, fitting order, skips, fallback, padding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from rltray.trainer.data import Encoded, Skip, batches, collate, encode, padding_fraction
from rltray.trainer.job import Example

pytestmark = pytest.mark.ml

CONTEXT = (
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "first question about caching"},
    {"role": "assistant", "content": "first answer: use functools.lru_cache"},
    {"role": "user", "content": "second question about sqlite"},
    {"role": "assistant", "content": "second answer: enable WAL mode"},
)


def example(response: str = "Fixed: the loop now increments i. 🙂", *, context=CONTEXT,
            prompt: str = "Why does my loop hang?", lps=None, ex_id: str = "e1") -> Example:
    return Example(id=ex_id, prompt=prompt, response=response, rating=1,
                   rated_at="2025-01-01T00:00:00Z", messages=tuple(context),
                   behaviour_logprobs=lps)


def masked_text(tok: Any, enc: Encoded) -> str:
    batch = collate([enc], tok.pad_token_id)
    ids = batch.input_ids[0][batch.response_mask[0] > 0]
    return tok.decode(ids.tolist(), skip_special_tokens=False)


def test_multi_turn_mask_is_exactly_response_plus_end_token(tiny_tokenizer: Any) -> None:
    ex = example()
    enc = encode(tiny_tokenizer, ex, 512)
    assert isinstance(enc, Encoded)
    assert masked_text(tiny_tokenizer, enc) == ex.response + "<|end|>"
    prefix = tiny_tokenizer.decode(list(enc.input_ids[: enc.response_start]))
    rendered = tiny_tokenizer.apply_chat_template(
        [*CONTEXT, {"role": "user", "content": ex.prompt}],
        add_generation_prompt=True, tokenize=False)
    assert prefix == rendered  # context oldest first, then the prompt, then the header
    assert enc.dropped_messages == 0 and not enc.truncated and enc.notes == ()


class MergingTokenizer:
    """Character tokenizer that merges "\\nA" into one token, like BPE across a join."""

    chat_template = "fake"
    all_special_ids = (1,)  # "#" is the end-of-turn token
    added_tokens_decoder = None
    eos_token = "#"

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False):
        text = "".join(f"{m['role']}\n{m['content']}#" for m in messages)
        return text + ("assistant\n" if add_generation_prompt else "")

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        ids, i = [], 0
        while i < len(text):
            if text.startswith("\nA", i):
                ids.append(1000)
                i += 2
            else:
                ids.append(1 if text[i] == "#" else ord(text[i]))
                i += 1
        return {"input_ids": ids}


def test_response_start_is_the_common_prefix_not_the_prompt_length() -> None:
    tok = MergingTokenizer()
    ex = example("All good", context=())
    prompt_ids = tok(tok.apply_chat_template(
        [{"role": "user", "content": ex.prompt}], add_generation_prompt=True))["input_ids"]
    enc = encode(tok, ex, 512)
    assert isinstance(enc, Encoded)
    # "assistant\n" + "All" tokenises as "...t", "\nA", "l", ...: the prompt's last
    # token "\n" is not in the full conversation, so the response starts one earlier.
    assert enc.response_start == len(prompt_ids) - 1
    assert enc.input_ids[enc.response_start] == 1000
    assert enc.input_ids[-1] == 1  # ends with the end-of-turn token
    assert enc.response_tokens == len("ll good") + 2


def test_too_long_drops_oldest_history_first_then_system(tiny_tokenizer: Any) -> None:
    ex = example()
    full = encode(tiny_tokenizer, ex, 10_000)
    without_two = encode(tiny_tokenizer, example(context=(CONTEXT[0], *CONTEXT[3:])), 10_000)
    assert isinstance(full, Encoded) and isinstance(without_two, Encoded)
    enc = encode(tiny_tokenizer, ex, without_two.length)
    assert isinstance(enc, Encoded)
    assert enc.dropped_messages == 2 and enc.input_ids == without_two.input_ids
    text = tiny_tokenizer.decode(list(enc.input_ids))
    assert "You are terse." in text and "second question" in text and "first" not in text
    assert "dropped the 2 oldest" in enc.notes[0]
    # History gone: the system message goes last.
    only_system = encode(tiny_tokenizer, example(context=CONTEXT[:1]), 10_000)
    no_context = encode(tiny_tokenizer, example(context=()), 10_000)
    assert isinstance(only_system, Encoded) and isinstance(no_context, Encoded)
    enc = encode(tiny_tokenizer, ex, only_system.length)
    assert isinstance(enc, Encoded) and enc.dropped_messages == 4
    enc = encode(tiny_tokenizer, ex, no_context.length)
    assert isinstance(enc, Encoded) and enc.dropped_messages == 5
    assert enc.input_ids == no_context.input_ids and not enc.truncated


def test_no_template_character_is_trained_with_an_answer_that_opens_with_space(
    tiny_tokenizer: Any,
) -> None:
    """Regression: the generation prompt's newline and the answer's leading spaces merged
    into one token, so the template's newline was trained as the answer's start."""
    response = "  \n Ünïcödé ✓ answer"
    enc = encode(tiny_tokenizer, example(response, context=()), 512)
    assert isinstance(enc, Encoded)
    trained = masked_text(tiny_tokenizer, enc).removesuffix("<|end|>")
    assert trained and response.endswith(trained), trained
    plain = encode(tiny_tokenizer, example("Answer.", context=()), 512)
    assert isinstance(plain, Encoded) and masked_text(tiny_tokenizer, plain) == "Answer.<|end|>"


def test_then_the_response_is_truncated_at_its_end(tiny_tokenizer: Any) -> None:
    ex = example("word " * 40)
    no_context = encode(tiny_tokenizer, example("word " * 40, context=()), 10_000)
    assert isinstance(no_context, Encoded)
    limit = no_context.response_start + 5
    enc = encode(tiny_tokenizer, ex, limit)
    assert isinstance(enc, Encoded)
    assert enc.truncated and enc.length == limit and enc.response_tokens == 5
    assert enc.input_ids == no_context.input_ids[:limit]
    assert tiny_tokenizer.eos_token_id not in enc.input_ids[enc.response_start:]
    assert ex.response.startswith(masked_text(tiny_tokenizer, enc))
    assert any("truncated the response" in n for n in enc.notes)


def test_no_response_token_left_is_a_reported_skip(tiny_tokenizer: Any) -> None:
    got = encode(tiny_tokenizer, example(prompt="long prompt " * 100, ex_id="big"), 32)
    assert isinstance(got, Skip)
    assert got.example_id == "big" and "max_seq_len 32" in got.reason and "big" in got.reason


def test_fallback_format_without_chat_template(tiny_tokenizer: Any) -> None:
    tiny_tokenizer.chat_template = None
    ex = example("Use WAL.", context=CONTEXT[:2])
    enc = encode(tiny_tokenizer, ex, 512)
    assert isinstance(enc, Encoded)
    text = tiny_tokenizer.decode(list(enc.input_ids), skip_special_tokens=False)
    assert text == ("<|bos|>System: You are terse.\n\nUser: first question about caching\n\n"
                    f"User: {ex.prompt}\n\nAssistant: Use WAL.<|end|>")
    region = masked_text(tiny_tokenizer, enc)
    assert region.endswith("Use WAL.<|end|>") and len(region) <= len(" Use WAL.<|end|>")


def test_template_that_refuses_repeated_roles_gets_merged_turns(tiny_tokenizer: Any) -> None:
    tiny_tokenizer.chat_template = (
        "{% for m in messages %}"
        "{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
        "{% if loop.index0 > 0 and messages[loop.index0 - 1]['role'] == m['role'] %}"
        "{{ raise_exception('roles must alternate') }}{% endif %}"
        "{{ '<|start|>' + m['role'] + '\\n' + m['content'] + '<|end|>' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start|>assistant\\n' }}{% endif %}"
    )
    ctx = ({"role": "system", "content": "S"}, {"role": "user", "content": "u1"})
    enc = encode(tiny_tokenizer, example("ok", context=ctx, prompt="u2"), 512)
    assert isinstance(enc, Encoded)
    text = tiny_tokenizer.decode(list(enc.input_ids), skip_special_tokens=False)
    assert text == "<|start|>user\nS\n\nu1\n\nu2<|end|><|start|>assistant\nok<|end|>"
    assert masked_text(tiny_tokenizer, enc) == "ok<|end|>"


def test_broken_template_is_a_skip_not_a_crash(tiny_tokenizer: Any) -> None:
    tiny_tokenizer.chat_template = "{{ raise_exception('nope') }}"
    got = encode(tiny_tokenizer, example(), 512)
    assert isinstance(got, Skip) and "chat template refused" in got.reason


def test_behaviour_logprobs_align_to_response_tokens(tiny_tokenizer: Any) -> None:
    base = encode(tiny_tokenizer, example(context=()), 512)
    assert isinstance(base, Encoded)
    n = base.response_tokens
    lps = [-0.1 * (k + 1) for k in range(n)]
    enc = encode(tiny_tokenizer, example(context=(), lps=lps), 512)
    assert isinstance(enc, Encoded) and enc.behaviour_logprobs == tuple(lps)
    cut = encode(tiny_tokenizer, example(context=(), lps=lps), base.response_start + 3)
    assert isinstance(cut, Encoded) and cut.behaviour_logprobs == tuple(lps[:3])
    wrong = encode(tiny_tokenizer, example(context=(), lps=lps[:-1]), 512)
    assert isinstance(wrong, Encoded) and wrong.behaviour_logprobs is None
    assert any("ignored" in note for note in wrong.notes)


def test_collate_right_pads_with_masks_and_positions(tiny_tokenizer: Any) -> None:
    short = encode(tiny_tokenizer, example("ok", context=()), 512, index=7)
    long = encode(tiny_tokenizer, example("a much longer answer " * 3), 512, index=3)
    assert isinstance(short, Encoded) and isinstance(long, Encoded)
    pad = tiny_tokenizer.pad_token_id
    b = collate([short, long], pad)
    L = long.length
    assert b.input_ids.shape == b.attention_mask.shape == b.response_mask.shape == (2, L)
    assert b.input_ids.dtype == np.int64 and b.attention_mask.dtype == np.int64
    assert b.response_mask.dtype == np.float32 and b.position_ids.dtype == np.int64
    assert b.example_idx == [7, 3]
    n = short.length
    assert (b.input_ids[0, n:] == pad).all() and b.attention_mask[0].sum() == n
    assert list(b.input_ids[0, :n]) == list(short.input_ids)
    assert b.response_mask[0, n:].sum() == 0 and b.response_mask[:, 0].sum() == 0
    assert b.response_mask[0].sum() == short.response_tokens
    assert b.response_mask[1].sum() == long.response_tokens
    assert np.array_equal(b.position_ids[1], np.arange(L))
    assert collate([short, long], pad, example_idx=[0, 1]).example_idx == [0, 1]
    with pytest.raises(ValueError):
        collate([], pad)


def test_batches_group_similar_lengths_deterministically(tiny_tokenizer: Any) -> None:
    responses = ["x " * k for k in (30, 1, 29, 2, 31, 3, 28, 4)]
    encs = [encode(tiny_tokenizer, example(r, context=()), 512) for r in responses]
    assert all(isinstance(e, Encoded) for e in encs)
    grouped = batches(encs, 2)
    assert grouped == batches(encs, 2)
    assert sorted(i for g in grouped for i in g) == list(range(8))
    plain = batches(encs, 2, by_length=False)
    assert plain == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert padding_fraction(encs, grouped) < padding_fraction(encs, plain)
    with pytest.raises(ValueError):
        batches(encs, 0)


def test_a_cut_off_response_never_trains_its_end_token(tiny_tokenizer: Any) -> None:
    """An answer marked ``truncated`` (cut where it was captured) ends without <|end|>:
    training the end token there would teach the model to stop mid-answer."""
    whole = example("def f(x):\n    return")
    cut = Example(**{**whole.__dict__, "truncated": True})
    enc_whole, enc_cut = encode(tiny_tokenizer, whole, 512), encode(tiny_tokenizer, cut, 512)
    assert isinstance(enc_whole, Encoded) and isinstance(enc_cut, Encoded)
    assert masked_text(tiny_tokenizer, enc_whole) == whole.response + "<|end|>"
    assert masked_text(tiny_tokenizer, enc_cut) == whole.response
    assert tiny_tokenizer.eos_token_id not in enc_cut.input_ids[enc_cut.response_start:]
    assert enc_cut.truncated and enc_cut.input_ids == enc_whole.input_ids[:-1]
    tiny_tokenizer.chat_template = None  # the plain fallback format drops its eos too
    enc_plain = encode(tiny_tokenizer, cut, 512)
    assert isinstance(enc_plain, Encoded)
    assert masked_text(tiny_tokenizer, enc_plain).endswith("return")
