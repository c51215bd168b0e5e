"""bench/clone_to_tray.py runs as a user runs it and reports a tray, so it cannot rot unnoticed.

The smallest run that still takes every path: a fresh clone of HEAD, `make venv run`
without the training extras, the tray registering under Xvfb, the setup window,
Ctrl+C (about 90 s here). tests/packaging/test_fresh_clone.py asserts the same
path's behaviour; this pins the bench's own code and its JSON line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dbus_fixtures import missing_dbus_daemon
from tests.support.freshclone import missing_desktop_gi

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_clone_to_tray_reports_the_tray_and_a_quiet_ctrl_c(tmp_path: Path) -> None:
    tools = {"Xvfb": "xvfb", "make": "make"}
    lacking = [f"needs {t} (apt install {p})" for t, p in tools.items() if not shutil.which(t)]
    for missing in (missing_dbus_daemon(), missing_desktop_gi(), *lacking):
        if missing:
            pytest.skip(missing)
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "clone_to_tray.py"), "--no-training",
         "--hold", "1", "--log", str(tmp_path / "make.log")],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
        env={**os.environ, "TMPDIR": "/tmp"},  # the bus's socket path must stay short
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["tray_registered_s"] is not None, (tmp_path / "make.log").read_text()
    # the clone itself can take under the 0.1 s both figures are rounded to
    assert figures["clone_to_tray_s"] >= figures["tray_registered_s"] > 0
    assert figures["setuptools_banners"] == 0 and figures["tracebacks"] == 0
    assert (
        figures["make_error_lines"] == [] and figures["ctrl_c_last_lines"][-1] == "rltray stopped."
    )
