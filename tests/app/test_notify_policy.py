"""notify_policy: every rule of "ask about this turn?" on a fixed clock, and the snooze ends."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from rltray.app.config import NotifySettings
from rltray.app.desktop.notify_policy import (
    in_quiet_hours,
    should_ask,
    should_tell_training,
    snooze_for,
    snooze_until_tomorrow,
)

NOON = datetime(2026, 3, 10, 12, 0)


def ask(
    settings: NotifySettings | None = None,
    *,
    seconds: float | None = 90.0,
    ordinal: int = 1,
    now: datetime = NOON,
    snoozed_until: datetime | None = None,
    already_rated: bool = False,
) -> tuple[bool, str]:
    return should_ask(
        seconds, ordinal, settings or NotifySettings(), now, snoozed_until, already_rated
    )


def test_defaults_ask_about_every_turn() -> None:
    assert ask() == (True, "")
    assert ask(seconds=None) == (True, "")


def test_a_rated_turn_is_never_asked_about_whatever_the_settings() -> None:
    ok, reason = ask(already_rated=True)
    assert not ok and "already rated" in reason
    # even when every other rule would ask
    assert not ask(NotifySettings(ask="every"), already_rated=True)[0]


def test_disabled_never_asks() -> None:
    ok, reason = ask(NotifySettings(enabled=False))
    assert not ok and "notify.enabled" in reason


def test_never_mode() -> None:
    ok, reason = ask(NotifySettings(ask="never"))
    assert not ok and '"never"' in reason


@pytest.mark.parametrize(
    ("ordinal", "expected"), [(1, False), (2, False), (3, True), (4, False), (6, True), (9, True)]
)
def test_nth_mode_asks_about_turns_n_2n_3n(ordinal: int, expected: bool) -> None:
    ok, reason = ask(NotifySettings(ask="nth", every_nth=3), ordinal=ordinal)
    assert ok is expected
    if not ok:
        assert f"one turn in 3 is asked about and this is #{ordinal}" == reason


def test_nth_mode_with_n_1_asks_every_turn() -> None:
    assert all(ask(NotifySettings(ask="nth", every_nth=1), ordinal=n)[0] for n in range(1, 5))


def test_ordinal_counts_from_one() -> None:
    with pytest.raises(ValueError, match="counts from 1"):
        ask(ordinal=0)


def test_long_mode_asks_only_from_the_threshold_up() -> None:
    settings = NotifySettings(ask="long", min_turn_seconds=60)
    assert ask(settings, seconds=60.0) == (True, "")
    assert ask(settings, seconds=3600.0) == (True, "")
    ok, reason = ask(settings, seconds=59.9)
    assert not ok and "min_turn_seconds (60 s)" in reason


def test_long_mode_skips_a_turn_of_unknown_length() -> None:
    ok, reason = ask(NotifySettings(ask="long"), seconds=None)
    assert not ok and "unknown" in reason


def test_other_modes_ignore_the_turn_length() -> None:
    assert ask(NotifySettings(ask="every", min_turn_seconds=600), seconds=1.0)[0]


def test_snooze_holds_until_its_end() -> None:
    until = NOON + timedelta(minutes=30)
    ok, reason = ask(snoozed_until=until)
    assert not ok and "snoozed until 2026-03-10 12:30" in reason
    assert ask(snoozed_until=until, now=until) == (True, "")
    assert ask(snoozed_until=NOON - timedelta(seconds=1)) == (True, "")


def test_snooze_with_aware_times() -> None:
    tz = ZoneInfo("Europe/Berlin")
    now = datetime(2026, 3, 10, 12, 0, tzinfo=tz)
    assert not ask(now=now, snoozed_until=snooze_for(now))[0]
    # the same instant written in another zone is still the end of the snooze
    assert ask(now=now, snoozed_until=now.astimezone(timezone.utc))[0]


@pytest.mark.parametrize(
    ("hhmm", "quiet"),
    [
        ("21:59", False),
        ("22:00", True),
        ("23:59", True),
        ("00:00", True),
        ("03:30", True),
        ("07:59", True),
        ("08:00", False),
        ("12:00", False),
    ],
)
def test_quiet_hours_across_midnight(hhmm: str, quiet: bool) -> None:
    hour, minute = map(int, hhmm.split(":"))
    now = NOON.replace(hour=hour, minute=minute)
    settings = NotifySettings(quiet_hours="22:00-08:00")
    ok, reason = ask(settings, now=now)
    assert ok is not quiet
    if quiet:
        assert reason == "it is quiet hours (22:00-08:00)"


@pytest.mark.parametrize(
    ("hhmm", "quiet"), [("11:59", False), ("12:00", True), ("12:59", True), ("13:00", False)]
)
def test_quiet_hours_within_a_day(hhmm: str, quiet: bool) -> None:
    hour, minute = map(int, hhmm.split(":"))
    assert in_quiet_hours("12:00-13:00", NOON.replace(hour=hour, minute=minute)) is quiet


def test_no_quiet_hours() -> None:
    assert not in_quiet_hours("", NOON)
    assert not in_quiet_hours("", NOON.replace(hour=3))


def test_quiet_hours_use_the_wall_clock_of_an_aware_time() -> None:
    now = datetime(2026, 7, 1, 23, 0, tzinfo=ZoneInfo("America/New_York"))
    assert in_quiet_hours("22:00-08:00", now)
    # the same instant is 12:00 in Tokyo: outside the window there
    assert not in_quiet_hours("22:00-08:00", now.astimezone(ZoneInfo("Asia/Tokyo")))


def test_rules_order_already_rated_then_disabled_then_snooze_then_quiet() -> None:
    night = NOON.replace(hour=23)
    everything = dict(now=night, snoozed_until=night + timedelta(hours=1))
    settings = NotifySettings(enabled=False, quiet_hours="22:00-08:00")
    assert "already rated" in ask(settings, already_rated=True, **everything)[1]
    assert "notify.enabled" in ask(settings, **everything)[1]
    settings = NotifySettings(quiet_hours="22:00-08:00")
    assert "snoozed" in ask(settings, **everything)[1]
    assert "quiet hours" in ask(settings, now=night)[1]


def test_snooze_for_an_hour_and_for_other_lengths() -> None:
    assert snooze_for(NOON) == NOON + timedelta(hours=1)
    assert snooze_for(NOON, hours=2.5) == NOON + timedelta(hours=2, minutes=30)
    with pytest.raises(ValueError, match="positive"):
        snooze_for(NOON, hours=0)


def test_snooze_for_lasts_real_hours_across_a_clock_change() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    before = datetime(2026, 3, 29, 1, 30, tzinfo=berlin)  # clocks jump 02:00 -> 03:00
    end = snooze_for(before)
    assert end.hour == 3 and end.minute == 30
    assert end.astimezone(timezone.utc) - before.astimezone(timezone.utc) == timedelta(hours=1)


@pytest.mark.parametrize(
    ("now", "until"),
    [
        (datetime(2026, 3, 10, 12, 0), datetime(2026, 3, 11, 8, 0)),
        (datetime(2026, 3, 10, 23, 30), datetime(2026, 3, 11, 8, 0)),
        (datetime(2026, 3, 10, 7, 0), datetime(2026, 3, 11, 8, 0)),
        (datetime(2026, 3, 10, 4, 0), datetime(2026, 3, 11, 8, 0)),
        # past midnight, before 04:00: "tomorrow" is this coming morning
        (datetime(2026, 3, 11, 0, 30), datetime(2026, 3, 11, 8, 0)),
        (datetime(2026, 3, 11, 3, 59), datetime(2026, 3, 11, 8, 0)),
        # end of month and year
        (datetime(2026, 12, 31, 18, 0), datetime(2027, 1, 1, 8, 0)),
    ],
)
def test_snooze_until_tomorrow_ends_at_8_next_morning(now: datetime, until: datetime) -> None:
    assert snooze_until_tomorrow(now) == until
    assert not ask(now=now, snoozed_until=snooze_until_tomorrow(now))[0]


def test_snooze_until_tomorrow_keeps_the_zone_and_its_wall_clock() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    now = datetime(2026, 3, 28, 20, 0, tzinfo=berlin)  # the night of the clock change
    until = snooze_until_tomorrow(now)
    assert until.tzinfo is berlin and (until.day, until.hour, until.minute) == (29, 8, 0)
    assert until.utcoffset() == timedelta(hours=2)


def test_snooze_until_tomorrow_from_the_runtimes_fixed_offset_ends_at_8_local() -> None:
    """Regression: the runtime passes ``datetime.now().astimezone()``, a fixed UTC offset;
    "tomorrow 08:00" kept the evening's offset, so on the night clocks go forward the
    snooze ended at 09:00 local time (and at 07:00 the night they go back)."""
    import os
    import time

    if not hasattr(time, "tzset"):
        pytest.skip("time.tzset() (POSIX) is needed to move the process's local zone")
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    try:
        berlin = ZoneInfo("Europe/Berlin")
        for evening, offset in ((datetime(2026, 3, 28, 23, 0), 2),  # clocks go forward
                                (datetime(2026, 10, 24, 23, 0), 1)):  # and back  # fmt: skip
            now = evening.astimezone()  # as runtime.snooze makes it
            until = snooze_until_tomorrow(now)
            local = until.astimezone(berlin)
            assert (local.day, local.hour, local.minute) == (evening.day + 1, 8, 0)
            assert until.utcoffset() == timedelta(hours=offset)
            assert not ask(now=now, snoozed_until=until)[0]
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_training_news_keeps_quiet_hours_snooze_and_its_own_switch() -> None:
    """Issue 22: a round's end is told, under the same quiet rules as ratings."""
    assert should_tell_training(NotifySettings(), NOON, None) == (True, "")
    quiet = NotifySettings(quiet_hours="11:00-13:00")
    assert should_tell_training(quiet, NOON, None)[1] == "it is quiet hours (11:00-13:00)"
    snoozed = should_tell_training(NotifySettings(), NOON, NOON + timedelta(hours=1))
    assert snoozed[0] is False and "snoozed" in snoozed[1]
    off = should_tell_training(NotifySettings(training=False), NOON, None)
    assert off == (False, "training notifications are turned off (notify.training = false)")
