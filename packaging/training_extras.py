"""Print the pip arguments for the training extras this machine can use (nothing if none).

`make run` calls it so a user gets training where it can work without pulling
gigabytes where it cannot: MLX on Apple Silicon; the torch stack elsewhere when
there is memory for at least a small model. It runs with the venv's Python after the
app itself is installed (the Makefile's training step depends on the app's), so the
words about Macs that cannot train and the torch pin come from the one place that
`rltray trainer-env` reads them too. The reason goes to stderr.
"""

from __future__ import annotations

import os
import platform
import sys

from rltray.app.training.trainerenv.plan import TORCH_PIN, mac_problem, under_rosetta

MIN_RAM_GIB = 8  # a 0.5B model, its LoRA and optimizer state fit comfortably


def total_ram_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def choose(
    plat: str = sys.platform, machine: str | None = None, translated: bool | None = None
) -> tuple[list[str], str]:
    """(pip arguments, why) for this machine; the parameters default to this machine's."""
    machine = (machine or platform.machine()).lower()
    if plat == "darwin":
        if machine == "arm64":
            return [".[mlx]"], "Apple Silicon: the MLX backend"
        problem = mac_problem(plat, machine, under_rosetta() if translated is None else translated)
        return [], problem or ""
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
