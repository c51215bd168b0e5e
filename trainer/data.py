"""Examples -> token ids with a response mask -> padded numpy batches.

Why this is careful (see TRAINER-SPEC "Tokenisation"):

* The model's own chat template (``apply_chat_template``) renders the context
  messages (oldest first), the user prompt and the rated response, because the
  adapter must learn in the format the model is used in.
* The loss covers the response tokens only. Where the response starts is found
  by tokenising the prompt part (with the generation prompt) and the full
  conversation and taking their **common prefix**: tokenising two pieces
  separately and concatenating is not what the model sees (BPE merges across the
  join, templates rewrite earlier turns).
* The response region ends after the last special token of the assistant turn
  (its end-of-turn token, e.g. ``<|eot_id|>``, ``<|im_end|>``), so the model learns
  to stop; template trailers after it (a newline) are not trained and are cut.
* A response the example marks ``truncated`` (cut off where it was captured)
  ends *without* its end-of-turn token: the answer did not end there, and
  training that token would teach the model to stop mid-answer. It is cut right
  after the response text, so nothing the template writes after it is trained
  (templates such as Phi-3's add ``eos_token`` after the turn's own end token).
* Only the template's own markup becomes special tokens: a message that spells
  ``<|im_end|>`` or ``<|eot_id|>`` is tokenised as the text it is
  (:mod:`rltray.trainer.markup`), so a turn boundary is never trained mid-answer.
* Too long: drop the oldest context messages first (system messages last, because
  they are instructions rather than history), then truncate the response at its
  end (the end-of-turn token goes too: the response did not end there). When not
  even one response token fits, :class:`Skip` says why — never silently lost.

Tokenizers without a chat template use :data:`FALLBACK_FORMAT` (documented there).

Batches: right padding; ``position_ids`` are ``0..L-1`` on every row (pads are
masked out, and this is exactly what mlx-lm computes, so both backends agree).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import markup

#: The plain format used when a tokenizer has no chat template (base models)::
#:
#:     <bos>System: {content}\n\nUser: {content}\n\nAssistant: {content}<eos>\n\n...
#:
#: Each message is ``"{Role}: {content}"``, messages are joined by a blank line, the
#: prompt part ends with ``"Assistant: "`` and the response is followed by the eos
#: token (when the tokenizer has one). ``<bos>`` is whatever the tokenizer adds itself.
FALLBACK_FORMAT = "{role}: {content}"
FALLBACK_SEPARATOR = "\n\n"
FALLBACK_ROLES = {"system": "System", "user": "User", "assistant": "Assistant"}


@dataclass(frozen=True)
class Encoded:
    """One example as tokens. ``input_ids[response_start:]`` are the response tokens.

    ``notes`` say what fitting changed (dropped context, truncation, ignored
    behaviour log-probs) so the caller can report it. ``behaviour_logprobs`` is the
    example's list aligned to the response tokens (one per token, cut when the
    response was truncated) or ``None`` when absent or of another length.
    """

    input_ids: tuple[int, ...]
    response_start: int
    example_id: str = ""
    index: int | None = None
    dropped_messages: int = 0
    truncated: bool = False
    behaviour_logprobs: tuple[float, ...] | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def length(self) -> int:
        return len(self.input_ids)

    @property
    def response_tokens(self) -> int:
        return len(self.input_ids) - self.response_start


@dataclass(frozen=True)
class Skip:
    """An example that cannot be trained on, with a one-sentence reason."""

    reason: str
    example_id: str = ""


@dataclass
class Batch:
    """Right-padded arrays for one forward pass (see the brief's Batch contract)."""

    input_ids: np.ndarray  # int64 (B, L)
    attention_mask: np.ndarray  # int64 (B, L)
    response_mask: np.ndarray  # float32 (B, L), 1.0 on response tokens, never position 0
    position_ids: np.ndarray  # int64 (B, L)
    example_idx: list[int]

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.input_ids.shape)  # type: ignore[return-value]


# ---- rendering ----------------------------------------------------------------------


