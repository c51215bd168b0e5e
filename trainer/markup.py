"""Tokenise a chat-template rendering so that only the template's own markup is special.

Why: ``apply_chat_template`` returns text, and tokenising that text parses every
spelling of a special token as the control token — also one that sits inside a
message. An answer or prompt that *talks about* ``<|im_end|>``, ``<|eot_id|>`` or
``<|end|>`` (a developer writing a chat template, a tokenizer test) would then be
trained as a turn boundary in mid-answer, and the prompt the model sees would not
be what was rated. The model never saw such text as a control token: it wrote
ordinary tokens there.

How, without re-implementing any tokenizer:

1. :func:`content_spans` finds each message's content in the rendered text. The
   template is rendered once more with every content replaced by a numbered marker;
   the markup between markers must then frame the real contents, verbatim or
   trimmed the way templates trim (``| trim``, ``strip('\\n')``). A template that
   renders the markers differently (it inspects the content) gives ``None``.
2. :func:`tokenize` tokenises the text as the tokenizer does (every special parsed,
   with character offsets). Special tokens starting inside a content span are not
   markup. Only the stretches between two markup specials that hold such a token
   are tokenised again with ``split_special_tokens=True``. Special tokens are hard
   split points of the tokenizer (nothing merges across them), so every other
   token is exactly what the tokenizer gave; each re-tokenised stretch is first
   checked to tokenise exactly as in the whole text when specials *are* parsed,
   so a tokenizer whose pieces depend on their position (a SentencePiece prefix
   space on the first piece only) is refused rather than trained wrongly.

Text without spelled specials costs one extra template rendering and comes out
exactly as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

Span = tuple[int, int]

_MARK = "\ue000{}\ue001"  # private-use characters: no template or tokenizer gives them meaning
_MARK_RE = re.compile("\ue000(\\d+)\ue001")


class MarkupError(ValueError):
    """Spelled special tokens in a message that cannot be tokenised as text exactly."""


def special_ids(tokenizer: Any) -> set[int]:
    """Ids of every special token (named specials and added tokens marked special)."""
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for i, tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(tok, "special", False):
            ids.add(int(i))
    return ids


def special_texts(tokenizer: Any) -> set[str]:
    """How each special token is spelled (for tokenizers that give no offsets)."""
    texts = {str(t) for t in (getattr(tokenizer, "all_special_tokens", []) or [])}
    for tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(tok, "special", False):
            texts.add(str(getattr(tok, "content", tok)))
    return {t for t in texts if t}


def _forms(content: str) -> list[str]:
    """The content as templates render it: verbatim first, then the usual trims."""
    return list(dict.fromkeys((content, content.strip(), content.strip("\n"),
                               content.lstrip("\n"), content.rstrip("\n"),
                               content.lstrip(), content.rstrip())))


def content_spans(tokenizer: Any, convo: Sequence[dict[str, str]], text: str,
                  add_generation_prompt: bool) -> list[Span] | None:
    """Character span of each message's content in ``text`` (the rendering of
    ``convo``), in message order; None when the markup cannot be told apart."""
    marked = [{**m, "content": _MARK.format(i)} for i, m in enumerate(convo)]
    try:
        skeleton = tokenizer.apply_chat_template(
            marked, add_generation_prompt=add_generation_prompt, tokenize=False)
    except Exception:  # a template that refuses the markers: cannot tell
        return None
    if [int(n) for n in _MARK_RE.findall(skeleton)] != list(range(len(convo))):
        return None
    markup = _MARK_RE.split(skeleton)[::2]  # the text around the markers
    spans: list[Span] = []
    cursor = 0
    for i, message in enumerate(convo):
        if not text.startswith(markup[i], cursor):
            return None
        cursor += len(markup[i])
        form = next((f for f in _forms(message["content"]) if text.startswith(f, cursor)
                     and text.startswith(markup[i + 1], cursor + len(f))), None)
        if form is None:
            return None
        spans.append((cursor, cursor + len(form)))
        cursor += len(form)
    return spans if text[cursor:] == markup[-1] else None


def tokenize(tokenizer: Any, text: str, spans: list[Span] | None,
             contents: Sequence[str]) -> tuple[list[int], list[Span] | None]:
    """Ids of ``text`` with only markup specials special, and each token's character
    span (None when the tokenizer gives no offsets). ``spans`` are the contents'
    spans (:func:`content_spans`); ``contents`` the raw contents, for the check
    made when offsets or spans are missing. Raises :class:`MarkupError`."""
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc.get("offset_mapping")
    except (NotImplementedError, TypeError):  # slow / minimal tokenizers: no offsets
        enc, offsets = tokenizer(text, add_special_tokens=False), None
    ids = [int(i) for i in enc["input_ids"]]
    if offsets is None or spans is None:
        spelled = sorted(t for t in special_texts(tokenizer) if any(t in c for c in contents))
        if spelled:
            raise MarkupError(f"a message spells the special token {spelled[0]!r} and this "
                              "tokenizer or chat template cannot keep it as plain text")
        return ids, None if offsets is None else [tuple(o) for o in offsets]
    offs: list[Span] = [(int(a), int(b)) for a, b in offsets]
    specials = special_ids(tokenizer)

    def markup_at(k: int) -> bool:
        s, e = offs[k]
        core = s + (e - s) - len(text[s:e].lstrip())  # past whitespace an lstrip token ate
        return ids[k] in specials and not any(a <= core < b for a, b in spans)

    if all(markup_at(k) for k, i in enumerate(ids) if i in specials):
        return ids, offs
    return _split_spelled(tokenizer, text, ids, offs, markup_at)


def _split_spelled(tokenizer: Any, text: str, ids: list[int], offs: list[Span],
                   markup_at: Callable[[int], bool]) -> tuple[list[int], list[Span]]:
    """Re-tokenise, with specials split, each stretch between markup specials that
    holds a spelled special (see the module docstring)."""
    specials = special_ids(tokenizer)
    out_ids: list[int] = []
    out_offs: list[Span] = []
    prev = -1
    for k in [*(k for k in range(len(ids)) if markup_at(k)), len(ids)]:
        stretch = range(prev + 1, k)
        if any(ids[j] in specials for j in stretch):
            a = offs[prev][1] if prev >= 0 else 0
            b = offs[k][0] if k < len(ids) else len(text)
            piece = text[a:b]
            if [int(i) for i in tokenizer(piece, add_special_tokens=False)["input_ids"]] \
                    != ids[prev + 1:k]:
                raise MarkupError("a message spells a special token and this tokenizer does "
                                  "not tokenise it the same way on its own")
            enc = tokenizer(piece, add_special_tokens=False, split_special_tokens=True,
                            return_offsets_mapping=True)
            out_ids += [int(i) for i in enc["input_ids"]]
            out_offs += [(int(s) + a, int(e) + a) for s, e in enc["offset_mapping"]]
        else:
            out_ids += ids[prev + 1:k]
            out_offs += offs[prev + 1:k]
        if k < len(ids):
            out_ids.append(ids[k])
            out_offs.append(offs[k])
        prev = k
    return out_ids, out_offs
