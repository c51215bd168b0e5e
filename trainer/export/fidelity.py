"""Does what llama.cpp will serve carry the adapter? Checked before a version is published.

Why: the merge can round a trained delta away and a wrong q/k row order or tensor
name puts it on the wrong rows; either way the published version behaves like
the base while everything reports success (issue 20). Two figures, both stored
with the publication:

* **delivered** (weight space, exact, on the real file's bytes): per merged tensor
  ``<Q(w+d) - w, d> / ||d||²`` (:mod:`.merge`); this is what sees rounding.
* **served** (function space, llama.cpp itself, the engine Ollama runs): on a few
  held-out chats, the change of every token's log-probability that the merged
  weights make, against the change the adapter makes (llama.cpp's base GGUF plus
  our F32 GGUF LoRA: the factors exactly as trained). The figure is the share
  ``<s, r> / ||r||²`` (1: moves exactly as the adapter; 0: not along it) and the cosine.

Why the served check uses the delta amplified (``amplification``, so that
``||k d|| / ||w|| = PROBE_SIZE`` over the merged tensors) in a probe file with the
same stored types: at trained size llama.cpp's CPU shift is mostly rounding noise
of its quantized activations, independent of the delta's size. Measured on
SmolLM2 (Q8_0 blocks, median |d| 1e-4, every 3rd block, 240 tokens): the shift
of base + adapter had norm 1.82 where 30x the adapter gave 30 x 0.186, so at k = 1
even a faithful merge scored share 0.42 / cosine 0.34 and a merge that rounded
everything away 0.10 / 0.08; at k = 30 the faithful merge scores 0.98 / 0.93. So
the served check answers "does the merged file move llama.cpp as llama.cpp applying
the adapter does" (the q/k row order both share is pinned against PEFT by
``tests/trainer/export/test_export_llamacpp.py`` and per architecture by
``test_export_qk_rows.py``), the delivered share answers "did rounding keep the
delta", and the real file is loaded and scored too. ``bench/export_fidelity.py`` and
the tests use :func:`llama_logits` and :func:`cosine` from here as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .merge import DELIVERED_FLOOR

if TYPE_CHECKING:
    from .merge import MergeReport

MIN_SERVED_SHARE = 0.8
MIN_COSINE = 0.8
PROBE_SIZE = 0.1  # ||k d|| / ||w|| of the amplified probe

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

    share: float | None  # served share of the amplified probe (1: all of the adapter's shift)
    cosine: float | None
    reference_norm: float | None  # size of the (amplified) adapter's own shift
    amplification: float | None = None
    delivered_min: float | None = None  # smallest delivered share of the real file
    skipped: str | None = None  # why nothing was checked

    @property
    def ok(self) -> bool:
        if self.skipped is not None:
            return True
        return ((self.share or 0.0) >= MIN_SERVED_SHARE and (self.cosine or 0.0) >= MIN_COSINE
                and (self.delivered_min is None or self.delivered_min >= DELIVERED_FLOOR))

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}

    def reason(self) -> str:
        """One sentence for a refused version."""
        if self.delivered_min is not None and self.delivered_min < DELIVERED_FLOOR:
            return (f"one merged layer keeps only {100 * self.delivered_min:.0f}% of its change "
                    "after rounding")
        return (
            f"in llama.cpp the merged weights move the held-out chats' log-probs "
            f"{100 * (self.share or 0.0):.0f}% as far as the adapter does (cosine "
            f"{self.cosine or 0.0:.2f}; needs {100 * MIN_SERVED_SHARE:.0f}% and {MIN_COSINE})"
        )


def llama_cpp_missing() -> str | None:
    """Why the check cannot run here (one sentence), or None when it can."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return ("llama-cpp-python is not installed in the trainer's environment, so what "
                "Ollama will serve was not checked (pip install llama-cpp-python)")
    return None


def amplification(report: MergeReport) -> float:
    """The factor that makes the merged delta :data:`PROBE_SIZE` of the weights."""
    size = report.relative_size()
    return max(1.0, PROBE_SIZE / size) if size > 0 else 1.0


def check_served(
    base_gguf: Path,
    adapter_dir: Path,
    served: Path,
    report: MergeReport,
    workdir: Path,
    *,
    out_type: str = "q8_0",
    chats: Sequence[tuple[str, str]] = HELD_OUT,
) -> ServedCheck:
    """Check the merged file ``served`` (written by ``report``) against the adapter."""
    import gguf

    from ..gguf_base import gguf_chat_template
    from . import gguf_adapter, merge

    delivered = report.delivered()
    low = delivered["min"] if delivered else None
    missing = llama_cpp_missing()
    if missing:
        return ServedCheck(None, None, None, delivered_min=low, skipped=missing)
    texts = render_chats(gguf_chat_template(base_gguf), chats)
    try:
        base = token_logprobs(base_gguf, texts)
    except (ValueError, RuntimeError, OSError) as exc:  # this llama.cpp cannot run the base
        return ServedCheck(None, None, None, delivered_min=low, skipped=(
            f"llama-cpp-python cannot run the base model here ({exc}), so what Ollama will "
            "serve was not checked"))
    if not np.isfinite(token_logprobs(served, texts)).all():  # the base ran: so must this
        return ServedCheck(0.0, 0.0, None, delivered_min=low)
    k = amplification(report)
    arch = gguf_adapter.ArchInfo.from_gguf(gguf.GGUFReader(base_gguf))
    lora = gguf_adapter.export(adapter_dir, workdir / "probe-adapter.gguf", arch_info=arch,
                               scale=k)
    probe = merge.merge(base_gguf, adapter_dir, workdir / "probe.gguf", out_type=out_type,
                        delta_scale=k, types=report.stored)
    try:
        reference = token_logprobs(base_gguf, texts, lora=lora) - base
        shift = token_logprobs(probe.out, texts) - base
    finally:
        lora.unlink(missing_ok=True)
        probe.out.unlink(missing_ok=True)
    norm = float(np.linalg.norm(reference))
    if norm == 0.0:
        return ServedCheck(None, None, 0.0, k, low, skipped="the adapter does not change "
                           "llama.cpp's log-probs at all on the held-out chats")
    return ServedCheck(share(shift, reference), cosine(shift, reference), norm, k, low)
