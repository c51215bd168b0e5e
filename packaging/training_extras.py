"""Print the pip arguments for the training extras this machine can use (nothing if none).

`make run` calls it so a user gets training where it can work without pulling
gigabytes where it cannot: MLX on Apple Silicon; the torch stack elsewhere when
there is memory for at least a small model. Standard library only (it runs
before anything else is installed); the reason goes to stderr.
"""

from __future__ import annotations

import os
import platform
import sys

MIN_RAM_GIB = 8  # a 0.5B model, its LoRA and optimizer state fit comfortably
TORCH_PIN = "torch==2.13.0"  # the CPU build; CUDA users point training.python elsewhere


def total_ram_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def choose() -> tuple[list[str], str]:
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return [".[mlx]"], "Apple Silicon: the MLX backend"
    ram = total_ram_gib()
    if ram is not None and ram < MIN_RAM_GIB:
        return [], f"{ram:.0f} GiB of memory is too little to train; skipping training extras"
    return [TORCH_PIN, "-e", ".[torch]", TORCH_PIN], "the PyTorch backend (CPU build)"


def main() -> int:
    args, why = choose()
    print(f"training extras: {why}", file=sys.stderr)
    print(" ".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
