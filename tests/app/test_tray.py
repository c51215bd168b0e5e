"""The tray's menu over a real running Service (pystray's dummy backend: no display needed).

What is real: the Service with its lock, worker thread and SQLite store, the
config file, the training runner with a fake trainer process (the JSON-line
protocol of tests/app/test_training.py), and pystray's own MenuItem objects,
whose callbacks are the ones a click runs. The real GTK/AppIndicator tray over
D-Bus is exercised in test_tray_dbus.py.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rltray.app import config
from rltray.app.paths import Paths
from rltray.app.runtime import Runtime, compose
from rltray.app.service import Service
from rltray.app.tray import Tray, why_no_tray
from rltray.app.tray.icon import draw
from rltray.app.tray.state import ATTENTION, IDLE, TRAINING, snapshot
from rltray.web.server import SettingsWeb


@pytest.fixture(autouse=True)
def dummy_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """pystray picks its backend when first imported (inside Tray): the dummy one, no display."""
    monkeypatch.setenv("PYSTRAY_BACKEND", "dummy")


@pytest.fixture
def runtime(rltray_home: Path, fake_python: str, monkeypatch) -> Iterator[Runtime]:
    monkeypatch.setenv("FAKE_MODE", "done")
    paths = Paths.from_env()
    paths.ensure()
    config.set_value(paths, "training.base_model", "/models/tiny")
    config.set_value(paths, "training.python", fake_python)
    svc = Service(paths)
    running = compose(svc, SettingsWeb(), notifications=False, scheduler=False, api=False)
    try:
        yield running
    finally:
        running.close()
        svc.close()


@pytest.fixture
def service(runtime: Runtime) -> Service:
    return runtime.service


@pytest.fixture
def tray(runtime: Runtime) -> Tray:
    return Tray(runtime)


def add_turns(service: Service, n: int) -> list[int]:
    ids = []
    for i in range(n):
        turn_id, _ = service.store.add_turn(
            {"agent": "claude-code", "session": "s", "turn": f"t{i}",
             "prompt": f"question {i}", "response": f"answer {i}"}
        )  # fmt: skip
        ids.append(turn_id)
    return ids


def labels(items: Any) -> list[str]:
    return [str(item.text) for item in items if str(item.text) not in ("", "- - - -")]


def find(tray: Tray, *path: str) -> Any:
    """The menu item under ``path`` (top label, then submenu labels), as pystray built it."""
    tray.state = snapshot(tray.runtime)  # what the refresher would show now
    items: Any = tray.icon.menu.items
    for depth, name in enumerate(path):
        item = next((i for i in items if str(i.text).startswith(name)), None)
        assert item is not None, f"no {name!r} in {labels(items)}"
        if depth == len(path) - 1:
            return item
        items = item.submenu.items


def click(tray: Tray, *path: str) -> None:
    find(tray, *path)(tray.icon)
    drain(tray.runtime)


def drain(runtime: Runtime) -> None:
    """Wait until the worker ran everything submitted so far."""
    import threading

    done = threading.Event()
    runtime.submit(done.set)
    assert done.wait(10)


def wait_until(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def events(service: Service) -> list[str]:
    return [e["message"] for e in service.store.events(limit=20) if e["kind"] == "tray"]


# -- what the menu says ------------------------------------------------------------


def test_the_first_lines_say_ratings_active_version_and_what_training_waits_for(
    tray: Tray,
) -> None:
    service = tray.service
    ids = add_turns(service, 3)
    service.store.rate(ids[0], 1, "cli")
    service.store.rate(ids[1], -1, "cli")
    tray.runtime.set_gate_reason("waiting for 8 more ratings")
    state = snapshot(tray.runtime)
    assert state.status == "2 new ratings · base model"
    assert state.next_training == "Next training: waiting for 8 more ratings"
    assert state.mode == IDLE and state.problems == ()
    tray.state = state
    top = labels(tray.icon.menu.items)
    assert top[:2] == ["2 new ratings · base model", "Next training: waiting for 8 more ratings"]
    assert top[2:] == [
        "Rate last answer", "Train now", "Pause automatic training", "Snooze notifications",
        "Roll back", "Open settings", "Setup wizard…", "Quit rltray",
    ]  # fmt: skip
    assert not find(tray, "2 new ratings").enabled  # information, not a button


def test_no_model_configured_asks_for_attention(tray: Tray) -> None:
    config.set_value(tray.service.paths, "training.base_model", "")
    state = snapshot(tray.runtime)
    assert state.mode == ATTENTION
    assert state.problems == ("No model is set up for training (Open settings → Model).",)
    assert "No model is set up" in state.tooltip
    tray.state = state
    assert labels(tray.icon.menu.items)[2].startswith("⚠ No model is set up")


def test_a_failed_run_asks_for_attention_until_a_later_run_succeeds(tray: Tray) -> None:
    store = tray.service.store
    store.add_run("r1")
    store.finish_run("r1", "failed", error="loading the model\nRuntimeError: out of memory")
    state = snapshot(tray.runtime)
    assert state.mode == ATTENTION
    assert state.problems == ("The last training run failed: RuntimeError: out of memory",)
    store.add_run("r2")
    store.finish_run("r2", "done")
    assert snapshot(tray.runtime).mode == IDLE


# -- what each item does -------------------------------------------------------------


def test_rate_last_answer_good_rates_the_newest_turn_from_the_tray(tray: Tray) -> None:
    ids = add_turns(tray.service, 2)
    click(tray, "Rate last answer", "Good")
    turn = tray.service.store.get_turn(ids[-1])
    assert turn is not None and turn.rating is not None
    assert (turn.rating.value, turn.rating.source) == (1, "tray")
    assert tray.service.store.get_turn(ids[0]).rating is None  # type: ignore[union-attr]
    assert events(tray.service)[0].startswith(f"Rated good: turn {ids[-1]} — question 1")


def test_rate_bad_after_good_changes_the_rating_and_keeps_history(tray: Tray) -> None:
    (turn_id,) = add_turns(tray.service, 1)
    click(tray, "Rate last answer", "Good")
    click(tray, "Rate last answer", "Bad")
    history = tray.service.store.rating_history(turn_id)
    assert [r.value for r in history] == [1, -1] and history[0].withdrawn_at is not None


def test_the_tray_never_flips_a_rating_given_elsewhere(tray: Tray) -> None:
    """Regression: "Rate last answer" changed the newest turn's rating whatever gave it,
    though that turn may be another agent's, rated there a moment before."""
    (turn_id,) = add_turns(tray.service, 1)
    tray.service.rate(turn_id, 1, source="agent")  # `$rl good` in the other agent
    click(tray, "Rate last answer", "Bad")
    rating = tray.service.store.active_rating(turn_id)
    assert rating is not None and (rating.value, rating.source) == (1, "agent")
    assert events(tray.service)[0].startswith(f"Not rated: the newest answer (turn {turn_id}")
    assert "already rated good in the agent" in events(tray.service)[0]