def _has_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def _merge_roles(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """Join consecutive same-role messages and fold system text into the next user turn.

    Only used when a template refuses the conversation as is (templates such as
    Gemma's or Mistral's raise on two user turns in a row or on a system role).
    """
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [m for m in messages if m["role"] != "system"]
    out: list[dict[str, str]] = []
    for m in rest:
        if out and out[-1]["role"] == m["role"]:
            out[-1] = {"role": m["role"], "content": out[-1]["content"] + "\n\n" + m["content"]}
        else:
            out.append(dict(m))
    if system and out and out[0]["role"] == "user":
        out[0] = {"role": "user", "content": "\n\n".join([*system, out[0]["content"]])}
    elif system:
        out.insert(0, {"role": "user", "content": "\n\n".join(system)})
    return out


@dataclass(frozen=True)
class _Rendered:
    """Prompt-part ids (with the generation prompt), full-conversation ids, the index in
    ``full`` of the first token after the response text (None: unknown), and of the
    token that holds the template's last characters and the response's first ones
    together (None: the response starts on a token of its own)."""

    prompt: list[int]
    full: list[int]
    text_end: int | None
    straddles: int | None = None


def _render_template(tokenizer: Any, messages: list[dict[str, str]]) -> _Rendered:
    last_error: Exception | None = None
    for convo in (messages, _merge_roles(messages)):
        try:
            prompt = tokenizer.apply_chat_template(
                convo[:-1], add_generation_prompt=True, tokenize=False
            )
            full = tokenizer.apply_chat_template(convo, add_generation_prompt=False, tokenize=False)
        except Exception as exc:  # jinja raise_exception, template errors
            last_error = exc
            continue
        # Like apply_chat_template(tokenize=True) the template holds the specials, but
        # only its own markup may be special: text a message spells stays text.
        return _tokenize_rendered(tokenizer, convo, prompt, full)
    raise ValueError(f"the chat template refused the conversation: {last_error}")


def _tokenize_rendered(tokenizer: Any, convo: list[dict[str, str]], prompt: str, full: str
                       ) -> _Rendered:
    contents = [m["content"] for m in convo]
    prompt_spans = markup.content_spans(tokenizer, convo[:-1], prompt, True)
    full_spans = markup.content_spans(tokenizer, convo, full, False)
    prompt_ids, _ = markup.tokenize(tokenizer, prompt, prompt_spans, contents[:-1])
    full_ids, offsets = markup.tokenize(tokenizer, full, full_spans, contents)
    text_end = straddles = None
    if offsets is not None and full_spans:
        response_start, response_end = full_spans[-1]
        text_end = next((k for k, (a, _b) in enumerate(offsets) if a >= response_end),
                        len(full_ids))
        first = next((k for k, (_a, b) in enumerate(offsets) if b > response_start), None)
        if first is not None and offsets[first][0] < response_start:
            straddles = first
    return _Rendered(prompt_ids, full_ids, text_end, straddles)


def _render_plain(tokenizer: Any, messages: list[dict[str, str]]) -> _Rendered:
    parts = [
        FALLBACK_FORMAT.format(role=FALLBACK_ROLES.get(m["role"], m["role"].title()),
                               content=m["content"])
        for m in messages[:-1]
    ]
    prompt = FALLBACK_SEPARATOR.join([*parts, "Assistant: "])
    # Every character here is the user's text: none of it may become a special token.
    prompt_ids = _split_ids(tokenizer, prompt)
    full = _split_ids(tokenizer, prompt + messages[-1]["content"])
    eos = getattr(tokenizer, "eos_token_id", None)
    text_end = len(full)
    return _Rendered(prompt_ids, full + ([int(eos)] if eos is not None else []), text_end)


def _split_ids(tokenizer: Any, text: str) -> list[int]:
    """Ids of plain text with the tokenizer's own additions (bos), no parsed specials."""
    return list(tokenizer(text, add_special_tokens=True, split_special_tokens=True)["input_ids"])


def render(tokenizer: Any, messages: list[dict[str, str]], *, truncated: bool = False
           ) -> tuple[list[int], int, int]:
    """Tokenise a conversation whose last message is the rated assistant response.

    Returns ``(ids, start, end)``: the response region is ``ids[start:end]`` (the
    response and its end-of-turn token, or the response alone when ``truncated``);
    ``ids`` is already cut at ``end``. Raises ValueError when it cannot be rendered.
    """
    render_fn = _render_template if _has_template(tokenizer) else _render_plain
    got = render_fn(tokenizer, messages)
    prompt_ids, full_ids = got.prompt, got.full
    start = 0
    for a, b in zip(prompt_ids, full_ids, strict=False):
        if a != b:
            break
        start += 1
    start = max(start, 1)  # position 0 is never predicted
    if got.straddles is not None and start == got.straddles:
        # An answer that opens with whitespace merges with the generation prompt's own
        # newline into one token ("\n  "): trained, the model would learn to write the
        # template's newline after a prompt that already holds it. Start after it.
        start += 1
    specials = markup.special_ids(tokenizer)
    if truncated:
        # Nothing the template writes after the answer is a target: under templates
        # that add eos after the turn (Phi-3) the *last* special is not the turn's end.
        end = got.text_end if got.text_end is not None else next(
            (j for j in range(start, len(full_ids)) if full_ids[j] in specials),
            len(full_ids))
    else:
        end = next((j + 1 for j in range(len(full_ids) - 1, start - 1, -1)
                    if full_ids[j] in specials), len(full_ids))
    return full_ids[:end], start, end


# ---- encode -------------------------------------------------------------------------


def _conversation(example: Any, context: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    return [
        *({"role": m["role"], "content": m["content"]} for m in context),
        {"role": "user", "content": example.prompt},
        {"role": "assistant", "content": example.response},
    ]


def _drop_order(context: Sequence[dict[str, str]]) -> list[int]:
    """Indices of context messages in the order they are dropped: oldest history first,
    system messages last."""
    history = [i for i, m in enumerate(context) if m["role"] != "system"]
    system = [i for i, m in enumerate(context) if m["role"] == "system"]
    return history + system


def encode(tokenizer: Any, example: Any, max_seq_len: int, *, index: int | None = None
           ) -> Encoded | Skip:
    """Tokenise one example (``job.Example``) to fit ``max_seq_len``; see module docstring."""
    ex_id = str(getattr(example, "id", ""))
    context = list(getattr(example, "messages", ()) or ())
    order = _drop_order(context)
    cut = bool(getattr(example, "truncated", False))

    def attempt(drop: int) -> tuple[list[int], int, int]:
        gone = set(order[:drop])
        kept = [m for i, m in enumerate(context) if i not in gone]
        return render(tokenizer, _conversation(example, kept), truncated=cut)

    try:
        ids, start, end = attempt(0)
        drop = 0
        if len(ids) > max_seq_len and order:
            # Fewest drops that fit: length shrinks as messages go, so bisect (a handful
            # of renders instead of one per message).
            lo, hi = 1, len(order)
            best = attempt(hi)
            if len(best[0]) <= max_seq_len:
                while lo < hi:
                    mid = (lo + hi) // 2
                    got = attempt(mid)
                    if len(got[0]) <= max_seq_len:
                        hi, best = mid, got
                    else:
                        lo = mid + 1
            drop = hi
            ids, start, end = best
    except ValueError as exc:
        return Skip(f"example {ex_id}: {exc}", ex_id)

    notes: list[str] = []
    if drop:
        notes.append(f"dropped the {drop} oldest context message(s) to fit {max_seq_len} tokens")
    region = end - start
    if region <= 0:
        return Skip(f"example {ex_id}: the response has no tokens after the chat template", ex_id)
    truncated = cut
    if cut:
        notes.append("the response was cut off when captured: its end-of-turn token is not "
                     "trained")
    if len(ids) > max_seq_len:
        if start >= max_seq_len:
            return Skip(
                f"example {ex_id}: the prompt alone is {start} tokens, so no response token "
                f"fits in max_seq_len {max_seq_len}",
                ex_id,
            )
        notes.append(f"truncated the response from {region} to {max_seq_len - start} tokens")
        ids = ids[:max_seq_len]
        truncated = True

    kept = len(ids) - start
    lps = getattr(example, "behaviour_logprobs", None)
    aligned = None
    if lps is not None:
        if len(lps) == region:
            aligned = tuple(float(v) for v in lps[:kept])
        else:
            notes.append(f"ignored {len(lps)} behaviour log-probs: the response has {region} "
                         f"tokens")
    return Encoded(
        input_ids=tuple(int(i) for i in ids),
        response_start=start,
        example_id=ex_id,
        index=index,
        dropped_messages=drop,
        truncated=truncated,
        behaviour_logprobs=aligned,
        notes=tuple(notes),
    )


# ---- batching -----------------------------------------------------------------------


def collate(encoded: Sequence[Encoded], pad_id: int,
            example_idx: Sequence[int] | None = None) -> Batch:
    """Right-pad to the longest row. ``example_idx`` defaults to each row's ``index``
    (set by :func:`encode`) or its position in ``encoded``."""
    if not encoded:
        raise ValueError("collate needs at least one encoded example")
    rows, width = len(encoded), max(e.length for e in encoded)
    input_ids = np.full((rows, width), int(pad_id), dtype=np.int64)
    attention = np.zeros((rows, width), dtype=np.int64)
    response = np.zeros((rows, width), dtype=np.float32)
    for r, e in enumerate(encoded):
        n = e.length
        input_ids[r, :n] = e.input_ids
        attention[r, :n] = 1
        response[r, max(1, e.response_start):n] = 1.0
    positions = np.broadcast_to(np.arange(width, dtype=np.int64), (rows, width)).copy()
    if example_idx is None:
        example_idx = [e.index if e.index is not None else r for r, e in enumerate(encoded)]
    elif len(example_idx) != rows:
        raise ValueError("example_idx must have one entry per encoded example")
    return Batch(input_ids, attention, response, positions, [int(i) for i in example_idx])


def batches(encoded: Sequence[Encoded], batch_size: int, by_length: bool = True
            ) -> list[list[int]]:
    """Group positions of ``encoded`` into batches of ``batch_size``.

    ``by_length`` sorts by length first (stable, so ties keep input order): rows of
    similar length share a batch and padding stays small. Deterministic.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be 1 or more")
    order = list(range(len(encoded)))
    if by_length:
        order.sort(key=lambda i: encoded[i].length)
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


def padding_fraction(encoded: Sequence[Encoded], groups: Sequence[Sequence[int]]) -> float:
    """Share of padded cells over all batches (for logs and the batching test)."""
    cells = real = 0
    for g in groups:
        width = max(encoded[i].length for i in g)
        cells += width * len(g)
        real += sum(encoded[i].length for i in g)
    return 0.0 if cells == 0 else 1.0 - real / cells
