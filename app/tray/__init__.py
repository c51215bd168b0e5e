"""The tray icon and its menu (pystray, on the main thread), over a running Runtime.

Threads, and why: pystray owns the main thread (macOS requires it). Menu
clicks arrive on that GUI thread and must never block it, so each action is
handed to the runtime's worker thread (``Runtime.submit``), which also
serialises it with ingest and notification clicks. The one door *into* the
tray is ``Tray.refresh()``: any thread may call it; a refresher thread then
takes a ``TrayState`` snapshot and, only when it changed, redraws the icon and
rebuilds the menu through pystray (whose GTK backends marshal onto the GUI
loop). Nothing else touches pystray objects.

What a click says back: a short plain notification (``Notifier.tell``), so a
click from the menu is never silent, and a failure is one sentence.

What a click means is fixed when the menu is drawn: the menu shows one
``TrayState`` and the worker may run the click seconds later, after another
agent finished a turn or a terminal changed a setting. So each item carries
what it showed (the turn it named, the checkbox state the user saw), and a
rating carries the click's own time (``Service.rate(at=)``), so a `/rl` typed
after it stays the last word even when it is stored first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from rltray.app.errors import UserError
from rltray.app.tray.state import TrayState, snapshot

if TYPE_CHECKING:
    from rltray.app.runtime import Runtime

log = logging.getLogger(__name__)
REFRESH_SECONDS = 2.0  # how often the icon follows training progress on its own
IDLE_REFRESH_SECONDS = 30.0  # otherwise: changes wake it; this catches edits by the CLI


def why_no_tray(env: dict[str, str] | None = None) -> str | None:
    """None when a tray icon with a menu can be shown here, else the reason in one sentence.

    Linux needs a display and PyGObject with GTK (pystray's appindicator and
    gtk backends; its xorg fallback has no menu). macOS and Windows always can.
    """
    env = dict(os.environ) if env is None else env
    backend = env.get("PYSTRAY_BACKEND")
    if backend == "dummy":
        return "PYSTRAY_BACKEND is 'dummy', pystray's test backend, which shows nothing"
    if not sys.platform.startswith("linux"):
        return None
    if not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return "there is no display (DISPLAY and WAYLAND_DISPLAY are unset)"
    try:
        import gi

        gi.require_version("Gtk", "3.0")
        from gi.repository import Gtk  # noqa: F401
    except (ImportError, ValueError) as exc:
        return (
            f"the tray needs PyGObject with GTK 3 ({exc}); on Debian/Ubuntu: sudo apt install "
            "python3-gi gir1.2-ayatanaappindicator3-0.1 gir1.2-webkit2-4.1, then `make run` "
            "again (it gives a checkout's venv the desktop's PyGObject)"
        )
    return None


def display_present(env: dict[str, str] | None = None) -> bool:
    """Whether a window can show here (a Linux desktop session names its display)."""
    env = dict(os.environ) if env is None else env
    if not sys.platform.startswith("linux"):
        return True
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


WATCHER = "org.kde.StatusNotifierWatcher"


def tray_host_present(env: dict[str, str] | None = None, timeout: float = 2.0) -> bool | None:
    """Whether the Linux desktop shows AppIndicator icons (a StatusNotifierWatcher owns its name).

    None when that cannot be asked (no session bus). Vanilla GNOME has no
    watcher unless the AppIndicator extension is on: the icon then exists but
    nobody draws it, which the user should hear once rather than wonder.
    """
    from rltray.app.desktop import dbus as dbusquery

    env = dict(os.environ) if env is None else env
    address = env.get("DBUS_SESSION_BUS_ADDRESS")
    if not address:
        return None
    return dbusquery.name_has_owner(address, WATCHER, timeout)


class Tray:
    """One icon over one running Runtime; ``run()`` blocks the calling (main) thread."""

    def __init__(self, runtime: Runtime) -> None:
        import pystray
        from rltray.app.tray import icon as trayicon
        from rltray.app.tray import menubar

        if not runtime.running:
            raise RuntimeError("start the runtime before its tray")
        self.runtime = runtime
        self.service = runtime.service
        self._pystray = pystray
        self._draw = trayicon.draw
        self.state: TrayState = snapshot(runtime)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._refresher = threading.Thread(
            target=self._follow, name="rltray-tray-refresh", daemon=True
        )
        self.icon = menubar.icon_class(pystray.Icon)(
            "rltray",
            self._draw(self.state.mode, self.state.percent),
            self.state.tooltip,
            menu=pystray.Menu(self._items),
        )

    # -- the door ----------------------------------------------------------------

    def refresh(self) -> None:
        """Ask for a redraw from any thread; returns at once."""
        self._wake.set()

    # -- lifecycle -----------------------------------------------------------------

    def run(self, ready: Callable[[Tray], None] | None = None) -> None:
        """Show the icon and block until Quit (or ``stop()`` from any thread).

        ``ready`` runs on the icon's setup thread once it is visible.
        """
        self.service.listeners.append(self.refresh)

        def setup(icon: Any) -> None:
            if self._stopping.is_set():  # released after a failed start: nothing to show
                return
            icon.visible = True
            self._refresher.start()
            if ready is not None:
                ready(self)

        try:
            self.icon.run(setup)
        except Exception as exc:
            # GTK backends close a notification at stop that some servers reject
            # (DESKTOP-STACK §2.4); a failure while stopping is not the user's problem.
            if not self._stopping.is_set():
                # pystray's setup thread (not a daemon) waits for a loop that never
                # started; release it, or this process could never exit.
                self._stopping.set()
                mark_ready = getattr(self.icon, "_mark_ready", None)
                if mark_ready is not None:
                    with contextlib.suppress(Exception):
                        mark_ready()
                raise
            log.debug("ignored while stopping the tray: %s", exc)
        finally:
            self._stopping.set()
            self._wake.set()
            self.service.listeners.remove(self.refresh)

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        self.icon.stop()

    def _follow(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(REFRESH_SECONDS if self.state.training else IDLE_REFRESH_SECONDS)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                state = snapshot(self.runtime)
            except Exception:
                log.exception("could not read the tray state")
                continue
            if state != self.state:
                self._show(state)

    def _show(self, state: TrayState) -> None:
        if sys.platform == "darwin":
            # pystray's GTK backends marshal onto their loop themselves; AppKit objects
            # may only be touched on the main thread, so hand the redraw over there.
            from Foundation import NSOperationQueue  # pyobjc, a pystray dependency on macOS

            NSOperationQueue.mainQueue().addOperationWithBlock_(lambda: self._apply(state))
            return
        self._apply(state)

    def _apply(self, state: TrayState) -> None:
        old, self.state = self.state, state
        if (old.mode, old.percent) != (state.mode, state.percent):
            self.icon.icon = self._draw(state.mode, state.percent)
        if old.tooltip != state.tooltip:
            self.icon.title = state.tooltip
        self.icon.update_menu()

    # -- the menu --------------------------------------------------------------------

    def _items(self) -> list[Any]:
        item, menu, s = self._pystray.MenuItem, self._pystray.Menu, self.state
        info = [item(s.status, None, enabled=False), item(s.next_training, None, enabled=False)]
        info += [item(f"⚠ {p}", None, enabled=False) for p in s.problems]
        rollback = [
            item(
                choice.label,
                self._action(lambda v=choice.version: self._rollback(v)),
                checked=lambda _, c=choice: c.active,
                radio=True,
            )
            for choice in s.versions
        ]
        snooze = [
            item("For 1 hour", self._action(lambda: self._snooze("hour"))),
            item("Until tomorrow", self._action(lambda: self._snooze("tomorrow"))),
            item(
                "Ask again now",
                self._action(lambda: self._snooze(None)),
                enabled=s.snoozed_until is not None,
            ),
        ]
        training = (
            item("Stop training (resumes later)", self._action(self._stop_training))
            if s.training
            else item("Train now", self._action(self._train_now))
        )
        rate = [item(s.last_label, None, enabled=False)] if s.last_label else []
        rate += [
            item("Good", self._rate_action(1, s.last_turn)),
            item("Bad", self._rate_action(-1, s.last_turn)),
        ]
        return [
            *info,
            menu.SEPARATOR,
            item("Rate last answer", menu(*rate)),
            training,
            item(
                "Pause automatic training",
                # a click asks for the other state than the one drawn, whatever changed since
                self._action(lambda want=not s.paused: self._set_paused(want)),
                checked=lambda _, shown=s.paused: shown,
            ),
            item(
                "Snooze notifications" + (f" (until {s.snoozed_until})" if s.snoozed_until else ""),
                menu(*snooze),
            ),
            item("Roll back", menu(*rollback)),
            menu.SEPARATOR,
            item("Open settings", self._action(self._open_settings)),
            item("Setup wizard…", self._action(lambda: self._open_settings("setup"))),
            item("Quit rltray", self._quit),
        ]

    def _action(self, job: Callable[[], str | None]) -> Callable[[Any, Any], None]:
        """A menu callback that runs ``job`` on the service's worker and says what happened."""

        def clicked(icon: Any, item: Any) -> None:
            if self.runtime.running:
                self.runtime.submit(lambda: self._run_job(job))

        return clicked

    def _rate_action(self, value: int, turn_id: int | None) -> Callable[[Any, Any], None]:
        """A rating item's callback: rates ``turn_id`` (the turn the menu named) as of the
        click, however long the worker takes to get to it."""

        def clicked(icon: Any, item: Any) -> None:
            at = datetime.now(timezone.utc)
            if self.runtime.running:
                self.runtime.submit(lambda: self._run_job(lambda: self._rate(value, turn_id, at)))

        return clicked

    def _run_job(self, job: Callable[[], str | None]) -> None:
        try:
            said = job()
        except UserError as exc:
            said = str(exc)
        except Exception as exc:  # shown, logged, and the tray stays up
            log.exception("tray action failed")
            said = f"That did not work: {type(exc).__name__}: {exc}"
        if said:
            self._tell(said)
        self.refresh()

    def _tell(self, text: str) -> None:
        notifier = self.runtime.notifier
        if notifier is not None:
            notifier.tell("rltray", text)
        self.service.store.log_event("tray", text)

    # -- what each item does (on the worker thread) ---------------------------------

    def _rate(self, value: int, turn_id: int | None, at: datetime | None = None) -> str:
        """Rate the turn the menu named (``TrayState.last_turn``), as of the click ``at``."""
        from rltray.app.words import preview, word

        if turn_id is None:
            return ("No turn has been captured yet: finish a turn in Claude Code or Codex "
                    "first (run `rltray hooks status` to check that capture works).")
        turn = self.service.store.get_turn(turn_id)
        if turn is None:
            return f"Not rated: turn {turn_id} was deleted since the menu was drawn."
        current = turn.rating
        if current is not None and current.value != value and current.source != "tray":
            # The tray's own click may be corrected from the tray; a rating given elsewhere
            # (the agent, the CLI, a notification) is not flipped quietly.
            return (f"Not rated: the newest answer (turn {turn.id}, {turn.agent}: "
                    f"{preview(turn.prompt or turn.response)}) is already rated "
                    f"{word(current.value)} in the {current.source}; change it in "
                    "the ratings window.")
        self.service.rate(turn.id, value, source="tray", at=at)
        return f"Rated {word(value)}: turn {turn.id} — {preview(turn.prompt or turn.response)}"

    def _train_now(self) -> str:
        started = self.runtime.train_now()
        return f"Training run {started['run']} started."

    def _stop_training(self) -> str:
        if not self.service.runner().stop(pause=True):  # it ended before the click ran
            return "No training round was running, so there was nothing to stop."
        said = "Training paused at its checkpoint; Train now resumes it"
        automatic = self.service.settings().training.automatic
        if automatic and not self.runtime.training_status().get("stopped"):
            return said + ", and so does the next idle time."
        return said + " (automatic training is off, so nothing else will)."

    def _set_paused(self, paused: bool) -> str:
        """Pause (or resume) automatic training, as the checkbox the user saw asked.

        Not a toggle of the current setting: `rltray pause` in a terminal may have
        changed it after the menu was drawn, and ticking an unticked box means pause.
        """
        if self.service.settings().training.automatic != paused:
            return ("Automatic training was already paused." if paused
                    else "Automatic training was already on.")  # fmt: skip
        self.service.set_automatic(not paused)
        return "Automatic training paused." if paused else "Automatic training resumed."

    def _snooze(self, until: str | None) -> str:
        end = self.runtime.snooze(until)["snoozed_until"]
        return f"No rating questions until {end[11:16]}." if end else "Asking for ratings again."

    def _rollback(self, version: int | None) -> str:
        result = self.service.rollback(0 if version is None else version)
        active = result["active"]
        said = f"Now using v{active}." if active else "Now using the base model (no adapter)."
        return f"{said} Ollama: {result['ollama']}" if result.get("ollama") else said

    def _open_settings(self, page: str = "") -> None:
        self.runtime.open_settings(page)

    def _quit(self, icon: Any, item: Any) -> None:
        self.stop()


def run_tray(runtime: Runtime, ready: Callable[[Tray], None] | None = None) -> None:
    """Show the tray for a started runtime until Quit, SIGINT or SIGTERM (tray/signals.py)."""
    from rltray.app.tray import signals

    tray = Tray(runtime)

    def stop(*_: object) -> None:
        tray.stop()

    claimed = signals.route(tray.icon, stop)

    def on_ready(shown: Tray) -> None:
        claimed.wait(5.0)  # the handlers are in place before anything (a window) starts
        if ready is not None:
            ready(shown)

    tray.run(on_ready)
