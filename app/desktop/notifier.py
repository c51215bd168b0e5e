"""Rating notifications with Good / Bad buttons, on a thread of their own.

Why this shape (DESKTOP-STACK.md §1.4): desktop-notifier is asyncio code and
its button callbacks need a running loop, while pystray owns the main thread.
So each ``Notifier`` runs one asyncio loop on a daemon thread and creates its
``DesktopNotifier`` there; the public methods only schedule work on that loop
and return at once, from any thread. Nothing lives at module level, so two
notifiers (two services in one test) never share state.

Threads: ``on_rating(turn_id, value, comment)`` runs **on the notifier's loop
thread** (Linux, Windows; on macOS desktop-notifier calls it from the main
thread's run loop, DESKTOP-STACK.md §1.4). Either way the receiver must hand
the rating off (a ``queue.Queue``, the service's own door) and return; it must
never touch pystray or other GUI objects, and a slow receiver delays every
other notification.

Delivery: desktop-notifier's ``send()`` never raises (it logs "Notification
failed"), so a send counts as delivered only when ``on_dispatched`` fired, and
the notification server is probed once at start with ``get_capabilities()``,
which does raise. ``on_dispatched`` alone is not proof either: desktop-notifier's
dummy backend and an unauthorised macOS backend fire it too, so nothing is sent
(or counted) unless ``request_authorisation()`` said yes and the backend is a
real one (notify_access.py). What went wrong is kept as one sentence per kind of
problem for ``rltray doctor``, the self-test and the tray (``delivery_problems()``)
and logged.

Each notification's buttons carry their own turn id: a press rates exactly the
turn that was asked about, never "the newest". Dismissing or letting it expire
rates nothing.

Ids belong to one server: one that restarts (dunst reloaded, GNOME Shell
restarted) numbers from 1 again, for other apps too. So when the owner of
org.freedesktop.Notifications changes, every id held (ours and desktop-notifier's)
is forgotten: a withdraw never closes another app's bubble, and a press on a new
bubble reusing an old id (ActionInvoked is broadcast) never rates the old turn.
What is kept per notification goes when it ends, however it ends; a ``tell()`` is
let go once sent. Where the server reads bodies as markup (``body-markup``), an
answer's ``<``, ``>`` and ``&`` are escaped so they show as typed.

This module imports desktop-notifier lazily (on the loop thread), so importing
it costs the CLI nothing; it never imports torch, transformers or mlx.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import html
import logging
import os
import sys
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from rltray.app.desktop import notify_access
from rltray.app.words import NOTIFICATION_CHARS, preview

logger = logging.getLogger(__name__)

RatingCallback = Callable[[int, int, str | None], None]
"""``on_rating(turn_id, value, comment)``: value +1 for Good, -1 for Bad."""

DeliveredCallback = Callable[[int], None]
"""``on_delivered(turn_id)``: the server accepted the notification for this turn."""

GOOD, BAD = "good", "bad"
COMMENT_TITLE = "Bad, say why…"
"""The reply field's title: a comment comes with a Bad rating (why it was bad)."""

NO_BUS = (
    "No D-Bus session bus to show notifications on (DBUS_SESSION_BUS_ADDRESS is unset or "
    "unreachable); run rltray inside your desktop session."
)
NO_SERVER = (
    "No notification server on the session bus (org.freedesktop.Notifications); install one "
    "(dunst, GNOME Shell, KDE Plasma, xfce4-notifyd) or start your desktop's, and rate with "
    "`rltray good`/`rltray bad` until then."
)
NO_BUTTONS = (
    "The notification server cannot show buttons, so Good/Bad cannot be pressed in "
    "notifications; rate with /rl good|bad or `rltray good`/`rltray bad`, or use a server "
    "with actions (dunst, GNOME Shell, KDE Plasma)."
)
NO_LIBRARY = (
    "The desktop-notifier package is missing, so rltray cannot show notifications; "
    "reinstall rltray (pip install --force-reinstall rltray)."
)
NOTIFICATIONS = "org.freedesktop.Notifications"
DBUS = "org.freedesktop.DBus"
OWNER_RULE = (
    f"type='signal',sender='{DBUS}',interface='{DBUS}',member='NameOwnerChanged',"
    f"arg0='{NOTIFICATIONS}'"
)
"""The match rule for a change of the notification server (a restart, another server)."""

