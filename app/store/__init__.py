"""rltray's database: one object over captured turns, ratings, training runs, adapters, events.

Each noun has its own module (store_turns, store_browse, store_tags, store_runs,
store_adapters, store_events, store_lessons) over the shared connection in store_base;
this facade joins them so callers hold one ``Store`` and import the record types from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltray.app.store.adapters import ADAPTER_STATUSES, Adapter, Adapters
from rltray.app.store.base import BUSY_TIMEOUT_S, SOURCES, StoreError, utc_iso
from rltray.app.store.browse import Browse, TurnFilter
from rltray.app.store.events import Events
from rltray.app.store.lessons import LessonRow, Lessons
from rltray.app.store.messages import Messages
from rltray.app.store.runs import RUN_STATUSES, Run, Runs
from rltray.app.store.tags import Tags
from rltray.app.store.turns import Rating, Turn, TurnsAndRatings

if TYPE_CHECKING:
    from rltray.app.paths import Paths

__all__ = [
    "ADAPTER_STATUSES",
    "BUSY_TIMEOUT_S",
    "RUN_STATUSES",
    "SOURCES",
    "Adapter",
    "LessonRow",
    "Rating",
    "Run",
    "Store",
    "StoreError",
    "Turn",
    "TurnFilter",
    "utc_iso",
]


class Store(TurnsAndRatings, Browse, Tags, Runs, Adapters, Events, Lessons, Messages):
    """All queries over one database file. Thread-safe; several processes may share the file."""

    @classmethod
    def open(cls, paths: Paths) -> Store:
        return cls(paths.ensure().db)

    def __enter__(self) -> Store:
        return self
