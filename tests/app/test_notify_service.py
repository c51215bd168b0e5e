"""Which finished turns the running service asks about, end to end through the spool.

Real parts: a running Service (watcher, worker, notifier), hook records in the
spool folder, a notification server on a private D-Bus. The policy itself is
unit-tested in test_notify_policy.py; this pins the wiring (the duration the
hook measured reaches the policy, an already-rated turn is never asked about).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rltray.app import config
from rltray.app.paths import Paths
from rltray.app.service import Service

from tests.support.dbus_fixtures import (  # noqa: F401 (the two fixtures)
    NotificationServer,
    PrivateSessionBus,
    notification_server_fixture,
    session_bus_fixture,
)
from tests.support.spoolfiles import spool_turn as spool


@pytest.fixture
def service(
    notification_server: NotificationServer, rltray_home: Path
) -> Iterator[Service]:
    paths = Paths.from_env()
    paths.ensure()
    svc = Service(paths)
    yield svc
    svc.close()


def asked(server: NotificationServer) -> list[str]:
    return [c.body for c in server.calls if ("good", "Good") in c.action_pairs]


def wait_turns(service: Service, n: int) -> None:
    deadline = time.monotonic() + 15
    while service.store.counts()["turns"] < n:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_long_mode_asks_only_about_turns_that_took_long_enough(
    service: Service, notification_server: NotificationServer, start_runtime: Any
) -> None:
    config.set_value(service.paths, "notify.ask", "long")
    config.set_value(service.paths, "notify.min_turn_seconds", 20)
    start_runtime(service, scheduler=False, api=False)
    spool(service.paths.home, "quick", "a quick answer", duration_s=3.5)
    spool(service.paths.home, "unknown", "an answer of unknown length")
    spool(service.paths.home, "slow", "a slow answer", duration_s=95.0)
    wait_turns(service, 3)
    notification_server.wait_for_calls(1)
    time.sleep(0.5)  # any wrong question would be sent by now (the worker asks in order)
    assert asked(notification_server) == ["a slow answer"]


def test_a_turn_rated_with_rl_before_the_service_saw_it_is_not_asked_about(
    service: Service, notification_server: NotificationServer, start_runtime: Any
) -> None:
    config.set_value(service.paths, "notify.ask", "every")
    home = service.paths.home
    spool(home, "t1", "rated already")
    command = {"v": 1, "kind": "command", "agent": "codex", "session": "s1", "command": "good",
               "target_turn": "t1", "captured_at": "2026-11-22T10:00:05Z"}  # fmt: skip
    name = f"{time.time_ns():020d}-{os.getpid()}-cmd.json"
    (home / "spool" / "incoming" / name).write_text(json.dumps(command))
    spool(home, "t2", "fresh answer")
    start_runtime(service, scheduler=False, api=False)  # stores all three in one pass, in order
    wait_turns(service, 2)
    notification_server.wait_for_calls(1)
    time.sleep(0.5)
    assert asked(notification_server) == ["fresh answer"]
    rating = service.store.turn_by_source_key("codex:s1:t1").rating  # type: ignore[union-attr]
    assert rating is not None and rating.source == "agent"


def test_a_turn_another_process_stored_is_asked_about_too(
    service: Service, notification_server: NotificationServer, start_runtime: Any
) -> None:
    """Regression: the tray asked only about the turns its own worker ingested; a turn
    stored by POST /api/ingest (or a CLI command that drained the spool while the tray was
    busy) was never asked about, and nothing said why."""
    config.set_value(service.paths, "notify.ask", "every")
    start_runtime(service, scheduler=False, api=False)
    other = Service(service.paths)  # the API's thread or a CLI process, storing on its own
    try:  # stored without the spool the worker watches: only the ids show it
        other.store.add_turn({"agent": "codex", "session": "s9", "turn": "t9", "prompt": "q",
                              "response": "stored by someone else"})  # fmt: skip
    finally:
        other.close()
    notification_server.wait_for_calls(1, timeout=30)
    assert asked(notification_server) == ["stored by someone else"]


def wait_closed(server: NotificationServer, notification_id: int, timeout: float = 15.0) -> None:
    with server.service.changed:
        assert server.service.changed.wait_for(
            lambda: notification_id in server.service.closed, timeout
        ), f"notification {notification_id} is still on screen: {server.service.closed}"


def test_a_rating_given_elsewhere_takes_the_notification_down(
    service: Service, notification_server: NotificationServer, start_runtime: Any
) -> None:
    """Rated in the terminal (another process) or the window: the question is withdrawn,
    and a click that still arrives on the stale bubble does not override the answer."""
    config.set_value(service.paths, "notify.ask", "every")
    start_runtime(service, scheduler=False, api=False)
    spool(service.paths.home, "t1", "first answer")
    (first,) = notification_server.wait_for_calls(1)
    turn = service.store.turn_by_source_key("codex:s1:t1").id  # type: ignore[union-attr]
    with Service(Paths.from_env()) as cli:  # `rltray bad` in a terminal
        cli.rate(turn, -1)
    wait_closed(notification_server, first.id)

    spool(service.paths.home, "t2", "second answer")
    second = notification_server.wait_for_calls(2)[1]
    other = service.store.turn_by_source_key("codex:s1:t2").id  # type: ignore[union-attr]
    with Service(Paths.from_env()) as cli:
        cli.rate(other, -1, comment="wrong file")
    notification_server.invoke_action(second.id, "good")  # before rltray noticed the CLI
    time.sleep(1.0)
    rating = service.store.active_rating(other)
    assert rating is not None and (rating.value, rating.source) == (-1, "cli")

    spool(service.paths.home, "t3", "third answer")
    third = notification_server.wait_for_calls(3)[2]
    own = service.store.turn_by_source_key("codex:s1:t3").id  # type: ignore[union-attr]
    service.rate(own, 1, source="web")  # the settings window, in this process
    wait_closed(notification_server, third.id, timeout=5.0)


def test_a_session_keeps_one_notification_that_expires(
    service: Service, notification_server: NotificationServer, start_runtime: Any
) -> None:
    """Issue 22: six stacked after a short session, none expiring, no icon found."""
    config.set_value(service.paths, "notify.expire_minutes", 10)
    start_runtime(service, scheduler=False, api=False)
    spool(service.paths.home, "1", "first answer")
    first = notification_server.wait_for_calls(1)[0]
    spool(service.paths.home, "2", "second answer")  # the same session (s1)
    second = notification_server.wait_for_calls(2)[1]
    deadline = time.monotonic() + 10
    while first.id not in notification_server.service.closed:
        assert time.monotonic() < deadline, "the older notification of the session stayed"
        time.sleep(0.05)
    assert second.id not in notification_server.service.closed
    assert (first.expire_timeout, second.expire_timeout) == (600_000, 600_000)
    icon = Path.home() / ".local/share/icons/hicolor/256x256/apps/rltray.png"
    assert second.app_icon == icon.as_uri() and icon.read_bytes()[:4] == b"\x89PNG"
    spool(service.paths.home, "3", "another session's answer", session="s2")
    notification_server.wait_for_calls(3)
    time.sleep(0.3)
    assert second.id not in notification_server.service.closed  # another session leaves it up
    counts = service.store.counts()
    assert (counts["good"], counts["bad"]) == (0, 0)  # replaced is not rated


def test_the_end_of_a_training_round_is_told_quietly(
    service: Service, notification_server: NotificationServer, start_runtime: Any
) -> None:
    service.store.add_run("old")
    service.store.finish_run("old", "failed", error="an old failure")
    runtime = start_runtime(service, scheduler=False, api=False)
    end = time.monotonic() + 30  # the worker's first pass, which reads old news as told
    while runtime._runs_told is None and time.monotonic() < end:  # (a fixed 0.5 s was
        time.sleep(0.05)  # too short on a loaded CI box: r1 was read as old news)
    assert runtime._runs_told == {"old"}
    service.store.add_run("r1")
    service.store.finish_run(
        "r1", "done", metrics={"accepted": False, "reasons": ["drift above the cap"]}
    )
    spool(service.paths.home, "wake", "an answer")  # wakes the worker now, not in 5 s
    notification_server.wait_for_calls(2)
    told = [c for c in notification_server.calls if ("good", "Good") not in c.action_pairs]
    assert [(c.summary, c.body) for c in told] == [(
        "rltray: training round rejected",
        "Rejected: drift above the cap. The active version stays.",
    )]  # fmt: skip
    assert told[0].hints["urgency"] == 0  # low: no sound, out of the way
    config.set_value(service.paths, "notify.training", False)
    service.store.add_run("r2")
    service.store.finish_run("r2", "failed", error="the trainer ran out of memory")
    spool(service.paths.home, "wake2", "another answer")
    notification_server.wait_for_calls(3)
    time.sleep(0.5)
    assert len([c for c in notification_server.calls if "training" in c.summary]) == 1


def test_a_good_pressed_while_rltray_quits_is_kept(
    service: Service, notification_server: NotificationServer, start_runtime: Any
) -> None:
    """Regression: stop() put the worker's end first and closed the notifier later, and the
    worker left as soon as stopping began: a press in between (while the scheduler waited
    for a gate tick) was accepted by the server, queued, and never run."""
    import threading

    config.set_value(service.paths, "notify.ask", "every")
    runtime = start_runtime(service, scheduler=False, api=False)
    spool(service.paths.home, "t1", "an answer")
    (call,) = notification_server.wait_for_calls(1, timeout=15)

    class SlowScheduler:  # Scheduler.shutdown(wait=True) waiting for a gate tick to end
        def shutdown(self) -> None:
            time.sleep(1.5)

    runtime.scheduler = SlowScheduler()
    quitting = threading.Thread(target=runtime.stop)
    quitting.start()
    time.sleep(0.5)
    notification_server.invoke_action(call.id, "good")
    quitting.join(15)
    rating = service.store.turn_by_source_key("codex:s1:t1").rating  # type: ignore[union-attr]
    assert rating is not None and (rating.value, rating.source) == (1, "notification")


def _asked_turn(service: Service, server: NotificationServer, runtime: Any) -> tuple[int, int]:
    """Spool one turn, wait for its notification; (turn id, the server's id for it)."""
    spool(service.paths.home, "t1", "an answer")
    (call,) = server.wait_for_calls(1, timeout=15)
    turn = service.store.turn_by_source_key("codex:s1:t1").id  # type: ignore[union-attr]
    # the fake server answers Notify before the notifier records the id: wait for that
    deadline = time.monotonic() + 10
    while turn not in runtime.notifier._shown:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return turn, call.id


def _hold_write_lock(service: Service) -> Any:
    """Another process writing for a while (a long `sqlite3` session, a big import)."""
    import sqlite3

    other = sqlite3.connect(service.store.path, timeout=1)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_press_that_waited_for_the_database_is_older_than_a_later_rl(
    service: Service, notification_server: NotificationServer, start_runtime: Any
) -> None:
    """Regression: a Good whose job waited in the worker's queue (the database busy for a
    moment) was stamped when it was written, so a `/rl bad` typed after the press, the
    user's last word, was read as older and refused."""
    from datetime import datetime, timezone

    from tests.support.spoolfiles import drop_record

    config.set_value(service.paths, "notify.ask", "every")
    runtime = start_runtime(service, scheduler=False, api=False)
    turn, nid = _asked_turn(service, notification_server, runtime)
    other = _hold_write_lock(service)
    try:
        notification_server.invoke_action(nid, "good")  # the first word
        time.sleep(0.5)
        said = datetime.now(timezone.utc).isoformat()  # then `/rl bad` in the agent
        drop_record(service.paths.home, {"v": 1, "kind": "command", "agent": "codex",
                                         "session": "s1", "command": "bad", "target_turn": "t1",
                                         "captured_at": said})  # fmt: skip
        time.sleep(1.0)
    finally:
        other.rollback()
        other.close()
    deadline = time.monotonic() + 15
    while service.pending_spool() or service.store.active_rating(turn) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    rating = service.store.active_rating(turn)
    assert rating is not None and (rating.value, rating.source) == (-1, "agent")
    history = service.store.rating_history(turn)
    assert [(r.value, r.source) for r in history] == [(1, "notification"), (-1, "agent")]


def test_a_press_the_busy_database_refused_waits_in_the_spool_and_is_kept(
    notification_server: NotificationServer, rltray_home: Path, start_runtime: Any
) -> None:
    """Regression: a press while another process held the database past the busy timeout
    was only logged: the bubble was gone and the rating lost without a word."""
    from datetime import datetime, timezone

    from rltray.app.store import Store

    paths = Paths.from_env()
    paths.ensure()
    service = Service(paths, Store(paths.db, busy_timeout_s=0.3))  # a short wait, same rule
    runtime = None
    try:
        config.set_value(paths, "notify.ask", "every")
        runtime = start_runtime(service, scheduler=False, api=False)
        turn, nid = _asked_turn(service, notification_server, runtime)
        other = _hold_write_lock(service)
        try:
            pressed = datetime.now(timezone.utc)
            notification_server.invoke_action(nid, "good")
            deadline = time.monotonic() + 10  # refused, then kept as a hook record
            while not service.pending_spool():
                assert time.monotonic() < deadline, "the press was neither stored nor kept"
                time.sleep(0.05)
            assert service.store.active_rating(turn) is None
        finally:
            other.rollback()
            other.close()
        deadline = time.monotonic() + 20  # the worker's next pass stores it
        while service.store.active_rating(turn) is None:
            assert time.monotonic() < deadline, "the kept press was never stored"
            time.sleep(0.05)
        rating = service.store.active_rating(turn)
        assert rating is not None and (rating.value, rating.source) == (1, "notification")
        at = datetime.fromisoformat(rating.rated_at)
        assert abs((at - pressed).total_seconds()) < 2  # given at the press, not at the write
        assert service.pending_spool() == 0 and not any(paths.spool_rejected.glob("*.json"))
    finally:
        if runtime is not None:
            runtime.close()  # before its service's store closes
        service.close()
