"""The memory this machine has free now, the one reading every memory budget starts from.

The reference store (``reference_logits``) and the torch backend's choice to recompute
its decoder blocks (``torch_peft.TorchPeftBackend.recomputes``) size themselves from it,
so a round uses what the machine can spare instead of a constant fitted to one machine.
"""

from __future__ import annotations

#: Where the OS does not say (psutil missing or failing): a machine with 4 GiB available.
FALLBACK_AVAILABLE_BYTES = 4 * 2**30


def available_bytes() -> int:
    """Bytes available to a new allocation now (psutil's ``available``: free memory plus
    what the OS can reclaim from caches without swapping)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # psutil missing or the OS did not answer: a small machine's figure
        return FALLBACK_AVAILABLE_BYTES
