"""One owner for config.toml (issue 21 part 4): a typo in the file is reported once and
the running rltray keeps working on the last valid settings.

Tried as a new user would before this owner existed: one bad value silently
stopped every rating notification and made `rltray status` refuse to print.
Real parts: the config file on disk, a running runtime with the real notifier
on a private D-Bus and a fake notification server, the `rltray` CLI in process.
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from typing import Any

from rltray.app import autotrain, config
from rltray.app.cli import main
from rltray.app.paths import Paths
from rltray.app.service import Service

from tests.support.dbus_fixtures import (  # noqa: F401 (the two fixtures)
    NotificationServer,
    notification_server_fixture,
    session_bus_fixture,
)
from tests.support.spoolfiles import spool_turn as spool

BROKEN = '[notify]\nask = "every"\n\n[training]\nmin_ratings = "lots"\n'


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), env=dict(os.environ), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def break_config(paths: Paths) -> None:
    time.sleep(0.01)  # a new mtime even on coarse clocks
    paths.config.write_text(BROKEN, encoding="utf-8")


def settings_events(service: Service) -> list[str]:
    return [e["message"] for e in service.store.events(limit=50) if e["kind"] == "settings"]


def test_a_broken_file_keeps_the_last_valid_settings_and_is_reported_once(
    service: Service,
) -> None:
    service.set_setting("training.min_ratings", 8)
    assert service.settings().training.min_ratings == 8
    break_config(service.paths)
    for _ in range(3):  # every reader gets the last valid copy, none raises
        assert service.settings().training.min_ratings == 8
    problem = service.settings_problem()
    assert problem is not None and "min_ratings" in problem
    broken_lines = [m for m in settings_events(service) if "not in effect" in m]
    assert len(broken_lines) == 1, broken_lines
    # fixed in an editor: in effect at the next read, without a restart
    time.sleep(0.01)
    service.paths.config.write_text("[training]\nmin_ratings = 12\n", encoding="utf-8")
    assert service.settings().training.min_ratings == 12
    assert service.settings_problem() is None


def test_status_doctor_and_the_tray_say_what_is_wrong(
    service: Service, runtime: Any
) -> None:
    from rltray.app.tray.state import snapshot

    break_config(service.paths)
    code, out, err = cli("status")
    assert code == 0, err
    assert "config.toml is not in effect" in out and "min_ratings" in out
    assert json.loads(cli("status", "--json")[1])["settings_problem"]
    code, out, _ = cli("doctor")
    assert "min_ratings" in out and "fix or delete" in out
    state = snapshot(runtime)
    assert state.mode == "attention"
    assert any("config.toml is not in effect" in p for p in state.problems)


def test_no_round_starts_on_its_own_while_the_file_is_broken(
    service: Service, runtime: Any
) -> None:
    break_config(service.paths)
    decision = autotrain.decide(runtime)
    assert not decision.train and "config.toml" in decision.reason


def test_a_change_made_by_another_process_reaches_the_running_rltray(
    service: Service, start_runtime: Any
) -> None:
    """`rltray config set` in a terminal: the tray redraws at the next worker pass
    (its refresh used to wait for the 30 s tick), and the new value is in effect."""
    told: list[int] = []
    service.listeners.append(lambda: told.append(1))
    start_runtime(service, notifications=False, scheduler=False, api=False)
    time.sleep(0.5)
    told.clear()
    code, _, err = cli("config", "set", "training.min_ratings", "5")
    assert code == 0, err
    deadline = time.monotonic() + 15
    while not told:
        assert time.monotonic() < deadline, "the running rltray never noticed the change"
        time.sleep(0.1)
    assert service.settings().training.min_ratings == 5


def test_notifications_keep_asking_while_the_file_is_broken(
    notification_server: NotificationServer, rltray_home: Path, start_runtime: Any
) -> None:
    paths = Paths.from_env()
    paths.ensure()
    with Service(paths) as service:
        config.set_value(paths, "notify.ask", "every")
        start_runtime(service, scheduler=False, api=False)
        break_config(paths)
        spool(paths.home, "t1", "an answer to rate")
        (call,) = notification_server.wait_for_calls(1, timeout=15)
        assert call.body == "an answer to rate"
