"""Freed training memory back to the OS on Linux, for the rounds whose memory is tight.

glibc's malloc serves every allocation below its mmap threshold from one growing heap,
and the threshold climbs (up to 32 MiB) each time a mapped block is freed, so after the
first few steps nearly all of a CPU training pass's tensors live in that heap. A pass
interleaves what it keeps for the backward with short-lived temporaries; when the
pass ends, the holes between them are too small for the next pass's tensors and the
heap grows instead. On SmolLM2-135M (one 362-token sequence, fp32, one thread) a step
keeps ~430 MiB of activations yet the process grows ~830 MiB, and the round's RSS ends
~530 MiB above what it holds (``bench/README.md``, "A lean round: freed memory back to the OS").

:func:`return_freed_memory` fixes the threshold at 64 KiB, so every tensor of 64 KiB or
more is its own mapping that goes back to the OS when freed: no holes, a round's RSS
follows what it holds. The price is the page faults of fresh mappings, ~35-50% on a
one-thread SmolLM2 step, which is why only a round the memory budget calls tight asks
for it (the torch backend does when it recomputes its blocks), never a roomy one.

macOS's and Windows' allocators already hand large blocks straight to the OS, and musl
has no such heap: there it does nothing. Written with ctypes because no maintained
Python package exposes ``mallopt``; the call is two lines and cannot corrupt anything
(glibc validates the value and answers 0 when it refuses).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: ``M_MMAP_THRESHOLD`` in glibc's ``malloc.h``.
M_MMAP_THRESHOLD = -3
#: Allocations from this size on get their own mapping once :func:`return_freed_memory`
#: ran: SmolLM2's smallest fragmenting activations are ~830 KiB (one sequence's hidden
#: states); a 256 KiB threshold measured the same RSS as 64 KiB, 1 MiB kept the holes.
LEAN_MMAP_THRESHOLD = 64 * 1024

_applied = False


def _glibc() -> ctypes.CDLL | None:
    """This process's glibc, or ``None`` on any other C library or OS."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  (only glibc has it)
    except (OSError, AttributeError):
        return None
    return libc


def return_freed_memory() -> bool:
    """From now on, hand every freed tensor of :data:`LEAN_MMAP_THRESHOLD` or more back
    to the OS. Returns whether it is in effect (glibc accepted it now or earlier)."""
    global _applied
    if _applied:
        return True
    libc = _glibc()
    if libc is None:
        return False
    _applied = bool(libc.mallopt(M_MMAP_THRESHOLD, LEAN_MMAP_THRESHOLD))
    return _applied


def applied() -> bool:
    """Whether :func:`return_freed_memory` is in effect in this process."""
    return _applied
