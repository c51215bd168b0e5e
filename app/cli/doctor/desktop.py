"""`rltray doctor`'s desktop checks: the running service, notifications, idle, power, tray, login.

Apart from doctor.py because these ask the desktop (D-Bus, the display, the
login entry) rather than the data folder; each part may fail on its own and
becomes a "not checked" line instead of hiding the others.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rltray.app.cli.doctor.check import FAIL, OK, WARN, Check

if TYPE_CHECKING:
    from rltray.app.cli.context import Context
    from rltray.app.service import Service


def desktop_checks(ctx: Context, service: Service) -> Iterator[Check]:
    """The running service, its notifications, idle time, power, tray and login start."""
    for part in (_service_and_notifications, _idle_and_power, _tray_and_autostart):
        try:
            yield from part(ctx, service)
        except Exception as exc:  # one broken probe must not hide the rest
            yield Check(part.__name__.strip("_").replace("_", " "), WARN, f"not checked: {exc}")


def _service_and_notifications(ctx: Context, service: Service) -> Iterator[Check]:
    from rltray.app.api.client import ApiClient

    client = ApiClient.find(service.paths)
    if client is None:
        yield Check(
            "service",
            WARN,
            "not running: nothing asks for ratings or trains on its own",
            "rltray run (and `rltray autostart on` to start it at login)",
        )
        problems = _probe_notifications()
    else:
        health = client.call("GET", "/api/health")
        yield Check("service", OK, f"running (pid {health.get('pid')})")
        if health.get("token_in_file"):
            yield Check(
                "api token",
                WARN,
                f"kept in {service.paths.endpoint} (mode 0600) because no keyring is available; "
                "any program running as you can read it",
                "install/unlock GNOME Keyring or KWallet, then restart rltray",
            )
        problems = health.get("notifications")
        if problems is None:
            yield Check("notifications", WARN, "turned off in this running rltray")
            return
    if problems:
        yield Check("notifications", WARN, " ".join(problems))
    else:
        yield Check("notifications", OK, "the notification server shows Good / Bad buttons")


def _probe_notifications() -> list[str]:
    """Ask the notification server what it can do, as the service would; shows nothing."""
    from rltray.app.desktop.notifier import Notifier

    notifier = Notifier(lambda *_: None, dispatch_timeout=3.0)
    try:
        notifier.start().result(5)
        return notifier.delivery_problems()
    finally:
        notifier.close()


def _idle_and_power(ctx: Context, service: Service) -> Iterator[Check]:
    from rltray.app.desktop.idle import on_ac_power, probe_idle

    probe = probe_idle()
    if probe.seconds is None:
        yield Check(
            "idle time",
            WARN,
            "cannot tell when you are away, so automatic training never starts: "
            + "; ".join(probe.problems),
            "use `rltray train` (or Train now in the tray) to train by hand",
        )
    else:
        yield Check("idle time", OK, f"{probe.seconds:.0f} s idle (read from {probe.source})")
    power = on_ac_power()
    if power is None:
        yield Check("power", WARN, "cannot tell whether this machine runs on battery")
    else:
        yield Check("power", OK, "on AC power" if power else "on battery (training waits for AC)")


def _tray_and_autostart(ctx: Context, service: Service) -> Iterator[Check]:
    from rltray.app.desktop import autostart
    from rltray.app.tray import tray_host_present, why_no_tray

    reason = why_no_tray(ctx.env)
    if reason:
        yield Check("tray", WARN, f"no tray icon: {reason}; rltray runs without one")
    elif sys.platform.startswith("linux") and tray_host_present(ctx.env) is False:
        yield Check(
            "tray",
            WARN,
            "this desktop draws no tray icons (nothing owns org.kde.StatusNotifierWatcher; "
            "on GNOME that needs the AppIndicator extension); notifications, the CLI and "
            "the launcher entry still work",
            "GNOME: install gnome-shell-extension-appindicator and log in again",
        )
    else:
        yield Check("tray", OK, "a tray icon can be shown here")
    state = autostart.status(ctx.env)
    if state.unsafe:  # every login would run whatever another user put at that path
        from rltray.app import bundle

        yield Check("start at login", FAIL, state.problem or state.unsafe,
                    f"rltray autostart off; {bundle.MOVE_IT}, then `rltray autostart on` "
                    "from there")  # fmt: skip
    elif state.problem:
        yield Check("start at login", WARN, state.problem, "rltray autostart on")
    elif state.enabled:
        yield Check("start at login", OK, state.where)
    else:
        yield Check("start at login", WARN, "off", "rltray autostart on")
