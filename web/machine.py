"""This machine's training backend: which interpreter trains, what it can import, CUDA / MPS / MLX.

The service never imports torch or mlx (tests/app/test_light_imports.py), so
the trainer interpreter is asked in a child process: a few lines that import
what is there and print JSON. A separate trainer environment is built by
`rltray trainer-env create` (app/cli/trainerenv.py), run by the wizard as a
`web.jobs` job that shows pip's real progress.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rltray.app.training.backends import PROBED_MODULES

PROBE = r"""
import importlib.util, json, platform, sys
out = {"python": sys.version.split()[0], "executable": sys.executable,
       "platform": sys.platform, "machine": platform.machine()}
out["modules"] = sys.argv[1:]  # the backends' modules (PROBED_MODULES)
for name in out["modules"]:
    out[name] = importlib.util.find_spec(name) is not None
if out["torch"]:
    try:
        import torch
        out["torch_version"] = torch.__version__
        out["cuda"] = bool(torch.cuda.is_available())
        count = torch.cuda.device_count() if out["cuda"] else 0
        out["cuda_devices"] = [torch.cuda.get_device_name(i) for i in range(count)]
        mps = getattr(torch.backends, "mps", None)
        out["mps"] = bool(mps and mps.is_available())
    except Exception as exc:
        out["torch_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""
PROBE_TIMEOUT_S = 60.0
PROBE_FRESH_S = 30.0  # a probe answer is reused this long (the page asks on every visit)
TORCH_CPU = "torch==2.13.0"  # the CPU build `make` pins; a bare `torch` pulls GBs of CUDA


# A bundle's own executable is not a Python (asked to run the probe, it printed an argparse
# error and the probe's source: review 3, finding 4), so there is nothing to ask yet.
NO_TRAINER = (
    "This app carries no Python that can train, and no trainer environment is set up yet: "
    "create a trainer environment below."
)


def trainer_python(configured: str) -> str | None:
    """The interpreter that trains: the setting when given, else rltray's own; None in a
    bundle with no setting (``NO_TRAINER`` says what to do, with nothing probed)."""
    from rltray.app import bundle

    if configured.strip():
        return configured.strip()
    return None if bundle.frozen() else sys.executable


def probe(python: str) -> dict[str, Any]:
    """What ``python`` can train with; ``error`` when it cannot even be run."""
    from rltray.app import childpython

    try:  # a private cwd and PYTHONSAFEPATH: the probe's imports come from that Python only
        done = subprocess.run(
            [python, "-c", PROBE, *PROBED_MODULES],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            **childpython.options(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"executable": python, "error": f"{python} could not be run: {exc}."}
    if done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-1:] or ["no output"]
        return {"executable": python, "error": f"{python} failed: {tail[0]}"}
    try:
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {"executable": python, "error": f"{python} printed no answer."}


class Probes:
    """One probe at a time, its answer reused for ``PROBE_FRESH_S``.

    A probe starts an interpreter that imports torch (seconds, ~200 MB); requests that
    arrive while one runs wait for it and share its answer instead of starting their own.
    Only the last interpreter's answer is kept: the page asks about the configured one.
    """

    def __init__(
        self,
        run: Callable[[str], dict[str, Any]] = probe,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self._clock = clock
        self._lock = threading.Lock()
        self._last: tuple[str, float, dict[str, Any]] | None = None  # python, when, answer

    def probe(self, python: str) -> dict[str, Any]:
        with self._lock:
            last = self._last
            if last is not None and last[0] == python and self._clock() - last[1] < PROBE_FRESH_S:
                return dict(last[2])
            info = self._run(python)
            self._last = (python, self._clock(), info)
            return dict(info)


def backend(info: dict[str, Any]) -> dict[str, Any]:
    """The backend the trainer would use, and a sentence saying why (or what is missing)."""
    if info.get("error"):
        return {"name": None, "message": info["error"]}
    torch_ok = info.get("torch") and info.get("transformers") and info.get("peft")
    if info.get("mlx") and info.get("mlx_lm") and info.get("platform") == "darwin":
        return {"name": "mlx", "message": "MLX on Apple silicon."}
    if torch_ok and info.get("cuda"):
        names = ", ".join(info.get("cuda_devices") or []) or "a CUDA GPU"
        return {"name": "cuda", "message": f"PyTorch with CUDA on {names}."}
    if torch_ok and info.get("mps"):
        return {"name": "mps", "message": "PyTorch on Apple MPS."}
    if torch_ok:
        return {"name": "cpu", "message": "PyTorch on the CPU (slow but works for small models)."}
    if info.get("mlx") and info.get("mlx_lm"):
        return {"name": "mlx-cpu", "message": "MLX on the CPU."}
    return {
        "name": None,
        "message": "This interpreter has neither torch + transformers + peft nor mlx + mlx-lm; "
        "create a trainer environment below.",
    }
