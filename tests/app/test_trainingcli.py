"""`rltray config|pause|resume|versions|runs|rollback` run in process without a running service."""

from __future__ import annotations

import json
from pathlib import Path

from rltray.app.errors import ExitCode
from rltray.app.paths import Paths
from rltray.app.store import Store

from tests.app.test_cli import cli


def test_config_set_get_list_keeps_comments(rltray_home: Path) -> None:
    code, out, err = cli("config", "set", "training.min_ratings", "12")
    assert code == ExitCode.OK, err
    assert cli("config", "get", "training.min_ratings")[1].strip() == "12"
    text = (rltray_home / "config.toml").read_text()
    (rltray_home / "config.toml").write_text("# mine, keep me\n" + text)
    cli("config", "set", "notify.ask", "nth")
    assert "# mine, keep me" in (rltray_home / "config.toml").read_text()
    code, out, _ = cli("config", "list")
    assert code == ExitCode.OK and 'notify.ask = "nth"' in out and "training.python" in out
    code, _, err = cli("config", "set", "training.min_ratings", "many")
    assert code == ExitCode.USAGE and "training.min_ratings" in err
    code, _, err = cli("config", "set", "no.such", "1")
    assert code == ExitCode.USAGE


def test_pause_and_resume_automatic_training(rltray_home: Path) -> None:
    assert cli("pause")[0] == ExitCode.OK
    status = json.loads(cli("status", "--json")[1])
    assert status["training"]["automatic"] is False and status["service_running"] is False
    assert "not running" in status["training"]["next_training"]
    assert cli("resume")[0] == ExitCode.OK
    assert json.loads(cli("status", "--json")[1])["training"]["automatic"] is True


def test_versions_runs_and_rollback(rltray_home: Path) -> None:
    code, out, _ = cli("versions")
    assert code == ExitCode.OK and "No trained versions yet" in out
    paths = Paths.from_env()
    with Store.open(paths) as store:
        for v in (1, 2):
            folder = paths.adapters / f"v{v:04d}"
            folder.mkdir(parents=True)
            store.add_adapter("tiny", folder, parent_version=v - 1 or None, baseline=0.1 * v)
            store.set_adapter_status(v, "active")
    (row2, row1) = json.loads(cli("versions", "--json")[1])
    assert (row2["version"], row2["active"], row1["active"]) == (2, True, False)
    code, out, err = cli("rollback", "v1")
    assert code == ExitCode.OK and "v1" in out, err
    assert [v["version"] for v in json.loads(cli("versions", "--json")[1]) if v["active"]] == [1]
    code, _, err = cli("rollback", "latest")
    assert code == ExitCode.USAGE and "v3 or 3" in err
    code, out, _ = cli("runs")
    assert code == ExitCode.OK and "No training runs yet" in out
