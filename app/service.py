"""The application object shared by the CLI, the headless service and (later) tray and web.

It owns one Store and the paths, and turns user intents ("rate the last
answer good") into store calls. No module-level state: two services over two
data folders can live in one test.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from rltray.app import spool
from rltray.app.errors import NothingToDo, UserError
from rltray.app.paths import Paths

if TYPE_CHECKING:
    from rltray.app.store import Rating, Store, Turn

PREVIEW_CHARS = 72


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """One line of a turn's text for terminal output and notifications."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def local_time(iso: str | None) -> str:
    """A stored UTC timestamp as the user's local minute, for terminal output.

    JSON output keeps the full ISO-8601 value; people read the minute.
    """
    if not iso:
        return "—"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M")


@dataclass(frozen=True)
class RateOutcome:
    turn: Turn
    rating: Rating
    changed: bool = True  # False when the turn already had exactly this rating


class AlreadyRated(NothingToDo):
    """The newest turn has a different rating; changing it must be asked for."""


def word(value: int) -> str:
    return "good" if value > 0 else "bad"


def _check_value(value: int) -> None:
    if value not in (1, -1) or isinstance(value, bool):
        raise UserError(f"A rating is +1 (good) or -1 (bad), not {value!r}.")


class Service:
    """rltray's operations over one data folder."""

    def __init__(self, paths: Paths, store: Store | None = None) -> None:
        from rltray.app.store import Store

        self.paths = paths.ensure()
        self.store = store if store is not None else Store.open(self.paths)

    @classmethod
    def open(cls, env: dict[str, str] | None = None) -> Service:
        return cls(Paths.from_env(env))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- capture -------------------------------------------------------------

    def ingest(self, progress: Callable[[int, int], None] | None = None) -> spool.IngestReport:
        """Move every waiting hook record into the database (safe to call any time)."""
        return spool.ingest(self.paths, self.store, progress=progress)

    def pending_spool(self) -> int:
        return _count_json(self.paths.spool_incoming)

    def rejected_spool(self) -> int:
        return _count_json(self.paths.spool_rejected)

    # -- rating --------------------------------------------------------------

    def rate_newest(
        self,
        value: int,
        *,
        comment: str | None = None,
        source: str = "cli",
        change: bool = False,
    ) -> RateOutcome:
        """Rate the turn captured last: the answer the user just read.

        Never an older one: when the newest turn is already rated, say so, and
        change its rating only when asked (``change``), so a `rltray good` after
        a `/rl good` cannot land on another project's answer.
        """
        _check_value(value)
        turn = self.store.newest_turn()
        if turn is None:
            raise NothingToDo(
                "No turn has been captured yet: finish a turn in Claude Code or Codex first "
                "(run `rltray hooks status` to check that capture works)."
            )
        if turn.rating is not None and not change:
            given = word(turn.rating.value)
            if turn.rating.value == value and not comment:
                return RateOutcome(turn, turn.rating, changed=False)
            raise AlreadyRated(
                f"The newest turn ({turn.id}) is already rated {given}. "
                f"To change it, run `rltray {word(value)} --last`"
                + (" with your comment" if comment else "")
                + f", or `rltray rate {turn.id} {word(value)}`."
            )
        return self.rate_turn(turn.id, value, comment=comment, source=source)

    def rate_turn(
        self, turn_id: int, value: int, *, comment: str | None = None, source: str = "cli"
    ) -> RateOutcome:
        """Rate (or re-rate) one turn by id; the earlier rating stays in the history."""
        _check_value(value)
        turn = self.store.get_turn(turn_id)
        if turn is None:
            raise UserError(f"There is no turn {turn_id}; `rltray turns` lists them.")
        rating = self.store.rate(turn.id, value, source, comment=comment)
        return RateOutcome(turn, rating)

    def undo(self, source: str = "cli") -> RateOutcome:
        """Withdraw the rating given last; the history keeps it.

        Only the last one: a second undo says there is nothing to undo instead
        of reaching back to withdraw an older, unrelated rating.
        """
        latest = self.store.latest_rating()
        if latest is None:
            raise NothingToDo("There is no rating to undo.")
        if not latest.active:
            raise NothingToDo(
                f"Your last rating (turn {latest.turn_id}, {word(latest.value)}) was already "
                "withdrawn; there is nothing else to undo."
            )
        rating = self.store.undo(source, turn_id=latest.turn_id)
        turn = self.store.get_turn(latest.turn_id)
        assert rating is not None and turn is not None  # ratings reference turns by foreign key
        return RateOutcome(turn, rating)

    # -- reporting -----------------------------------------------------------

    def status(self) -> dict[str, Any]:
        counts = self.store.counts()
        by_agent = counts.get("by_agent", {})
        return {
            "turns": counts["turns"],
            "good": counts["good"],
            "bad": counts["bad"],
            "unrated": counts["unrated"],
            "untrained": counts["untrained"],
            "pending_spool": self.pending_spool(),
            "rejected_spool": self.rejected_spool(),
            "agents": {
                name: {
                    "turns": info.get("turns", 0),
                    "last_event_at": info.get("last_captured_at"),
                }
                for name, info in sorted(by_agent.items())
            },
            "data_folder": str(self.paths.home),
        }

    def turns(self, limit: int = 20, rated: bool | None = None) -> list[Turn]:
        return self.store.list_turns(limit=limit, rated=rated)

    def export(self) -> Iterator[dict[str, Any]]:
        return self.store.iter_export()


def _count_json(folder: os.PathLike[str] | str) -> int:
    try:
        with os.scandir(folder) as entries:
            return sum(1 for e in entries if e.name.endswith(".json"))
    except FileNotFoundError:
        return 0
