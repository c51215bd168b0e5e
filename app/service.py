"""The application object shared by the CLI, the headless service and (later) tray and web.

It owns one Store and the paths, and turns user intents ("rate the last
answer good") into store calls. No module-level state: two services over two
data folders can live in one test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
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

    def ingest(self) -> spool.IngestReport:
        """Move every waiting hook record into the database (safe to call any time)."""
        return spool.ingest(self.paths, self.store)

    def pending_spool(self) -> int:
        return _count_json(self.paths.spool_incoming)

    def rejected_spool(self) -> int:
        return _count_json(self.paths.spool_rejected)

    # -- rating --------------------------------------------------------------

    def rate_latest(
        self, value: int, *, comment: str | None = None, source: str = "cli"
    ) -> RateOutcome:
        """Rate the newest captured turn that has no rating yet."""
        if value not in (1, -1):
            raise UserError(f"A rating is +1 (good) or -1 (bad), not {value!r}.")
        turn = self.store.newest_unrated_turn()
        if turn is None:
            raise NothingToDo(
                "There is no unrated turn to rate: finish a turn in Claude Code or Codex first "
                "(run `rltray hooks status` to check that capture works)."
            )
        rating = self.store.rate(turn.id, value, source, comment=comment)
        return RateOutcome(turn, rating)

    def undo(self, source: str = "cli") -> RateOutcome:
        """Withdraw the newest active rating; the history keeps it."""
        rating = self.store.undo(source)
        if rating is None:
            raise NothingToDo("There is no rating to undo.")
        turn = self.store.get_turn(rating.turn_id)
        assert turn is not None  # ratings reference turns by foreign key
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
