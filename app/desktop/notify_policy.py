"""Whether to ask the user to rate a finished turn: one pure function and two snooze helpers.

Why a pure function (STYLE.md habit 5): the tray calls it for every captured
turn, and the rules (the ``ask`` mode, quiet hours, snooze, turns already rated
with ``/rl`` or the CLI) must be testable with a fixed clock and no notifier.
The answer comes with a reason so the tray log and ``rltray status`` can say
why a turn was not asked about.

Times: ``now_local`` is the user's local wall clock (quiet hours are read from
its hour and minute). ``now_local`` and ``snoozed_until`` must both be naive
local times or both timezone-aware; Python refuses to compare one with the other.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta, timezone

from rltray.app.config import NotifySettings, parse_quiet_hours

TOMORROW_AT = time(8, 0)
"""``snooze_until_tomorrow`` ends at this local time."""

LATE_NIGHT_UNTIL = time(4, 0)
"""Before this time "tomorrow" still means the coming morning, not the day after."""


def should_ask(
    turn_seconds: float | None,
    ordinal: int,
    settings: NotifySettings,
    now_local: datetime,
    snoozed_until: datetime | None,
    already_rated: bool,
) -> tuple[bool, str]:
    """``(True, "")`` to ask about this turn, else ``(False, reason)``.

    ``turn_seconds`` is how long the agent worked on the turn (``None``: unknown);
    ``ordinal`` is the turn's 1-based position in the count the caller keeps for
    ``ask = "nth"``, which asks about turns N, 2N, 3N, ... . With ``ask = "long"``
    a turn of unknown length is not asked about: the user chose to hear only about
    long turns, and an unknown one may be short.

    The checks run from the most to the least definite, so the reason names the
    rule that matters most: a turn already rated (by ``/rl`` or the CLI) is never
    asked about again, whatever the settings.
    """
    if ordinal < 1:
        raise ValueError(f"ordinal counts from 1, got {ordinal}")
    if already_rated:
        return False, "the turn is already rated"
    if not settings.enabled:
        return False, "rating notifications are turned off (notify.enabled = false)"
    if settings.ask == "never":
        return False, 'notify.ask is "never"'
    if snoozed_until is not None and now_local < snoozed_until:
        return False, f"notifications are snoozed until {snoozed_until:%Y-%m-%d %H:%M}"
    if in_quiet_hours(settings.quiet_hours, now_local):
        return False, f"it is quiet hours ({settings.quiet_hours})"
    if settings.ask == "nth" and ordinal % settings.every_nth != 0:
        return False, f"one turn in {settings.every_nth} is asked about and this is #{ordinal}"
    if settings.ask == "long":
        if turn_seconds is None:
            return False, "the turn's duration is unknown and only long turns are asked about"
        if turn_seconds < settings.min_turn_seconds:
            return False, (
                f"the turn took {turn_seconds:.0f} s, under notify.min_turn_seconds "
                f"({settings.min_turn_seconds} s)"
            )
    return True, ""


def should_tell_training(
    settings: NotifySettings, now_local: datetime, snoozed_until: datetime | None
) -> tuple[bool, str]:
    """``(True, "")`` to tell that a training round ended, else ``(False, reason)``.

    The same quiet rules as rating notifications (off, snoozed, quiet hours), with
    their own switch; the news stays in the tray, `rltray runs` and the dashboard.
    """
    if not settings.training:
        return False, "training notifications are turned off (notify.training = false)"
    if snoozed_until is not None and now_local < snoozed_until:
        return False, f"notifications are snoozed until {snoozed_until:%Y-%m-%d %H:%M}"
    if in_quiet_hours(settings.quiet_hours, now_local):
        return False, f"it is quiet hours ({settings.quiet_hours})"
    return True, ""


def in_quiet_hours(quiet_hours: str, now_local: datetime) -> bool:
    """Whether the wall-clock time of ``now_local`` falls in ``"HH:MM-HH:MM"``.

    The start is inside the window and the end is not, so "22:00-08:00" is quiet
    from 22:00 through 07:59 and a window may cross midnight.
    """
    window = parse_quiet_hours(quiet_hours)
    if window is None:
        return False
    start, end = window
    now = (now_local.hour, now_local.minute)
    if start < end:
        return start <= now < end
    return now >= start or now < end


def snooze_for(now: datetime, hours: float = 1) -> datetime:
    """The end of a snooze of ``hours`` real hours from ``now``.

    Aware times are shifted in UTC, so a snooze across a daylight-saving change
    lasts the hours it says rather than the wall-clock difference.
    """
    if hours <= 0:
        raise ValueError(f"a snooze must last a positive number of hours, got {hours}")
    delta = timedelta(hours=hours)
    if now.tzinfo is None:
        return now + delta
    return (now.astimezone(timezone.utc) + delta).astimezone(now.tzinfo)


def snooze_until_tomorrow(now: datetime) -> datetime:
    """The end of "snooze until tomorrow": 08:00 local time on the next morning.

    That is 08:00 on the next calendar day, except between midnight and 04:00,
    when the user has not slept yet and "tomorrow" means this coming morning
    (08:00 on the same date). 08:00 rather than midnight because a snooze that
    ends at midnight would wake the notifications for a late-night session,
    which is exactly what the user asked to stop.

    A fixed UTC offset (what ``datetime.now().astimezone()`` gives) that is the
    system's local one is read as the local zone: the morning may have another
    offset (the night clocks change), and 08:00 means the wall clock's 08:00.
    A real zone (``ZoneInfo``) is kept; so is a fixed offset that is not local.
    """
    day = now.date() if now.time() < LATE_NIGHT_UNTIL else now.date() + timedelta(days=1)
    if isinstance(now.tzinfo, timezone) and now.astimezone().utcoffset() == now.utcoffset():
        return datetime.combine(day, TOMORROW_AT).astimezone()  # naive: local, its own offset
    return datetime.combine(day, TOMORROW_AT, tzinfo=now.tzinfo)
