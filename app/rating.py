"""What a rating does to a turn: the one rule set every face follows.

The CLI, the tray, a notification's buttons, the settings window, the API and
``/rl`` typed in an agent all end here (the service's intents, or the spool
inside its own transaction), so a turn that is already rated is treated the
same way wherever the rating comes from:

* the same value again, with no new comment: nothing changes, and the history
  gets no extra line;
* the same value with a new comment: the comment changes in place (a comment
  explains a judgement, it is not a new one);
* the other value: the earlier rating is withdrawn (the history keeps it) and
  the new one keeps the earlier comment unless a new comment is given;
* a notification's button never overrides a rating given anywhere else: the
  notification may have sat on screen for an hour, and a click on it must not
  undo what the user said since in the CLI or the agent.

Which turn is meant is the caller's business (``rltray good`` means the newest
turn and asks before changing it; ``/rl good`` means that session's previous
answer); this module starts once the turn is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rltray.app.store import Rating, Store

NOTIFICATION = "notification"


@dataclass(frozen=True)
class Applied:
    """What a rating did: the turn's active rating afterwards, and whether anything changed.

    ``stale``: a notification's click that was refused because the turn was
    rated elsewhere after the notification was shown.
    """

    rating: Rating
    changed: bool
    stale: bool = False


def apply(
    store: Store,
    turn_id: int,
    value: int,
    source: str,
    comment: str | None = None,
    at: datetime | None = None,
) -> Applied:
    """Rate or re-rate one turn by the rules above (``comment`` None keeps the current one)."""
    comment = (comment or "").strip() or None
    current = store.active_rating(turn_id)
    if current is not None:
        if source == NOTIFICATION and current.source != NOTIFICATION:
            return Applied(current, changed=False, stale=True)
        if current.value == value:
            if comment is None or comment == current.comment:
                return Applied(current, changed=False)
            return Applied(store.set_comment(turn_id, comment), changed=True)
        if comment is None:
            comment = current.comment
    return Applied(store.rate(turn_id, value, source, comment=comment, at=at), changed=True)

