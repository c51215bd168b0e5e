"""The service process stays light: no torch, transformers or mlx (the trainer is a child)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
from rltray.app.paths import Paths
from rltray.app.service import Service
from rltray.app.runtime import compose
from rltray.web.server import SettingsWeb
from rltray.app import cli, autotrain
service = Service(Paths.from_env())
runtime = compose(service, SettingsWeb())
autotrain.gate(runtime)          # one scheduler tick: idle, power, decision
runtime.status(); service.versions(); service.runs()
runtime.close(); service.close()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "mlx",
               "mlx_lm", "peft", "safetensors"))
print(json.dumps(heavy))
"""


def test_the_running_service_never_imports_the_training_stack(rltray_home: Path) -> None:
    env = dict(os.environ)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
