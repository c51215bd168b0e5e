"""May this process show notifications at all? The sentence for each way it may not.

Why apart from notifier.py: desktop-notifier reports a notification as sent
(``on_dispatched``) in two cases where nothing appears, both on macOS
(issue 23 item 1):

* outside an app bundle (uv, pyenv and conda Pythons) it picks its dummy
  backend, which accepts every notification and shows none;
* in a framework Python that is not properly signed (Homebrew's) it picks its
  Cocoa backend, UNUserNotificationCenter refuses ("Notifications are not
  allowed for this application"), and desktop-notifier only logs that:
  "We attempt to send the notification regardless of authorization".

So the notifier asks desktop-notifier's own ``request_authorisation()`` before
it counts anything as delivered, and treats the dummy backend (it alone reports
no capabilities at all) as "nothing is shown". What works instead depends on the
platform only, so the sentences are chosen here by pure functions that tests
call with any ``platform``. One sentence covers an unsigned Python and
notifications turned off in System Settings alike: telling them apart would
need the bundle's code signature, which Homebrew's ad-hoc one can pass while
macOS still refuses.
"""

from __future__ import annotations

import sys
from collections.abc import Collection

RATE_BY_HAND = "or rate with `rltray good`/`rltray bad`"

MACOS_NO_APP = (
    "macOS shows notifications only from a signed app, and this Python is not one (uv, "
    "pyenv and conda Pythons are not app bundles): run rltray with python.org's Python or "
    f"the signed rltray.app, {RATE_BY_HAND}."
)
MACOS_REFUSED = (
    "macOS does not let this Python show notifications (it is not a properly signed app, "
    "as Homebrew's is not, or its notifications are off in System Settings → "
    "Notifications): run rltray with python.org's Python or the signed rltray.app and "
    f"allow its notifications, {RATE_BY_HAND}."
)
NO_SERVICE = (
    "desktop-notifier knows no notification service on this system, so nothing would be "
    f"shown; {RATE_BY_HAND}."
)
UNANSWERED = (
    "The system is asking whether rltray may show notifications; choose Allow in its prompt "
    f"(or later in its notification settings), {RATE_BY_HAND}."
)
REFUSED = (
    "The system does not allow rltray to show notifications; allow them in the system's "
    f"notification settings, {RATE_BY_HAND}."
)


def is_stand_in(capabilities: Collection[object]) -> bool:
    """Whether desktop-notifier fell back to its dummy backend, which shows nothing.

    Every real backend (D-Bus, Cocoa, WinRT) reports at least a title and
    ``on_dispatched``; ``DummyNotificationCenter`` reports no capability at all.
    """
    return not capabilities


def no_backend(platform: str = sys.platform) -> str:
    """Why nothing is shown when desktop-notifier has only its dummy backend here."""
    return MACOS_NO_APP if platform == "darwin" else NO_SERVICE


def refused(platform: str = sys.platform) -> str:
    """Why nothing is shown when the system answered "not authorised"."""
    return MACOS_REFUSED if platform == "darwin" else REFUSED


def cannot_start(exc: BaseException) -> str:
    """Why nothing is shown when ``DesktopNotifier(...)`` itself raised (issue 23 item 12)."""
    return (
        f"desktop-notifier could not start here ({type(exc).__name__}: {exc}), so rltray "
        f"shows no notifications; {RATE_BY_HAND}."
    )
