"""The base model into memory at the round's dtype without also holding its file.

``from_pretrained(dtype=float32)`` of a bf16 checkpoint maps every safetensors shard and
fills fp32 weights from it; the shards' pages stay resident until the last weight is
filled, so the load peaks at the fp32 weights plus the whole file: 18.29 GiB for the
Llama-3.2-3B shape (11.97 GiB of weights, 6.4 GB of bf16 shards), more than any training
pass of a lean round (13.6 GiB), and 1.09 GiB on SmolLM2-135M against 0.84 after.

So the model is loaded as stored (the shards mapped, nothing copied yet) and each weight
is then copied to the round's dtype one at a time, its file pages handed back as soon as
its copy exists (``madvise(MADV_DONTNEED)``, only on whole pages of that weight's own
bytes inside private mappings of the model's own files: a page read again comes back
from the file, and nothing writes to a loaded weight). The peak is the weights themselves
plus one tensor. Where the OS has no ``/proc/self/maps`` (macOS, Windows) the copies are
made the same way and the pages go back when the load ends, as before.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path
from typing import Any

MADV_DONTNEED = 4  # the same number on Linux for every architecture rltray runs on


def file_mappings(folder: Path) -> list[tuple[int, int]]:
    """(start, end) of this process's private mappings of the model's files (torch maps
    safetensors shards copy-on-write, ``rw-p``): files inside ``folder`` or what its
    links point at (a Hugging Face cache snapshot links each file to a blob outside
    it); empty where ``/proc/self/maps`` does not exist."""
    root = os.path.realpath(folder)
    linked = {os.path.realpath(p) for p in Path(folder).iterdir() if p.is_symlink()}
    spans: list[tuple[int, int]] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) < 6 or not parts[1].endswith("p"):
                    continue
                path = parts[5].strip()
                if path in linked or path.startswith(root + os.sep):
                    start, end = (int(x, 16) for x in parts[0].split("-"))
                    spans.append((start, end))
    except OSError:
        return []
    return spans


class PageReturner:
    """Hands back the pages of a tensor's bytes that lie inside the model's file mappings."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.spans = spans
        self.returned = 0  # bytes handed back, for the log and the tests
        self._madvise: Any = None
        if spans:
            libc = ctypes.CDLL(None, use_errno=True)
            self._madvise = libc.madvise
            self._madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            self._madvise.restype = ctypes.c_int

    def give_back(self, address: int, size: int) -> None:
        if self._madvise is None or size <= 0:
            return
        page = mmap.PAGESIZE
        first = (address + page - 1) // page * page  # whole pages only: a neighbour's
        last = (address + size) // page * page  # bytes on a shared page stay mapped
        for start, end in self.spans:
            lo, hi = max(first, start), min(last, end)
            if hi > lo and self._madvise(lo, hi - lo, MADV_DONTNEED) == 0:
                self.returned += hi - lo


def load_causal_lm(folder: Path, dtype: Any, *, trust: bool, revision: str | None,
                   matmul_dtype: Any = None) -> tuple[Any, int]:
    """``AutoModelForCausalLM`` from ``folder`` with every floating weight and buffer a
    copy in ``dtype`` (for fp32 the same values ``from_pretrained(dtype=dtype)`` gives:
    widening is exact), at the peak of the weights rather than the weights plus the
    file; and the bytes of file pages handed back on the way.

    ``matmul_dtype`` (bf16 for a CPU round under bf16 autocast): the weights of the
    linear layers inside the transformer blocks are kept in it instead. They are
    frozen and only ever read by matmuls, which autocast runs in that dtype, casting an
    fp32 weight again at every forward and backward (it caches casts only of weights
    that train): stored cast once, every matmul sees the very same values, the base
    holds half the bytes and the casts are gone. So is an output head not tied to the
    embeddings. Embeddings and norms keep ``dtype``: the residual stream stays fp32.
    """
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(folder), dtype="auto", local_files_only=True, trust_remote_code=trust,
        revision=revision)
    pages = PageReturner(file_mappings(folder))
    low = matmul_weights(model) if matmul_dtype not in (None, dtype) else set()
    with torch.no_grad():  # parameters() and buffers() each name a shared tensor once
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.is_floating_point():
                old = tensor.data
                to = matmul_dtype if id(tensor) in low else dtype
                tensor.data = old.to(to, copy=True)  # a copy even where the dtype matches
                pages.give_back(old.data_ptr(), old.nbytes)
    model.config.dtype = dtype
    return model, pages.returned


def matmul_weights(model: Any) -> set[int]:
    """``id`` of every weight only matmuls read: the linear layers' inside the transformer
    blocks (the ones LoRA may target: ``torch_setup.block_linear_modules``) and an output
    head's that is not tied to the input embeddings (a lookup reads those; a tied head's
    matmuls read a copy, ``torch_head``). A weight another module shares stays as it is."""
    from .torch_setup import block_linear_modules

    modules = dict(model.named_modules())
    paths = set(block_linear_modules(model, None))
    head = model.get_output_embeddings()
    paths |= {path for path, m in modules.items() if head is not None and m is head}
    inside = {id(modules[path].weight) for path in paths}
    outside = {id(w) for path, m in modules.items() if path not in paths
               for w in m.parameters(recurse=False)}
    return inside - outside
