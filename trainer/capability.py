"""Capability kept: the NLL of the base model's own greedy answers to held-out prompts.

Why this check exists: drift caps bound how far the model moves and the
preference test whether it moved the right way, but neither sees a model that
learned the preference by forgetting how to answer. On SmolLM2 ``aggressive``
was accepted with 6% broken answers and the base's own answers +25.6% less
likely per token (bench/README.md "learning_smollm2.py", which calls this the
*reference NLL*); the gate now measures the same figure on the user's prompts.

How: at round start the base model (LoRA off) answers up to
``hyper.ref_prompts`` of the round's prompts greedily, ``hyper.ref_tokens``
tokens at most — the held-out turns' prompts first, as the trainer renders them
(chat template, context), shortest first so the check stays cheap; the training
turns' when nothing is held out. Those answers and their per-token NLL under the
base and under the parent are kept in the round state (and so in a checkpoint:
a resumed round measures against the very same answers). At the end the new
adapter's NLL on them gives ``ref_nll_increase`` = new / base - 1, which the
gate caps with ``hyper.nll_cap`` (``evaluate.gate``).

Greedy answers, not rated ones: they are what the base model does well by its
own measure, so a rise in their NLL is capability lost, whatever the user rated.

Broken answers, the second half: the NLL reads a style the user asked for as
capability lost too (issue 20: on ``comment`` the NLL rose +7% on references
*without* the preference, against -0.1% on those with it), and it can miss a model
that still scores the base's answers well but writes no code any more
(``aggressive`` on an independent bench: 20% of answers without code, accepted).
So at the end the new adapter answers the same prompts greedily too, and the gate
counts answers that are :func:`degenerate` — empty, looping, or without the code
the base's answer to that prompt had — against the base's own (``degen_cap``).
Eight prompts see a large rise (one answer is 12.5 points), not a small one.
Everything here runs through the ``Backend`` door (``greedy`` and ``logprobs``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from rltray.trainer import data

#: End-of-turn tokens of the common chat templates: generation stops at any of them
#: that the tokenizer knows, as well as at its ``eos_token_id``.
TURN_ENDS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")


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


def round_start(backend: Any, prompts: list[list[int]], hyper: Any, pad_id: int, *,
                has_parent: bool) -> dict[str, Any]:
    """Greedy base answers and their NLL under the base and the parent (the round state).

    Returns ``{}`` when there is nothing to measure (no prompt, ``ref_prompts`` 0).
    """
    if not prompts:
        return {}
    t0 = time.monotonic()
    stop = stop_ids(backend.tokenizer)
    answers = backend.greedy(prompts, int(hyper.ref_tokens), stop)
    batch = reference_batch(prompts, answers, pad_id)
    base = mean_nll(backend, batch, adapter=False)
    parent = mean_nll(backend, batch, adapter=True) if has_parent else base
    return {
        "prompts": prompts, "answers": answers, "nll_base": base, "nll_parent": parent,
        "seconds": time.monotonic() - t0,
    }  # fmt: skip


def finish(backend: Any, state: dict[str, Any], pad_id: int, hyper: Any = None
           ) -> dict[str, Any]:
    """The new adapter's NLL on the round-start answers (the gate's ``ref_nll_*``), and
    with ``hyper.degen_cap`` set, its own greedy answers' broken count (``ref_degenerate_*``)."""
    if not state:
        return {}
    t0 = time.monotonic()
    batch = reference_batch(state["prompts"], state["answers"], pad_id)
    new = mean_nll(backend, batch, adapter=True)
    base, parent = float(state["nll_base"]), float(state["nll_parent"])
    out = {
        "ref_nll_base": base,
        "ref_nll_parent": parent,
        "ref_nll_new": new,
        "ref_nll_increase": new / base - 1.0 if base > 0 else None,
        "ref_prompts": len(state["prompts"]),
        "ref_tokens": int(sum(len(a) for a in state["answers"])),
    }
    if getattr(hyper, "degen_cap", None) is not None:
        out.update(broken_answers(backend, state, int(hyper.ref_tokens)))
    out["ref_seconds"] = round(float(state.get("seconds", 0.0)) + time.monotonic() - t0, 3)
    return out


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