NOT_DELIVERED = (
    "A rating notification could not be delivered to the notification server (see the "
    "rltray log); check that your desktop's notification service is running."
)


def title_for(agent: str, cwd: str | None) -> str:
    """``("claude-code", "/home/me/myproject")`` -> ``"Claude Code · myproject"``."""
    from rltray.app.hooks import registry

    name = registry.display_names().get(agent, agent)
    project = os.path.basename(os.path.normpath(cwd)) if cwd else ""
    return f"{name} · {project}" if project else name


def describe_failure(exc: BaseException) -> str:
    """One sentence for why the notification server could not be reached.

    Matched by name, not by class, so this module never imports dbus-fast
    (absent on macOS and Windows).
    """
    kind = type(exc).__name__
    error_type = str(getattr(exc, "type", ""))
    if kind == "InvalidAddressError" or isinstance(exc, (OSError, EOFError)):
        return NO_BUS
    if error_type.endswith(("ServiceUnknown", "NameHasNoOwner", "ServiceNotFound")):
        return NO_SERVER
    if isinstance(exc, ImportError):
        return NO_LIBRARY
    return f"The notification server failed when rltray probed it ({kind}: {exc})."


class Notifier:
    """Rating notifications for one service; every public method is thread-safe.

    ``on_delivered(turn_id)`` (optional, loop thread like ``on_rating``) runs
    once the server accepted a turn's notification, so the service can record
    that the turn was asked about; from then on its buttons are live.

    ``comments``: offer a reply field for a comment (sent with a Bad rating).
    ``None`` means where desktop-notifier supports it, which is macOS only
    (Linux servers other than KDE have no inline reply). ``icon`` is a named
    icon (the launcher entry's ``Icon=rltray``), an image file (``appicon.install``'s,
    which a server finds without an icon theme) or ``None`` for the server's.
    ``platform`` picks the sentences that say what works instead (tests pass any).

    Work on the loop runs one job at a time (an asyncio lock): desktop-notifier
    opens its bus connection lazily, and concurrent first sends would each open
    one and leak all but the last.
    """

    def __init__(
        self,
        on_rating: RatingCallback,
        *,
        on_delivered: DeliveredCallback | None = None,
        app_name: str = "rltray",
        icon: str | Path | None = "rltray",
        comments: bool | None = None,
        dispatch_timeout: float = 5.0,
        platform: str = sys.platform,
    ) -> None:
        self._on_rating = on_rating
        self._on_delivered = on_delivered
        self._app_name = app_name
        self._icon = icon
        self._platform = platform
        self._comments = platform == "darwin" if comments is None else comments
        self._dispatch_timeout = dispatch_timeout
        self._lock = threading.Lock()  # guards the fields below that other threads read
        self._state = "new"  # new -> running -> closed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._problems: dict[str, str] = {}  # kind -> sentence
        self._waiting: set[concurrent.futures.Future[bool]] = set()  # send_test futures
        # touched only on the loop thread:
        self._one_at_a_time = asyncio.Lock()
        self._desktop: Any = None  # the DesktopNotifier
        self._capabilities: frozenset[Any] = frozenset()
        self._probed = False  # the server answered get_capabilities() once
        self._markup = False  # the server reads bodies as markup (its "body-markup")
        self._watched: Any = None  # the bus connection whose server changes are followed
        self._shown: dict[int, str] = {}  # turn id -> the notification asking about it
        self._groups: dict[str, int] = {}  # session -> the turn its notification asks about
        self._server = 0  # counts changes of notification server (``_server_changed``)

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> concurrent.futures.Future[None]:
        """Start the loop thread; the future resolves once the server was probed.

        Returns at once. Probing never fails the future: problems land in
        ``delivery_problems()``. Calling it again does nothing.
        """
        with self._lock:
            if self._state == "new":
                self._state = "running"
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._run_loop, name=f"{self._app_name}-notifier", daemon=True
                )
                self._thread.start()
                return self._submit(self._setup())
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        done.set_result(None)
        return done

    def close(self, timeout: float = 2.0) -> None:
        """Stop the loop thread and drop the bus connection; later calls are ignored.

        Waits up to ``timeout`` seconds for the thread (a shutdown, not a call
        from the UI path). Unanswered ``send_test()`` futures resolve False.
        """
        with self._lock:
            loop, thread, state = self._loop, self._thread, self._state
            self._state = "closed"
            waiting, self._waiting = self._waiting, set()
        for future in waiting:
            _resolve(future, False)
        if state != "running" or loop is None or thread is None:
            return
        if threading.current_thread() is thread:  # closed from inside a callback
            loop.call_soon(loop.stop)
            return
        try:
            self._submit(self._shutdown(), after_close=True).result(timeout)
        except Exception:  # best effort: the loop stops either way
            logger.debug("notifier shutdown did not finish cleanly", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)

    # -- asking -----------------------------------------------------------------

    def ask(
        self, turn_id: int, title: str, body: str, *, group: str | None = None,
        expire_s: int | None = None,
    ) -> None:  # fmt: skip
        """Show "rate this turn" with Good / Bad buttons; returns at once.

        ``body`` is cut to a 200-character preview here, whatever the caller passed.
        ``group`` (the agent's session): a newer turn's notification takes the place
        of the older one still on screen, which stays unrated, so a session leaves
        one notification, not a stack. ``expire_s``: the server takes it down after
        that many seconds (None: the server's own default).
        """
        with self._lock:
            if self._usable("ask"):
                text = preview(body, NOTIFICATION_CHARS)
                self._submit(self._ask(turn_id, title, text, group, expire_s))

    def withdraw(self, turn_ids: list[int]) -> None:
        """Take down the rating notifications of these turns; returns at once.

        The service calls this whenever a turn's rating changes anywhere (the
        CLI, the agent's ``/rl``, the settings window), so a stale notification
        does not sit on screen inviting a second, contrary answer.
        """
        with self._lock:
            if self._state == "running":
                self._submit(self._withdraw(list(turn_ids)))

    def tell(self, title: str, body: str, *, quiet: bool = False) -> None:
        """A plain notification without buttons; returns at once.

        ``quiet``: low urgency, for news nobody waits for (a training round's end),
        which servers show without sound and may keep out of the way.
        """
        with self._lock:
            if self._usable("tell"):
                self._submit(self._tell(title, preview(body, NOTIFICATION_CHARS), quiet))

    def send_test(self) -> concurrent.futures.Future[bool]:
        """Send a test notification; the future is True once the server accepted it.

        False when it was not dispatched within ``dispatch_timeout`` seconds or
        the notifier is not running; the reason is in ``delivery_problems()``.
        """
        future: concurrent.futures.Future[bool] = concurrent.futures.Future()
        with self._lock:
            if self._usable("send a test notification"):
                self._waiting.add(future)
                self._submit(self._send_test(future))
                return future
        future.set_result(False)
        return future

    def delivery_problems(self) -> list[str]:
        """Why notifications may not reach the user now: one sentence each, [] when fine."""
        with self._lock:
            return list(self._problems.values())

    # -- on the loop thread ------------------------------------------------------

    def _run_loop(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    async def _setup(self) -> None:
        try:
            from desktop_notifier import DesktopNotifier, Icon
        except ImportError as exc:
            self._problem("server", describe_failure(exc))
            return
        if isinstance(self._icon, Path):
            icon = Icon(path=self._icon)
        else:
            icon = Icon(name=self._icon) if self._icon else None
        try:
            self._desktop = DesktopNotifier(app_name=self._app_name, app_icon=icon)
        except Exception as exc:  # a backend that cannot start: say so, never "works"
            logger.debug("DesktopNotifier() failed", exc_info=True)
            self._problem("server", notify_access.cannot_start(exc))
            return
        if await self._probe():
            await self._allowed()  # macOS asks the user here, once ever, not at the first rating

    async def _probe(self) -> bool:
        """Ask the server what it can do; record a sentence if it is not there."""
        from desktop_notifier import Capability

        try:
            self._capabilities = await self._desktop.get_capabilities()
        except Exception as exc:  # every failure becomes a sentence
            logger.debug("get_capabilities failed", exc_info=True)
            self._problem("server", describe_failure(exc))
            self._drop_failed_connection()
            return False
        self._probed = True
        self._problem("server", None)
        await self._watch_server()
        self._markup = "body-markup" in await self._server_capabilities()
        buttons = Capability.BUTTONS in self._capabilities
        stand_in = notify_access.is_stand_in(self._capabilities)  # "allowed" says that one
        self._problem("buttons", None if buttons or stand_in else NO_BUTTONS)
        return True

    async def _allowed(self) -> bool:
        """Whether what is sent would be shown: a real backend, and the system allows it.

        Asked before every send, so notifications turned on in the system's
        settings while rltray runs are used from then on. ``request_authorisation``
        rather than ``has_authorisation``: after its first prompt it only answers
        the current state, and 6.2.0's macOS ``has_authorisation`` sets its future
        twice (an "Exception ignored" traceback on stderr at every call).
        """
        if notify_access.is_stand_in(self._capabilities):
            self._problem("allowed", notify_access.no_backend(self._platform))
            return False
        asking = self._desktop.request_authorisation()
        try:  # the first time on macOS this waits for the user's answer to a prompt
            allowed = bool(await asyncio.wait_for(asking, self._dispatch_timeout))
        except asyncio.TimeoutError:
            self._problem("allowed", notify_access.UNANSWERED)
            return False
        except Exception:  # cannot tell: nothing sent counts as shown
            logger.debug("request_authorisation failed", exc_info=True)
            allowed = False
        self._problem("allowed", None if allowed else notify_access.refused(self._platform))
        return allowed

    async def _ready(self) -> bool:
        """Whether a send can be tried: the server answered once and would show it."""
        if self._desktop is None:
            return False
        if not (self._probed or await self._probe()):
            return False
        return await self._allowed()

    async def _ask(
        self, turn_id: int, title: str, body: str, group: str | None, expire_s: int | None
    ) -> None:
        from desktop_notifier import Button, ReplyField

        if not await self._ready():
            return
        self._prune_closed()  # a backend that sends no close signal is tidied here
        if group is not None:
            older = self._groups.get(group)
            if older is not None and older != turn_id:
                await self._withdraw([older])
        reply = None
        if self._comments:
            reply = ReplyField(
                title=COMMENT_TITLE,
                button_title="Send",
                on_replied=lambda text: self._rated(turn_id, -1, text),
            )
        delivered = await self._send(
            turn_id,
            title=title,
            message=self._body(body),
            buttons=(
                Button("Good", lambda: self._rated(turn_id, 1, None), identifier=GOOD),
                Button("Bad", lambda: self._rated(turn_id, -1, None), identifier=BAD),
            ),
            reply_field=reply,
            on_dismissed=lambda: self._forget_turn(turn_id),
            timeout=expire_s if expire_s else -1,
        )
        if delivered and group is not None:  # only a bubble on screen is replaced later
            self._groups[group] = turn_id
        if not delivered:
            logger.info("the rating notification for turn %s was not delivered", turn_id)
        elif self._on_delivered is not None:
            try:
                self._on_delivered(turn_id)
            except Exception:
                logger.exception("on_delivered failed for turn %s", turn_id)

    async def _tell(self, title: str, body: str, quiet: bool) -> None:
        from desktop_notifier import Urgency

        if await self._ready():
            urgency = Urgency.Low if quiet else Urgency.Normal
            await self._send(title=title, message=self._body(body),
                             timeout=5 if not quiet else 15, urgency=urgency)  # fmt: skip

    async def _send_test(self, future: concurrent.futures.Future[bool]) -> None:
        ok = False
        try:
            if await self._ready():
                ok = await asyncio.wait_for(
                    self._send(
                        title=f"{self._app_name} test",
                        message="Notifications work: rating buttons will appear here.",
                        timeout=5,
                    ),
                    self._dispatch_timeout,
                )
        except asyncio.TimeoutError:
            self._problem("send", NOT_DELIVERED)
        finally:
            with self._lock:
                self._waiting.discard(future)
            _resolve(future, ok)

    async def _withdraw(self, turn_ids: list[int]) -> None:
        for turn_id in turn_ids:
            identifier = self._forget_turn(turn_id)
            if identifier is not None and self._desktop is not None:
                try:
                    await self._desktop.clear(identifier)
                except Exception:  # already gone, or a server that cannot close one
                    logger.debug("could not withdraw the notification of turn %s", turn_id)

    async def _send(self, turn_id: int | None = None, **kwargs: Any) -> bool:
        """desktop-notifier's send, True only if ``on_dispatched`` fired (send never raises).

        A rating notification (``turn_id``) is remembered until it ends (answered,
        closed, withdrawn); any other is let go at once: nothing answers it.
        """
        dispatched = asyncio.Event()
        server = self._server
        identifier = await self._desktop.send(on_dispatched=dispatched.set, **kwargs)
        if dispatched.is_set() and server != self._server:
            # The server that took it went away while the send was in flight (the change of
            # owner was read before this resumed): its bubble went with it, and its id is one
            # the next server gives to another notification. Record nothing; ``_server_changed``
            # already cleared what was kept before.
            logger.info("the notification server changed while a notification was sent; "
                        "it went with the old server")
            self._let_go(identifier)
            return False
        if dispatched.is_set():
            if turn_id is not None:
                self._shown[turn_id] = identifier
            else:
                self._let_go(identifier)
            self._problem("send", None)
            return True
        self._problem("send", NOT_DELIVERED)
        self._drop_failed_connection()
        return False

    def _rated(self, turn_id: int, value: int, comment: str | None) -> None:
        self._forget_turn(turn_id)  # answered: the server took it down
        text = comment.strip() if comment else None
        try:
            self._on_rating(turn_id, value, text or None)
        except Exception:
            logger.exception("on_rating failed for turn %s", turn_id)

    def _body(self, text: str) -> str:
        """``text`` as the server shows it as typed: escaped where bodies are markup."""
        return html.escape(text, quote=False) if self._markup else text

    def _forget_turn(self, turn_id: int) -> str | None:
        """Drop what is kept about a turn's notification; its identifier, if it had one."""
        self._groups = {g: t for g, t in self._groups.items() if t != turn_id}
        return self._shown.pop(turn_id, None)

    def _prune_closed(self) -> None:
        """Forget the rating notifications desktop-notifier saw end (expired, closed).

        D-Bus only: there it drops one from its cache on every close reason but calls back
        only for "dismissed", and a closed bubble is gone, so its cache says what is still
        on screen (private, read defensively: without it a notification is kept until
        answered or withdrawn). Its Windows backend drops a toast from the cache when it
        times out too, but that toast stays in Action Center with live buttons: forgotten
        here, rltray could never withdraw it, and answered toasts piled up there. Elsewhere
        what is kept goes when the notification is answered, dismissed or withdrawn.
        """
        backend = getattr(self._desktop, "_backend", None)
        if not _closes_for_good(backend):
            return
        cache = getattr(backend, "_notification_cache", None)
        if not isinstance(cache, dict):
            return
        for turn_id, identifier in list(self._shown.items()):
            if identifier not in cache:
                self._forget_turn(turn_id)

    def _let_go(self, identifier: str) -> None:
        """Drop desktop-notifier's records of a notification nothing will ever answer
        (a ``tell()``): servers that keep banners never close them, so its cache and
        id map would grow by one per notification for as long as rltray runs."""
        backend = getattr(self._desktop, "_backend", None)
        clear = getattr(backend, "_clear_notification_from_cache", None)
        if clear is not None:
            clear(identifier)
        ids = getattr(backend, "_platform_to_interface_notification_identifier", None)
        inverse = getattr(ids, "inverse", None)
        if inverse is not None:
            inverse.pop(identifier, None)

    async def _watch_server(self) -> None:
        """Follow who owns org.freedesktop.Notifications on desktop-notifier's connection
        (once per connection: it may open another after a failure). The handler runs on
        this loop in message order: a new owner is seen before any of its signals."""
        bus = getattr(getattr(self._desktop, "_backend", None), "bus", None)
        if bus is None or bus is self._watched or not hasattr(bus, "add_message_handler"):
            return
        from dbus_fast import Message

        self._watched = bus
        bus.add_message_handler(self._on_bus_message)
        try:
            await bus.call(
                Message(destination=DBUS, path="/org/freedesktop/DBus", interface=DBUS,
                        member="AddMatch", signature="s", body=[OWNER_RULE])
            )  # fmt: skip
        except Exception:  # dbus-fast's own owner tracking may still deliver the signal
            logger.warning("cannot follow restarts of the notification server", exc_info=True)

    async def _server_capabilities(self) -> list[str]:
        """The server's own capability names (desktop-notifier maps only some of them)."""
        interface = getattr(getattr(self._desktop, "_backend", None), "interface", None)
        try:  # the D-Bus proxy desktop-notifier made; other backends have none
            return [str(c) for c in await interface.call_get_capabilities()]
        except Exception:  # the probe that just worked says what matters
            return []

    def _on_bus_message(self, msg: Any) -> None:
        """Every message on the watched connection (loop thread); handles none of them."""
        if msg.interface == DBUS and msg.member == "NameOwnerChanged" and msg.sender == DBUS:
            if msg.body and msg.body[0] == NOTIFICATIONS:
                self._server_changed(str(msg.body[1]), str(msg.body[2]))
        elif msg.interface == NOTIFICATIONS and msg.member == "NotificationClosed":
            loop = asyncio.get_running_loop()  # this notifier's: handlers run on it
            loop.call_soon(self._prune_closed)  # after desktop-notifier's own handler of it

    def _server_changed(self, old: str, new: str) -> None:
        """A new (or no) notification server: the old one's ids mean nothing any more.

        Its bubbles went with it, and the new one numbers its own from 1: forget
        every id, ours and desktop-notifier's, so nothing closes or rates by an id
        the old server issued. Ask its capabilities again before the next send.
        """
        logger.info("the notification server changed (%s -> %s): forgetting %d notification(s)",
                    old or "none", new or "none", len(self._shown))  # fmt: skip
        self._server += 1  # a send in flight records nothing of the old server's (``_send``)
        self._shown.clear()
        self._groups.clear()
        self._probed = False
        backend = getattr(self._desktop, "_backend", None)
        for name in ("_platform_to_interface_notification_identifier", "_notification_cache"):
            kept = getattr(backend, name, None)
            if kept is not None:
                kept.clear()
        if backend is not None and hasattr(backend, "_capabilities"):
            backend._capabilities = None

    async def _shutdown(self) -> None:
        # A rating bubble left on screen would outlive this process with buttons nothing
        # answers (the server keeps it; a press just closes it): take them all down.
        await self._withdraw(list(self._shown))
        bus = getattr(getattr(self._desktop, "_backend", None), "bus", None)
        if bus is not None:
            bus.disconnect()

    def _drop_failed_connection(self) -> None:
        """Close the bus connection desktop-notifier opened before failing.

        On Linux it connects again on every send until the server is found and
        keeps no handle on a connection that failed, so without this each ask
        while no server runs would leak a socket. Private attributes, read
        defensively: on other backends (or versions) this does nothing.
        """
        backend = getattr(self._desktop, "_backend", None)
        bus = getattr(backend, "bus", None)
        if bus is not None and getattr(backend, "interface", True) is None:
            bus.disconnect()
            backend.bus = None

    # -- helpers (callers hold self._lock where noted) ----------------------------

    def _usable(self, what: str) -> bool:
        """Under self._lock: may work be queued now?"""
        if self._state == "new":
            raise RuntimeError(f"Notifier.start() must run before it can {what}")
        if self._state == "closed":
            logger.info("the notifier is closed: not going to %s", what)
            return False
        return True

    def _submit(
        self, job: Coroutine[Any, Any, None], *, after_close: bool = False
    ) -> concurrent.futures.Future[None]:
        """Queue ``job`` on the loop, after every job queued before it.

        Jobs still queued when ``close()`` runs are dropped (only the shutdown
        job runs after close), so closing waits for one send at most.
        """

        async def one_at_a_time() -> None:
            async with self._one_at_a_time:
                with self._lock:
                    closed = self._state == "closed"
                if closed and not after_close:
                    job.close()
                    return
                await job

        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(one_at_a_time(), self._loop)
        future.add_done_callback(_log_crash)
        return future

    def _problem(self, kind: str, sentence: str | None) -> None:
        """Set or clear the problem of one kind; log only when it changes."""
        with self._lock:
            before = self._problems.get(kind)
            if sentence is None:
                self._problems.pop(kind, None)
            else:
                self._problems[kind] = sentence
        if sentence != before:
            if sentence is not None:
                logger.warning("%s", sentence)
            else:
                logger.info("resolved: %s", before)


def _closes_for_good(backend: object) -> bool:
    """Whether a notification that ``backend`` saw close is gone from the screen: desktop-
    notifier's D-Bus backend (a closed bubble is gone), not its WinRT one (a toast that timed
    out waits in Action Center). By module name: dbus-fast is not installed everywhere."""
    return any(cls.__module__ == "desktop_notifier.backends.dbus" for cls in type(backend).__mro__)


def _resolve(future: concurrent.futures.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


def _log_crash(future: concurrent.futures.Future[None]) -> None:
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        logger.error("notifier job failed", exc_info=(type(exc), exc, exc.__traceback__))