def test_rating_with_no_turn_says_so_instead_of_failing(tray: Tray) -> None:
    click(tray, "Rate last answer", "Good")
    assert events(tray.service)[0].startswith("No turn has been captured yet")


def test_pause_automatic_training_is_a_checkbox_kept_in_config(tray: Tray) -> None:
    paths = tray.service.paths
    assert find(tray, "Pause automatic training").checked is False
    click(tray, "Pause automatic training")
    assert config.load_config(paths).training.automatic is False
    assert find(tray, "Pause automatic training").checked is True
    click(tray, "Pause automatic training")
    assert config.load_config(paths).training.automatic is True
    assert events(tray.service)[:2] == [
        "Automatic training resumed.",
        "Automatic training paused.",
    ]


def test_snooze_for_an_hour_then_ask_again(tray: Tray) -> None:
    background = tray.runtime
    assert find(tray, "Snooze notifications", "Ask again now").enabled is False
    click(tray, "Snooze notifications", "For 1 hour")
    until = background.snoozed_until
    assert until is not None and 3500 < (until - until.now(until.tzinfo)).total_seconds() <= 3600
    assert find(tray, "Snooze notifications").text.startswith("Snooze notifications (until ")
    click(tray, "Snooze notifications", "Ask again now")
    assert background.snoozed_until is None


