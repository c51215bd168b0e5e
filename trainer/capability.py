"""Capability kept: the NLL of the base model's own greedy answers, on everyday prompts and
on the round's own.

Why this check exists: drift caps bound how far the model moves and the
preference test whether it moved the right way, but neither sees a model that
learned the preference by forgetting how to answer. On SmolLM2 ``aggressive``
was accepted with 6% broken answers and the base's own answers +25.6% less
likely per token (bench/README.md "learning_smollm2.py", which calls this the
*reference NLL*).

How: at round start the base model (LoRA off) answers two sets of prompts
greedily, ``hyper.ref_tokens`` tokens at most each, and their per-token NLL under
the base and under the parent is kept in the round state (and so in a checkpoint:
a resumed round measures against the very same answers). At the end the new
adapter's NLL on them gives new / base - 1 for each set (``evaluate.gate``):

* **Everyday prompts** (:data:`GENERAL_PROMPTS`, ``hyper.general_prompts`` of
  them; ``general_nll_*``), requests unlike a coding agent's, where no coding
  style the user asks for applies: a rise here is capability lost, capped by
  ``hyper.nll_cap`` (+5%).
* **The round's own prompts** (``hyper.ref_prompts``, the held-out turns' first,
  as the trainer renders them, shortest first; ``ref_nll_*``): the base's answers
  there lack the style the user asked for, so the round is *meant* to make them
  less likely. On ``comment`` (bench/capability_split.py, bench/README.md) a
  round closing 83% of the gap read +14.5% here and +3.2% on the everyday
  prompts; the references *with* the preference moved +0.7%, those without
  +11.6%. So this set gets the looser ``hyper.rated_nll_cap`` (+20%), which still
  rejects a model that forgot how to answer the user's kind of request
  (``aggressive`` +25.6% on the bench's references). Without the everyday set (an
  old checkpoint, ``general_prompts`` 0) the round's prompts are held to
  ``nll_cap`` as before.

Greedy answers, not rated ones: they are what the base model does well by its
own measure, so a rise in their NLL is capability lost, whatever the user rated.

Broken answers, the third part: the NLL can miss a model that still scores the
base's answers well but writes no code any more (``aggressive`` on an independent
bench: 20% of answers without code, accepted). So at the end the new adapter
answers the round's prompts greedily too, and the gate counts answers that are
:func:`degenerate` — empty, looping, or without the code the base's answer to that
prompt had — against the base's own (``degen_cap``). Eight prompts see a large
rise (one answer is 12.5 points), not a small one. Everything here runs through
the ``Backend`` door (``greedy`` and ``logprobs``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rltray.trainer import base_answers, data

#: End-of-turn tokens of the common chat templates: generation stops at any of them
#: that the tokenizer knows, as well as at its ``eos_token_id``.
TURN_ENDS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")


#: Everyday requests unlike a coding agent's: the capability no coding preference should
#: touch. Fixed (the gate's figures are comparable across rounds only on the same text),
#: short (the base answers each greedily at round start), and varied in kind.
GENERAL_PROMPTS = (
    "Explain in two sentences why the sky is blue.",
    "Give three tips for sleeping better.",
    "What is the difference between weather and climate?",
    "Write a short, friendly email declining a meeting invitation.",
    "Summarise the plot of Romeo and Juliet in three sentences.",
    "How do vaccines train the immune system?",
    "List four countries in South America and their capitals.",
    "What should I pack for a weekend hiking trip?",
    "A train travels 120 km in 1.5 hours. What is its average speed?",
    "Describe the water cycle for a ten-year-old.",
    "Suggest a name for a small bakery and explain the choice.",
    "Why do leaves change colour in autumn?",
    "What are the main causes of inflation?",
    "Translate 'good morning, how are you?' into French and Spanish.",
    "Give me a simple recipe for pancakes.",
    "What is a black hole?",
)


_FENCE = re.compile(r"^\s*(```|~~~)", re.MULTILINE)


def looping(text: str, n: int = 6, share: float = 0.5) -> bool:
    """Half or more of the word n-grams are repeats: the model is stuck in a loop."""
    words = text.split()
    grams = [tuple(words[i : i + n]) for i in range(max(0, len(words) - n + 1))]
    return len(grams) >= 8 and 1 - len(set(grams)) / len(grams) >= share


def has_code(text: str) -> bool:
    """A fenced code block (the form coding agents and instruct models write code in)."""
    return bool(_FENCE.search(text))


def degenerate(answer: str, base_answer: str) -> bool:
    """Empty, looping, or without the code the base model's answer to the prompt had."""
    if not answer.strip() or looping(answer):
        return True
    return has_code(base_answer) and not has_code(answer)


