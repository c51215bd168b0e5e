"""`rltray hooks install` says where the hooks point; doctor notices when that is gone.

Regression pinned (issue 22): hook commands hold the clone's absolute paths, so
moving the clone (or deleting its .venv) silently stopped capture; neither the
install nor doctor said a word.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from rltray.app.cli import doctor
from rltray.app.errors import ExitCode
from rltray.app.hooks import registry
from rltray.app.paths import Paths
from rltray.app.service import Service

from tests.app.test_cli import cli

MOVED = "/moved/away/clone/.venv/bin/python"


@pytest.fixture
def agents_present(rltray_home: Path) -> Path:
    home = Path(os.environ["HOME"])
    (home / ".claude").mkdir()
    (home / ".codex").mkdir()
    return home


def hook_program() -> doctor.Check:
    with Service(Paths.from_env()) as service:
        return doctor._hook_program(service)


def test_install_says_which_program_the_hooks_run(agents_present: Path) -> None:
    code, out, err = cli("hooks", "install")
    assert code == ExitCode.OK, err
    assert f"The hooks run {sys.executable} " in out
    assert "capture stops until you run `rltray hooks install` again." in out


def test_doctor_fails_when_the_installed_hooks_start_a_missing_program(
    agents_present: Path,
) -> None:
    assert cli("hooks", "install")[0] == ExitCode.OK
    paths = Paths.from_env()
    for agent in registry.all_agents():
        if not agent.detect():  # OpenClaw is not there: nothing of it installed
            continue
        commands = agent.status(paths).commands
        assert commands and all(argv[0] == sys.executable for argv in commands)
    assert hook_program().state == doctor.OK
    # the clone moved: its settings still name the old interpreter
    settings = agents_present / ".claude" / "settings.json"
    settings.write_text(settings.read_text().replace(sys.executable, MOVED))
    check = hook_program()
    assert check.state == doctor.FAIL and check.fix == "run `rltray hooks install`"
    assert check.detail == (
        f"Claude Code hooks point at a missing program {MOVED}: no turn is captured"
    )
    assert cli("hooks", "install")[0] == ExitCode.OK  # the fix it names works
    assert hook_program().state == doctor.OK
    assert MOVED not in json.dumps(json.loads(settings.read_text()))


def test_uninstall_goes_on_past_an_agent_whose_file_it_cannot_read(
    agents_present: Path,
) -> None:
    """Regression: `rltray hooks uninstall` stopped at the first unreadable file and left
    every later agent as it was: Codex kept rltray's notify wrapped around the user's own,
    which stops running once rltray's environment is gone."""
    config = agents_present / ".codex" / "config.toml"
    config.write_text('model = "o3"\nnotify = ["notify-send", "Codex done"]\n')
    before = config.read_text()
    assert cli("hooks", "install")[0] == ExitCode.OK
    assert "capture.py" in config.read_text()
    settings = agents_present / ".claude" / "settings.json"
    settings.write_text(settings.read_text().replace("{", "{,", 1))  # now broken by hand
    code, _, err = cli("hooks", "uninstall")
    assert code != ExitCode.OK
    assert "Claude Code: " in err and "is not valid JSON" in err
    assert "uninstall did not finish for Claude Code (said above)" in err
    assert config.read_text() == before  # Codex's was undone all the same
