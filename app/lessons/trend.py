"""Still happening: does a lesson's bad rating keep coming after the agent was told it?

Per lesson, the bad ratings of an agent's turns since that agent's lessons went
on, against those before, each as a rate per week so a long "before" and a short
"after" compare fairly. Each window counts at least one week, so one rating the
day after switching on does not read as seven a week. Agents whose lessons are
off are left out: nothing was told to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from rltray.app.lessons.book import Lesson
from rltray.app.store.base import parse_iso

WEEK = timedelta(days=7)


@dataclass(frozen=True)
class Trend:
    before: float  # bad ratings per week before lessons went on
    after: float  # and since
    since: str  # the earliest switch-on among the agents counted

    def words(self) -> str:
        return f"{self.after:.1f}/wk since on, {self.before:.1f}/wk before"


def still_happening(lesson: Lesson, on_since: Mapping[str, str], now: datetime) -> Trend | None:
    """The lesson's bad-rating rates before and after (None: no agent has lessons on,
    or the lesson has no ratings behind it)."""
    if not on_since or not lesson.evidence:
        return None
    first = min(parse_iso(e.rated_at) for e in lesson.evidence)
    before = after = 0
    weeks_before = weeks_after = 0.0
    for agent, since_text in on_since.items():
        since = parse_iso(since_text)
        bad = [parse_iso(e.rated_at) for e in lesson.evidence
               if e.agent == agent and e.value < 0]  # fmt: skip
        before += sum(when < since for when in bad)
        after += sum(when >= since for when in bad)
        weeks_before += max(1.0, (since - first) / WEEK)
        weeks_after += max(1.0, (now - since) / WEEK)
    return Trend(before / weeks_before, after / weeks_after, min(on_since.values()))