def test_train_now_trains_then_roll_back_lists_versions_and_switches(tray: Tray) -> None:
    service = tray.service
    for turn_id, value in zip(add_turns(service, 12), [1, -1] * 6, strict=True):
        service.store.rate(turn_id, value, "cli")
    click(tray, "Train now")
    wait_until(lambda: service.store.active_adapter() is not None)
    wait_until(lambda: not service.runner().running())
    assert events(service)[-1].startswith("Training run ")  # oldest tray event: the start
    rollback = find(tray, "Roll back").submenu.items
    assert [str(i.text)[:2] for i in rollback] == ["v1", "Ba"]
    assert "held-out 0.75" in str(rollback[0].text)
    assert [i.checked for i in rollback] == [True, False]
    click(tray, "Roll back", "Base model")
    assert service.store.active_adapter() is None
    said = events(service)[0]  # and what Ollama does now (issue 22: a rollback said nothing)
    assert said.startswith("Now using the base model (no adapter). Ollama: not used")
    assert [i.checked for i in find(tray, "Roll back").submenu.items] == [False, True]
    click(tray, "Roll back", "v1")
    active = service.store.active_adapter()
    assert active is not None and active.version == 1


def test_roll_back_names_the_ollama_tag_and_a_failed_publish_asks_for_attention(
    tray: Tray,
) -> None:
    store = tray.service.store
    adapter = store.add_adapter("/models/tiny", tray.service.paths.adapters / "v0001")
    store.set_adapter_status(adapter.version, "active")
    store.set_adapter_publication(1, "tiny-rltray:v1", {"tag": "tiny-rltray:v1", "path": "merged"})
    state = snapshot(tray.runtime)
    assert state.versions[0].label.endswith(" · tiny-rltray:v1") and state.mode == IDLE
    store.set_adapter_publication(1, None, {"error": "Ollama is not running on 127.0.0.1:11434"})
    state = snapshot(tray.runtime)
    assert state.mode == ATTENTION
    assert state.problems == ("v1 is not published: Ollama is not running on 127.0.0.1:11434",)


def test_training_shows_percent_in_the_icon_and_a_stop_item(
    tray: Tray, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "slow")
    service = tray.service
    for turn_id, value in zip(add_turns(service, 12), [1, -1] * 6, strict=True):
        service.store.rate(turn_id, value, "cli")
    click(tray, "Train now")
    wait_until(lambda: (snapshot(tray.runtime).percent or 0) > 0)
    state = snapshot(tray.runtime)
    assert state.mode == TRAINING and state.training
    assert state.next_training.startswith("Training now… ")
    click(tray, "Stop training")
    wait_until(lambda: not service.runner().running())
    runs = service.runs(limit=1)
    assert runs[0]["status"] == "paused"
    assert events(service)[0] == ("Training paused at its checkpoint; Train now resumes it, "
                                  "and so does the next idle time.")  # fmt: skip
    # Regression: it promised the next idle time would resume it when nothing would
    click(tray, "Pause automatic training")
    click(tray, "Train now")
    wait_until(lambda: service.runner().running())
    click(tray, "Stop training")
    wait_until(lambda: not service.runner().running())
    assert "automatic training is off, so nothing else will" in events(service)[0]


