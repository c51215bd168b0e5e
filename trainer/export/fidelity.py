"""Does what llama.cpp will serve carry the adapter? Its log-prob shift against the adapter's.

Why: the merge can round a trained delta away and a wrong q/k row order puts it on
the wrong rows, and either way the published version behaves like the base while
everything reports success (issue 20). The one check that sees every such fault
is to load what was written with llama.cpp itself (llama-cpp-python, the engine
Ollama runs) and compare, on a few held-out chats, the change of each token's
log-probability against the base GGUF with the change the adapter makes.

The adapter's own change is measured in the same engine: the base GGUF plus our
F32 GGUF LoRA adapter (its factors exactly as trained, no rounding of weights).
That keeps the check cheap (no second model in PyTorch, so it runs for a 30B
model as for a 135M one) and compares like with like; that the adapter file
itself puts the delta on the right rows is pinned against PEFT by the tests
(``tests/trainer/export/test_export_llamacpp.py``) and by ``bench/export_fidelity.py``,
which use :func:`llama_logits` and :func:`cosine` from here.

The figure is the **served share** ``<s, r> / ||r||²`` over all token log-prob
shifts (``s`` served, ``r`` reference): 1 when the served model moves exactly as
the adapter does, 0 when it does not move along it. llama.cpp's quantized
activations add noise that does not depend on the delta's size, but it is not
aligned with ``r``, so the share stays near 0 or 1 while the cosine drops; a
version is refused below :data:`MIN_SERVED_SHARE`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MIN_SERVED_SHARE = 0.5

#: Held-out chats: never rated, so never trained on; short, so the check takes seconds.
HELD_OUT: tuple[tuple[str, str], ...] = (
    ("Write a Python function that reverses a string.",
     "def reverse(text):\n    return text[::-1]"),
    ("How do I list the files in a folder from a shell?",
     "Use `ls` to list them; `ls -la` also shows hidden files and details."),
    ("Explain what a race condition is in one sentence.",
     "A race condition is a bug where the result depends on the timing of threads."),
    ("Fix this: for i in range(10) print(i)",
     "A colon is missing:\n\nfor i in range(10):\n    print(i)"),
)  # fmt: skip


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two arrays taken as flat vectors."""
    a, b = np.ravel(a), np.ravel(b)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def share(served: np.ndarray, reference: np.ndarray) -> float:
    """``<served, reference> / ||reference||²``: how much of ``reference`` ``served`` carries."""
    s, r = np.ravel(served), np.ravel(reference)
    return float(s @ r / (r @ r))


def _llama(model: Path, lora: Path | None, n_ctx: int) -> Any:
    import llama_cpp

    return llama_cpp.Llama(
        model_path=str(model), lora_path=str(lora) if lora else None, logits_all=True,
        n_ctx=n_ctx, n_threads=1, verbose=False,
    )


def llama_logits(
    model: Path, lora: Path | None = None, *, text: str
) -> tuple[list[int], np.ndarray]:
    """llama.cpp's logits (float64) at every position of ``text``, one thread (repeatable)."""
    llm = _llama(model, lora, 256)
    tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
    llm.eval(tokens)
    scores = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    llm.close()
    return tokens, scores


def render_chats(template: str | None, chats: Sequence[tuple[str, str]]) -> list[str]:
    """Each (prompt, answer) as the model's chat template renders it; plain text without one."""
    out = []
    for prompt, answer in chats:
        messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
        text = None
        if template:
            try:
                import jinja2

                text = jinja2.Environment().from_string(template).render(
                    messages=messages, add_generation_prompt=False, bos_token="", eos_token=""
                )
            except Exception:  # a template we cannot render: plain text
                text = None
        out.append(text or f"User: {prompt}\nAssistant: {answer}\n")
    return out


def token_logprobs(model: Path, texts: Sequence[str], lora: Path | None = None) -> np.ndarray:
    """The log-probability llama.cpp gives each next token of every text, concatenated."""
    llm = _llama(model, lora, 512)
    out = []
    try:
        for text in texts:
            tokens = llm.tokenize(text.encode(), add_bos=True, special=True)[:512]
            llm.reset()
            llm.eval(tokens)
            logits = np.array(llm.scores[: len(tokens) - 1], dtype=np.float64)
            top = logits.max(axis=1, keepdims=True)
            logz = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
            out.append(logits[np.arange(len(tokens) - 1), tokens[1:]] - logz)
    finally:
        llm.close()
    return np.concatenate(out)


@dataclass
class ServedCheck:
    """What the check found, stored with the publication."""

    share: float | None  # served share (1: carries the adapter's whole shift)
    cosine: float | None
    reference_norm: float | None  # size of the adapter's own shift (sum over tokens)
    skipped: str | None = None  # why nothing was checked

    @property
    def ok(self) -> bool:
        return self.skipped is not None or (self.share or 0.0) >= MIN_SERVED_SHARE

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}

    def reason(self) -> str:
        """One sentence for a refused version."""
        return (
            f"llama.cpp's served model carries {100 * (self.share or 0.0):.0f}% of the adapter's "
            f"log-prob shift on held-out chats (needs {100 * MIN_SERVED_SHARE:.0f}%)"
        )


def llama_cpp_missing() -> str | None:
    """Why the check cannot run here (one sentence), or None when it can."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return ("llama-cpp-python is not installed in the trainer's environment, so what "
                "Ollama will serve was not checked (pip install llama-cpp-python)")
    return None


def check_served(
    base_gguf: Path,
    reference_lora: Path,
    served: Path,
    *,
    chats: Sequence[tuple[str, str]] = HELD_OUT,
) -> ServedCheck:
    """Compare ``served`` (a merged GGUF) with ``base_gguf`` + ``reference_lora`` (F32)."""
    missing = llama_cpp_missing()
    if missing:
        return ServedCheck(None, None, None, skipped=missing)
    from ..gguf_base import gguf_chat_template

    texts = render_chats(gguf_chat_template(base_gguf), chats)
    base = token_logprobs(base_gguf, texts)
    reference = token_logprobs(base_gguf, texts, lora=reference_lora) - base
    shift = token_logprobs(served, texts) - base
    norm = float(np.linalg.norm(reference))
    if norm == 0.0:
        return ServedCheck(None, None, 0.0, skipped="the adapter does not change llama.cpp's "
                           "log-probs at all on the held-out chats")
    return ServedCheck(share(shift, reference), cosine(shift, reference), norm)
