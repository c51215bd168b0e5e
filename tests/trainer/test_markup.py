"""What is trained is what the user rated (issue 20 item 9), under the real Phi-3 and
Llama-3 chat templates on tiny local tokenizers (tests/trainer/chat_tokenizers.py)."""

from __future__ import annotations

from typing import Any

import pytest
from rltray.trainer.data import Encoded, Skip, collate, encode
from rltray.trainer.job import Example
from rltray.trainer.markup import special_ids

from tests.support.chat_tokenizers import build, llama3_tokenizer, phi3_tokenizer

pytestmark = pytest.mark.ml

CONTEXT = (
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "first question"},
    {"role": "assistant", "content": "first answer"},
)

END = {phi3_tokenizer: "<|end|>", llama3_tokenizer: "<|eot_id|>"}  # each turn's own end


def example(response: str, prompt: str = "Why does my loop hang?", *,
            truncated: bool = False, context: tuple = CONTEXT) -> Example:
    return Example(id="e1", prompt=prompt, response=response, rating=1,
                   rated_at="2025-01-01T00:00:00Z", messages=context, truncated=truncated)


def trained(tok: Any, enc: Encoded) -> list[int]:
    batch = collate([enc], tok.pad_token_id)
    return batch.input_ids[0][batch.response_mask[0] > 0].tolist()


def turns(tok: Any, ex: Example) -> list[dict[str, str]]:
    return [*ex.messages, {"role": "user", "content": ex.prompt},
            {"role": "assistant", "content": ex.response}]


def markup_specials(tok: Any, ex: Example) -> list[int]:
    """The special tokens the template itself writes: those of the same conversation
    with every spelled special removed from the messages."""
    spelled = tok.convert_ids_to_tokens(sorted(special_ids(tok)))
    clean = []
    for m in turns(tok, ex):
        text = m["content"]
        for t in spelled:
            text = text.replace(t, "")
        clean.append({**m, "content": text})
    ids = tok.apply_chat_template(clean, tokenize=False)
    return [i for i in tok(ids, add_special_tokens=False)["input_ids"] if i in special_ids(tok)]


@pytest.mark.parametrize("build", [phi3_tokenizer, llama3_tokenizer], ids=["phi3", "llama3"])
def test_a_cut_off_answer_trains_nothing_the_template_writes_after_it(build: Any) -> None:
    """Phi-3 appends ``eos_token`` after the turn's ``<|end|>``: the cut used to drop
    only that last special and still train ``<|end|>`` (stop mid-answer)."""
    tok = build()
    whole, cut = example("def f(x):\n    return"), example("def f(x):\n    return",
                                                            truncated=True)
    enc_whole, enc_cut = encode(tok, whole, 4096), encode(tok, cut, 4096)
    assert isinstance(enc_whole, Encoded) and isinstance(enc_cut, Encoded)
    assert tok.decode(trained(tok, enc_cut)) == cut.response
    assert not set(trained(tok, enc_cut)) & special_ids(tok)
    # the whole answer still learns to stop
    assert tok.convert_tokens_to_ids(END[build]) in trained(tok, enc_whole)
    assert enc_cut.input_ids == enc_whole.input_ids[: enc_cut.length]


@pytest.mark.parametrize(("build", "spelled"), [
    (phi3_tokenizer, "<|end|>\n<|user|>\nand <|endoftext|>"),
    (llama3_tokenizer, "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi"),
], ids=["phi3", "llama3"])
def test_text_that_spells_a_special_token_is_trained_as_text(build: Any, spelled: str) -> None:
    """A rated answer (or prompt) about chat templates spells their control tokens; they
    used to be tokenised as those controls and trained as a turn boundary mid-answer."""
    tok = build()
    ex = example(f"Each turn ends like this: {spelled} (see the docs).",
                 prompt=f"What does {spelled} mean?")
    enc = encode(tok, ex, 4096)
    assert isinstance(enc, Encoded)
    ids = list(enc.input_ids)
    specials = special_ids(tok)
    assert [i for i in ids if i in specials] == markup_specials(tok, ex)
    region = trained(tok, enc)
    cut = next(k for k, i in enumerate(region) if i in specials)
    assert tok.decode(region[:cut]) == ex.response.strip()  # all text, no control
    assert region[cut] == tok.convert_tokens_to_ids(END[build])  # then the turn's end
    assert set(region[cut:]) <= specials
    # nothing lost or added: the ids spell the rendered conversation (up to the
    # whitespace Phi-3's markup tokens swallow, as its tokenizer does)
    rendered = tok.apply_chat_template(turns(tok, ex), tokenize=False)
    assert "".join(tok.decode(ids).split()) == "".join(rendered.split())
    # and where no message spells a special, the ids are the tokenizer's own, unchanged
    plain = example("Each turn ends like this (see the docs).")
    enc_plain = encode(tok, plain, 4096)
    assert isinstance(enc_plain, Encoded)
    want = tok.apply_chat_template(turns(tok, plain), tokenize=True, return_dict=False)
    assert list(enc_plain.input_ids) == list(want)[: enc_plain.length]


def test_a_cut_off_answer_that_spells_the_end_token_is_cut_after_its_text() -> None:
    tok = phi3_tokenizer()
    ex = example("Phi-3 ends a turn with <|end|>", truncated=True)
    enc = encode(tok, ex, 4096)
    assert isinstance(enc, Encoded)
    assert tok.decode(trained(tok, enc)) == ex.response
    assert not set(trained(tok, enc)) & special_ids(tok)


def test_the_plain_format_keeps_spelled_specials_as_text(tiny_tokenizer: Any) -> None:
    tiny_tokenizer.chat_template = None
    enc = encode(tiny_tokenizer, example("stop at <|end|> here", context=()), 512)
    assert isinstance(enc, Encoded)
    region = trained(tiny_tokenizer, enc)
    assert region[-1] == tiny_tokenizer.eos_token_id
    assert tiny_tokenizer.eos_token_id not in region[:-1]
    assert tiny_tokenizer.decode(region) == "stop at <|end|> here<|end|>"


def test_a_template_that_rewrites_content_cannot_hide_a_spelled_special(
        tiny_tokenizer: Any) -> None:
    """When the markup cannot be told from the content, a spelled special is a reported
    skip, never a control token in training; ordinary text still trains."""
    tiny_tokenizer.chat_template = tiny_tokenizer.chat_template.replace(
        "message['content']", "(message['content'] | upper)")
    got = encode(tiny_tokenizer, example("say <|end|> now", context=()), 512)
    assert isinstance(got, Skip) and "<|end|>" in got.reason
    assert isinstance(encode(tiny_tokenizer, example("say it now", context=()), 512), Encoded)


def test_a_markup_token_that_eats_the_whitespace_before_it_stays_markup() -> None:
    """An ``lstrip`` special's span starts inside the content's trailing spaces; it is
    still the template's turn end, not text."""
    template = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content']"
                " + '<|im_end|>\\n' }}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    tok = build([("<|im_start|>", False), ("<|im_end|>", False)], template,
                lstrip=("<|im_end|>",), eos_token="<|im_end|>", pad_token="<|im_start|>")
    enc = encode(tok, example("use a context manager   ", context=()), 4096)
    assert isinstance(enc, Encoded)
    assert trained(tok, enc)[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.decode(trained(tok, enc)[:-1]) == "use a context manager"
