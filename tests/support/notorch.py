"""Run Python code in a child process where torch is not installed, as far as it can tell.

Why: the MLX trainer environment on Apple Silicon has mlx, mlx-lm and Transformers
but no torch; code meant for it must be tested here, where torch is installed.
Raising ImportError from a finder is not enough: Transformers asks
``importlib.util.find_spec("torch")`` first, and a raising finder breaks that
question instead of answering "absent". So every finder on ``sys.meta_path`` is
wrapped to answer None for the hidden packages, exactly what a missing package
gives.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PRELUDE = """\
import sys as _sys
_HIDDEN = {hidden!r}
class _Hide:
    def __init__(self, inner):
        self.inner = inner
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _HIDDEN:
            return None
        return self.inner.find_spec(name, path, target)
    def __getattr__(self, attr):
        return getattr(self.inner, attr)
_sys.meta_path[:] = [_Hide(f) if hasattr(f, "find_spec") else f for f in _sys.meta_path]
import importlib.util as _util
if any(_util.find_spec(_name) is not None for _name in _HIDDEN):
    raise SystemExit(f"one of {{_HIDDEN}} is still importable")
"""


def run_without(code: str, hidden: Iterable[str] = ("torch",), *,
                env: Mapping[str, str] | None = None,
                timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -c PRELUDE + code`` from the repository root with ``hidden`` unimportable."""
    prelude = _PRELUDE.format(hidden=set(hidden))
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), child_env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                          text=True, cwd=ROOT, env=child_env, timeout=timeout)