def test_the_refresher_redraws_when_the_state_changes(tray: Tray) -> None:
    shown: list[str] = []
    tray.icon.update_menu = lambda: shown.append(tray.state.status)  # type: ignore[method-assign]
    tray._refresher.start()
    try:
        add_turns(tray.service, 1)
        tray.service.store.rate(1, 1, "cli")
        tray.refresh()
        wait_until(lambda: "1 new rating · base model" in shown, timeout=10)
    finally:
        tray._stopping.set()
        tray.refresh()


def test_open_settings_and_setup_open_those_pages(
    tray: Tray, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    monkeypatch.setattr(tray.runtime, "open_settings", opened.append)  # no window in a test
    click(tray, "Open settings")
    click(tray, "Setup wizard")
    assert opened == ["", "setup"]


def test_quit_stops_the_icon(tray: Tray) -> None:
    stopped: list[bool] = []
    tray.icon.stop = lambda: stopped.append(True)  # type: ignore[method-assign]
    find(tray, "Quit rltray")(tray.icon)
    assert stopped == [True] and tray._stopping.is_set()


def test_a_notifier_that_cannot_start_makes_the_icon_ask_for_attention(
    rltray_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 item 12: DesktopNotifier() raising left the tray saying all was well."""
    from tests.app.test_notify_access import Broken

    monkeypatch.setattr("desktop_notifier.main.get_backend_class", lambda: Broken)
    paths = Paths.from_env()
    paths.ensure()
    config.set_value(paths, "training.base_model", "/models/tiny")
    svc = Service(paths)
    running = compose(svc, SettingsWeb(), notifications=True, scheduler=False, api=False)
    try:
        assert running.notifier is not None
        wait_until(lambda: bool(running.notifier and running.notifier.delivery_problems()), 10)
        state = snapshot(running)
    finally:
        running.close()
        svc.close()
    assert state.mode == ATTENTION
    assert [p for p in state.problems if p.startswith("desktop-notifier could not start")]


# -- a click does what the menu showed ---------------------------------------------------
# The worker may run a click seconds after the menu was drawn; meanwhile another agent
# finishes a turn, a terminal changes a setting, a round ends. ``click_drawn`` clicks the
# menu as drawn (``find``/``click`` above redraw it first).


def click_drawn(tray: Tray, *path: str) -> None:
    items: Any = tray.icon.menu.items
    for name in path[:-1]:
        items = next(i for i in items if str(i.text).startswith(name)).submenu.items
    next(i for i in items if str(i.text).startswith(path[-1]))(tray.icon)
    drain(tray.runtime)


def test_rate_last_answer_rates_the_turn_the_menu_named(tray: Tray) -> None:
    """Regression: it rated whichever turn was newest when the worker got to the click,
    another agent's answer that arrived after the user opened the menu."""
    (shown,) = add_turns(tray.service, 1)
    tray.state = snapshot(tray.runtime)  # the user opens the menu after reading it
    rate_menu = find(tray, "Rate last answer").submenu.items
    assert str(rate_menu[0].text) == f"Turn {shown} · question 0"
    assert not rate_menu[0].enabled
    with Service(tray.service.paths) as other:  # another agent finishes meanwhile
        newer, _ = other.store.add_turn({"agent": "codex", "session": "s7", "turn": "b",
                                         "prompt": "delete old logs", "response": "Deleted."})
    click_drawn(tray, "Rate last answer", "Good")
    rating = tray.service.store.active_rating(shown)
    assert rating is not None and (rating.value, rating.source) == (1, "tray")
    assert tray.service.store.active_rating(newer) is None
    assert events(tray.service)[0].startswith(f"Rated good: turn {shown} — question 0")


def test_a_tray_rating_is_as_old_as_its_click(tray: Tray) -> None:
    """Regression: a click that waited in the worker's queue was stamped when written, so a
    `/rl` typed after the click (the user's last word) was refused as older."""
    import threading
    from datetime import datetime, timezone

    (turn_id,) = add_turns(tray.service, 1)
    tray.state = snapshot(tray.runtime)
    busy = threading.Event()
    tray.runtime.submit(lambda: busy.wait(10))  # the worker busy with an earlier job
    clicking = threading.Thread(target=click_drawn, args=(tray, "Rate last answer", "Good"))
    clicking.start()
    time.sleep(0.2)
    after_click = datetime.now(timezone.utc)
    time.sleep(0.3)
    busy.set()
    clicking.join(10)
    rating = tray.service.store.active_rating(turn_id)
    assert rating is not None and rating.source == "tray"
    assert datetime.fromisoformat(rating.rated_at) < after_click


def test_the_pause_box_does_what_it_showed(tray: Tray) -> None:
    """Regression: the item flipped the current setting, so ticking the unticked box after
    `rltray pause` in a terminal resumed automatic training."""
    tray.state = snapshot(tray.runtime)
    assert find(tray, "Pause automatic training").checked is False
    with Service(tray.service.paths) as cli:  # `rltray pause` after the menu was drawn
        cli.set_automatic(False)
    click_drawn(tray, "Pause automatic training")  # the user ticks the unticked box
    assert config.load_config(tray.service.paths).training.automatic is False
    assert events(tray.service)[0] == "Automatic training was already paused."


def test_stop_training_after_the_round_ended_says_nothing_was_running(tray: Tray) -> None:
    """Regression: it said "Training paused at its checkpoint" though no round ran."""
    import dataclasses

    tray.state = dataclasses.replace(snapshot(tray.runtime), training=True)  # drawn mid-round
    click_drawn(tray, "Stop training")
    assert events(tray.service)[0] == "No training round was running, so there was nothing to stop."


def test_a_snooze_that_ended_is_not_shown(tray: Tray) -> None:
    """Regression: the menu kept saying "Snooze notifications (until 14:05)" after 14:05,
    with "Ask again now" offered for a snooze that no longer held anything back."""
    from datetime import datetime, timedelta

    tray.runtime.snooze("hour")
    tray.runtime.snoozed_until = datetime.now().astimezone() - timedelta(minutes=5)  # an hour on
    state = snapshot(tray.runtime)
    assert state.snoozed_until is None
    assert str(find(tray, "Snooze notifications").text) == "Snooze notifications"
    assert find(tray, "Snooze notifications", "Ask again now").enabled is False
    assert tray.runtime.health()["snoozed_until"] is None


# -- pictures and where a tray can show ------------------------------------------------


def test_each_mode_draws_a_different_icon() -> None:
    pictures = [
        draw(mode, pct).tobytes()
        for mode, pct in ((IDLE, None), (ATTENTION, None), (TRAINING, 0), (TRAINING, 60))
    ]
    assert len(set(pictures)) == 4
    assert draw(TRAINING, 60).size == (64, 64)


def test_why_no_tray_names_the_missing_display() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the display check is Linux-only")
    reason = why_no_tray({"PATH": "/usr/bin"})
    assert reason == "there is no display (DISPLAY and WAYLAND_DISPLAY are unset)"
    assert "pystray's test backend" in str(why_no_tray({"PYSTRAY_BACKEND": "dummy"}))


def test_a_backend_that_cannot_run_fails_without_leaving_the_process_hanging(tray: Tray) -> None:
    """pystray starts a non-daemon setup thread before its loop; a loop that raises must
    not leave that thread waiting forever (a CLI could then never exit)."""
    import threading

    before = {t.ident for t in threading.enumerate()}
    with pytest.raises(NotImplementedError):
        tray.run()  # the dummy backend has no loop
    deadline = time.monotonic() + 5
    while [t for t in threading.enumerate() if t.ident not in before and not t.daemon]:
        assert time.monotonic() < deadline, "pystray's setup thread is still waiting"
        time.sleep(0.05)