def stop_ids(tokenizer: Any) -> set[int]:
    """Token ids that end an answer: the tokenizer's eos and any known end-of-turn token."""
    ids: set[int] = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    ids.update(int(vocab[t]) for t in TURN_ENDS if t in vocab)
    return ids


def choose_prompts(
    held_enc: dict[int, Any], held_kept: Sequence[int], enc: dict[int, Any],
    kept: Sequence[int], limit: int,
) -> list[list[int]]:
    """Prompt token ids of up to ``limit`` turns: held-out ones, else training ones.

    The prompt is the encoded turn up to its response (``data.encode``'s own
    rendering: the template's generation prompt included), so the base answers
    exactly where the rated answer began. Shortest first (ties by position):
    any prompt of the user's serves, and short ones keep the check cheap.
    """
    pool = [held_enc[i] for i in held_kept] or [enc[i] for i in kept]
    prompts = sorted((e.input_ids[: e.response_start] for e in pool), key=len)
    unique: list[list[int]] = []
    for p in prompts:
        if list(p) not in unique:
            unique.append(list(p))
    return unique[: max(0, int(limit))]


def reference_batch(prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]],
                    pad_id: int) -> data.Batch:
    """One right-padded batch of prompt + answer, the answer as the response."""
    encoded = [
        data.Encoded(input_ids=tuple(p) + tuple(a), response_start=len(p))
        for p, a in zip(prompts, answers, strict=True)
    ]
    return data.collate(encoded, pad_id, example_idx=list(range(len(encoded))))


def mean_nll(backend: Any, batch: data.Batch, *, adapter: bool) -> float:
    """Token-weighted mean NLL (nats per token) of the answers in ``batch``."""
    lp = np.asarray(backend.logprobs(batch, adapter=adapter), dtype=np.float64)
    mask = np.asarray(batch.response_mask[:, 1:], dtype=np.float64)
    count = float(mask.sum())
    return float(-(lp * mask).sum() / count) if count else float("nan")


def general_prompts(tokenizer: Any, limit: int) -> list[list[int]]:
    """Token ids of the first ``limit`` of :data:`GENERAL_PROMPTS`, rendered as a turn's
    prompt is (``data.render``: the chat template with its generation prompt)."""
    out = []
    for text in GENERAL_PROMPTS[: max(0, int(limit))]:
        try:
            turn = [{"role": "user", "content": text}, {"role": "assistant", "content": "."}]
            ids, start, _ = data.render(tokenizer, turn)
        except ValueError:  # a template that refuses a lone user turn: that prompt is left out
            continue
        out.append(list(ids[:start]))
    return out


def _nll_of(backend: Any, prompts: list[list[int]], answers: list[list[int]], pad_id: int,
            has_parent: bool) -> dict[str, Any]:
    batch = reference_batch(prompts, answers, pad_id)
    base = mean_nll(backend, batch, adapter=False)
    parent = mean_nll(backend, batch, adapter=True) if has_parent else base
    return {"prompts": prompts, "answers": answers, "nll_base": base, "nll_parent": parent}


#: The round's prompts and the everyday ones share one greedy batch unless padding both
#: to the longer prompt would make the batch's padded size (rows x (width + answer
#: tokens), what its key/value cache holds) more than this many times the two batches'
#: apart: long round prompts would make eight short everyday rows as costly as long ones.
MERGE_PADDING = 1.25


def one_batch(prompts: Sequence[Sequence[int]], everyday: Sequence[Sequence[int]],
              new_tokens: int) -> bool:
    """Whether both sets are answered in one greedy batch (:data:`MERGE_PADDING`)."""
    if not prompts or not everyday:
        return True
    wide, short = max(len(p) for p in prompts), max(len(p) for p in everyday)
    together = (len(prompts) + len(everyday)) * (max(wide, short) + new_tokens)
    apart = len(prompts) * (wide + new_tokens) + len(everyday) * (short + new_tokens)
    return together <= MERGE_PADDING * apart


