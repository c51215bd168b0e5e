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
  undo what the user said since in the CLI or the agent (its reply, giving the
  same verdict a reason that rating lacks, is kept as the comment);
* a rating given before the turn's current one never overrides it either: a
  ``/rl bad`` waits in the spool until the tray reads it, and by then the user
  may have said otherwise on the ratings page. The last word the user gave wins,
  not the last one read. A withdrawal is a word too: a press that waited while the
  user rated the turn and took that rating back is refused, though the turn has no
  rating left to compare it with (``said_since``).

Graded ratings: a 1-5 score instead of one click (``rltray rate 42 4``, ``/rl 4``,
keys 1-5 in the ratings browser). 4 and 5 are good, 1 and 2 bad, and the
trainer's reward is ``(score - 3) / 2`` (plain good and bad stay +1 and -1). A 3
says neither good nor bad: its reward would be 0, so it would teach nothing and
belong to no class, and the trainer balances the push of the good and the bad
class; it is refused with that reason rather than stored as a rating that never
counts. Another score of the same class is a new judgement, like the other value.

A comment is scrubbed of credentials here (``app/scrub.py``), whichever face it came
from: it is stored, shown, and told to the agent (the note for the next prompt, the
lessons at session start, Claude Code's rules file), and a token pasted into "use
the token … instead of asking me" must reach none of them (SECURITY.md).

Which turn is meant is the caller's business (``rltray good`` means the newest
turn and asks before changing it; ``/rl good`` means that session's previous
answer); this module starts once the turn is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from rltray.app.errors import UserError
from rltray.app.scrub import scrub
from rltray.app.store.base import parse_iso

if TYPE_CHECKING:
    from rltray.app.store import Rating, Store

NOTIFICATION = "notification"
SCORES = (1, 2, 3, 4, 5)
NEUTRAL = (
    "3 is the middle of the scale: it says neither good nor bad, so it would teach "
    "nothing; give 1-2 (bad) or 4-5 (good)."
)


def parse(text: str) -> tuple[int, int | None]:
    """``good``/``bad``/``1``-``5`` -> (value, score); one sentence for anything else."""
    word = text.strip().lower()
    if word in ("good", "+", "+1", "up"):
        return 1, None
    if word in ("bad", "-", "-1", "down"):
        return -1, None
    if word.isdigit() and int(word) in SCORES:
        return from_score(int(word)), int(word)
    raise UserError(f"A rating is good, bad, or a score from 1 to 5, not {text.strip()!r}.")


def from_score(score: int) -> int:
    """The class (+1 / -1) of a 1-5 score; a 3 is refused (see the top)."""
    if isinstance(score, bool) or score not in SCORES:
        raise UserError(f"A score is 1 to 5, not {score!r}.")
    if score == 3:
        raise UserError(NEUTRAL)
    return 1 if score > 3 else -1


def reward(value: int, score: int | None) -> float:
    """What the trainer gets for a rating: ``(score - 3) / 2``, else +1 / -1."""
    return (score - 3) / 2 if score is not None else float(value)


def label(value: int, score: int | None) -> str:
    """How a rating is shown: ``good``, ``bad``, or ``4/5`` for a graded one."""
    if score is not None:
        return f"{score}/5"
    return "good" if value > 0 else "bad"


@dataclass(frozen=True)
class Applied:
    """What a rating did: the turn's active rating afterwards, and whether anything changed.

    ``stale``: refused because the turn was rated after this rating was given: a
    notification's click after a rating elsewhere, or a ``/rl`` read from the spool
    after a newer rating.
    """

    rating: Rating  # when stale and the turn has no rating: the withdrawn one said since
    changed: bool
    stale: bool = False


def given_after(current: Rating, at: datetime | None) -> bool:
    """Whether ``current`` was given after ``at``: a rating given at ``at`` is older news."""
    return _later(current.rated_at, at)


def said_since(store: Store, turn_id: int, at: datetime | None) -> Rating | None:
    """The newest rating of the turn given or withdrawn after ``at`` (None: none, or no
    ``at``): the user said something about the turn after a rating given at ``at``.

    Every rating, not only the active one: a press kept in the spool while the user rated
    the turn in the window and then withdrew that rating found no active rating, was
    stored with its older time, and `rltray undo` then found the withdrawn one "last".
    """
    if at is None:
        return None
    for rating in reversed(store.rating_history(turn_id)):
        if _later(rating.rated_at, at) or _later(rating.withdrawn_at, at):
            return rating
    return None


def _later(stamp: str | None, at: datetime | None) -> bool:
    """Whether the stored time ``stamp`` is after ``at`` (False when either is missing)."""
    if stamp is None or at is None:
        return False
    try:
        given = parse_iso(stamp)
    except ValueError:
        return False
    return _aware(given) > _aware(at)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def apply(
    store: Store,
    turn_id: int,
    value: int,
    source: str,
    comment: str | None = None,
    at: datetime | None = None,
    score: int | None = None,
) -> Applied:
    """Rate or re-rate one turn by the rules above (``comment`` None keeps the current one)."""
    comment = scrub((comment or "").strip()) or None
    if score is not None and from_score(score) != value:
        raise UserError(f"A score of {score} is {label(from_score(score), None)}, not {value}.")
    # The read and the write are one transaction: another process's rating that lands
    # between them would otherwise be overridden by a stale notification's click.
    with store.batch():
        current = store.active_rating(turn_id)
        since = said_since(store, turn_id, at)
        if current is None and since is not None:  # rated and withdrawn since: that stands
            return Applied(since, changed=False, stale=True)
        if current is not None:
            older = source == NOTIFICATION and current.source != NOTIFICATION
            if older or since is not None:
                # A reply that only says why, to the very verdict given elsewhere, is kept
                # as that verdict's comment; anything else said before it is refused.
                if (current.value == value and current.score == score and comment
                        and not current.comment):  # fmt: skip
                    return Applied(store.set_comment(turn_id, comment), changed=True)
                return Applied(current, changed=False, stale=True)
            if current.value == value and current.score == score:
                if comment is None or comment == current.comment:
                    return Applied(current, changed=False)
                return Applied(store.set_comment(turn_id, comment), changed=True)
            if comment is None:
                comment = current.comment
        rated = store.rate(turn_id, value, source, comment=comment, at=at, score=score)
    return Applied(rated, changed=True)

