"""Print the pip arguments for the training extras this machine can use (nothing if none).

`make run` calls it so a user gets training where it can work without pulling
gigabytes where it cannot: MLX on Apple Silicon; the torch stack elsewhere when
there is memory for at least a small model. Standard library only (it runs
before anything else is installed); the reason goes to stderr.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

MIN_RAM_GIB = 8  # a 0.5B model, its LoRA and optimizer state fit comfortably
TORCH_PIN = "torch==2.13.0"  # the CPU build; CUDA users point training.python elsewhere
# No training stack installs on an x86_64 Mac (PyTorch's macOS x86_64 wheels end at 2.2.2,
# MLX is Apple Silicon only): said here instead of pip's raw error and "training extras
# failed" (issue 23 item 3). The same sentences as app/training/trainerenv/plan.py.
INTEL_MAC = (
    "PyTorch publishes no wheels for Intel Macs after 2.2.2 (rltray needs torch 2.13.0) and "
    "MLX needs Apple Silicon, so this Mac cannot train; rltray still captures and rates turns."
)
ROSETTA = (
    "This Python runs as x86_64 under Rosetta, where neither torch 2.13.0 nor MLX installs; "
    "use an arm64 Python (python.org's installer, or Homebrew's in /opt/homebrew) to train "
    "with MLX on this Apple Silicon Mac."
)


def total_ram_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def under_rosetta() -> bool:
    """True when this Python is x86_64 code translated by Rosetta on Apple Silicon."""
    try:
        done = subprocess.run(["sysctl", "-n", "sysctl.proc_translated"],
                              capture_output=True, text=True, timeout=5)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.strip() == "1"


def choose(
    plat: str = sys.platform, machine: str | None = None, translated: bool | None = None
) -> tuple[list[str], str]:
    """(pip arguments, why) for this machine; the parameters default to this machine's."""
    machine = (machine or platform.machine()).lower()
    if plat == "darwin":
        if machine == "arm64":
            return [".[mlx]"], "Apple Silicon: the MLX backend"
        return [], ROSETTA if (under_rosetta() if translated is None else translated) else INTEL_MAC
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
