"""Doctor's training line is about the Python that trains: the configured trainer environment.

Regression pinned (review 3, finding 5; /tmp/review3-packaging/doctor_trainer.sh): a
bundle's doctor asked its own interpreter (which never trains) for torch and advised
`pip install 'rltray[torch]'`, even with training.python set to a working trainer
environment, while `--selftest` said that environment was fine.

Real parts: the config file, the real doctor run in process (the bundle as
PyInstaller marks it: sys.frozen), the configured interpreter probed in a child process.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest
from rltray.app import config
from rltray.app.cli import doctor, main
from rltray.app.cli.context import Context
from rltray.app.paths import Paths


@pytest.fixture
def bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)


def run_doctor() -> list[str]:
    out = io.StringIO()
    main(["doctor"], env={**os.environ, "COLUMNS": "400"}, stdout=out, stderr=io.StringIO())
    return out.getvalue().splitlines()


def test_a_bundle_reports_the_configured_trainer_never_its_own_interpreter(
    bundle: None, rltray_home: Path
) -> None:
    config.set_value(Paths.from_env(), "training.python", sys.executable)
    (check,) = doctor._training(Context())
    assert check.name == "training: trainer environment"
    assert check.detail.startswith(sys.executable), check.detail
    lines = run_doctor()
    assert not [line for line in lines if "pip install" in line], lines
    assert [line for line in lines if "training: trainer environment" in line], lines
    assert not [line for line in lines if "training: torch" in line], lines


def test_a_bundle_without_a_trainer_environment_is_told_to_create_one(
    bundle: None, rltray_home: Path
) -> None:
    (check,) = doctor._training(Context())
    assert (check.state, check.fix) == (doctor.WARN, "rltray trainer-env create")
    assert check.detail == "not set up; run `rltray trainer-env create` (or Set up training)"


def test_a_configured_python_outside_a_bundle_is_the_one_reported(
    rltray_home: Path, tmp_path: Path
) -> None:
    """training.python wins outside a bundle too: it is what a round starts."""
    gone = tmp_path / "env" / "bin" / "python"
    config.set_value(Paths.from_env(), "training.python", str(gone))
    (check,) = doctor._training(Context())
    assert (check.state, check.fix) == (doctor.WARN, "rltray trainer-env create")
    assert check.detail == f"{gone} is gone; run `rltray trainer-env create` to rebuild it"