def round_start(backend: Any, prompts: list[list[int]], hyper: Any, pad_id: int, *,
                has_parent: bool, keep_answers: bool = False) -> dict[str, Any]:
    """Greedy base answers and their NLL under the base and the parent (the round state):
    to ``prompts`` (the round's own) and, under ``"general"``, to
    ``hyper.general_prompts`` of :data:`GENERAL_PROMPTS`.

    Both sets are answered in one greedy batch where :func:`one_batch` allows: a
    decoding step reads every weight once whatever the rows, so on a GPU 16 rows cost
    what 8 do and on a CPU less than two batches of 8 (a SmolLM2 round's start on one
    CPU thread went from 79.4 to 54.5 s; a 0.5B round on an H200 had spent 60% of its
    ``train()`` in the check's three generations; bench/README.md).

    ``keep_answers``: a set of prompts the base answered in an earlier round comes from
    :mod:`.base_answers`, and the sets decoded here are kept there; ``answers_kept``
    counts the sets it served.

    Returns ``{}`` when there is nothing to measure (no prompt, ``ref_prompts`` 0).
    """
    if not prompts:
        return {}
    t0 = time.monotonic()
    everyday = general_prompts(backend.tokenizer, int(getattr(hyper, "general_prompts", 0)))
    tokens, stop = int(hyper.ref_tokens), stop_ids(backend.tokenizer)
    cache = base_answers.for_round(backend, tokens, stop) if keep_answers else None
    rated, general, kept = _base_answers(backend, prompts, everyday, tokens, stop, cache)
    state = _nll_of(backend, prompts, rated, pad_id, has_parent)
    if everyday:
        state["general"] = _nll_of(backend, everyday, general, pad_id, has_parent)
    state["answers_kept"] = kept
    state["seconds"] = time.monotonic() - t0
    return state


def _base_answers(backend: Any, prompts: list[list[int]], everyday: list[list[int]],
                  tokens: int, stop: set[int], cache: Any) -> tuple[list, list, int]:
    """The base's greedy answers to the round's prompts and the everyday ones, and how
    many of the two sets ``cache`` served: the rest are decoded (in one batch where
    :func:`one_batch` allows and neither was kept)."""
    rated = cache.get(prompts) if cache is not None else None
    general = (cache.get(everyday) if cache is not None else None) if everyday else []
    if rated is None and general is None and one_batch(prompts, everyday, tokens):
        both = backend.greedy([*prompts, *everyday], tokens, stop)
        rated, general = both[: len(prompts)], both[len(prompts):]
        fresh = [(prompts, rated), (everyday, general)]
    else:
        fresh = []
        if rated is None:
            rated = backend.greedy(prompts, tokens, stop)
            fresh.append((prompts, rated))
        if general is None:
            general = backend.greedy(everyday, tokens, stop)
            fresh.append((everyday, general))
    if cache is not None:
        for asked, answered in fresh:
            cache.put(asked, answered)
    return rated, general, (2 if everyday else 1) - len(fresh)


def finish(backend: Any, state: dict[str, Any], pad_id: int, hyper: Any = None,
           check: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """The new adapter's NLL on the round-start answers: the round's prompts
    (``ref_nll_*``) and the everyday ones (``general_nll_*``), and with
    ``hyper.degen_cap`` set, its own greedy answers' broken count (``ref_degenerate_*``).

    ``check`` runs before each of the three parts: it raises to abandon the rest (a
    round asked to pause)."""
    if not state:
        return {}
    t0 = time.monotonic()
    check()
    out = _scored("ref", backend, state, pad_id)
    out["ref_tokens"] = int(sum(len(a) for a in state["answers"]))
    if state.get("general"):
        check()
        out.update(_scored("general", backend, state["general"], pad_id))
    if getattr(hyper, "degen_cap", None) is not None:
        check()
        out.update(broken_answers(backend, state, int(hyper.ref_tokens)))
    out["ref_seconds"] = round(float(state.get("seconds", 0.0)) + time.monotonic() - t0, 3)
    out["ref_answers_kept"] = int(state.get("answers_kept", 0))  # sets not decoded again
    return out


def _scored(prefix: str, backend: Any, state: dict[str, Any], pad_id: int) -> dict[str, Any]:
    batch = reference_batch(state["prompts"], state["answers"], pad_id)
    new = mean_nll(backend, batch, adapter=True)
    base, parent = float(state["nll_base"]), float(state["nll_parent"])
    return {
        f"{prefix}_nll_base": base,
        f"{prefix}_nll_parent": parent,
        f"{prefix}_nll_new": new,
        f"{prefix}_nll_increase": new / base - 1.0 if base > 0 else None,
        f"{prefix}_prompts": len(state["prompts"]),
    }


def broken_answers(backend: Any, state: dict[str, Any], max_new_tokens: int) -> dict[str, Any]:
    """How many of the base's and of the new adapter's greedy answers are degenerate."""
    stop = stop_ids(backend.tokenizer)
    mine = backend.greedy(state["prompts"], max_new_tokens, stop, adapter=True)

    def text(ids: Sequence[int]) -> str:
        return str(backend.tokenizer.decode(list(ids), skip_special_tokens=True))

    theirs = [text(a) for a in state["answers"]]
    base = sum(degenerate(b, b) for b in theirs)
    new = sum(degenerate(text(m), b) for m, b in zip(mine, theirs, strict=True))
    return {"ref_degenerate_base": int(base), "ref_degenerate_new": int(new)}
