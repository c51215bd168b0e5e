"""One line of `rltray doctor`: what was checked, its state and what to do about it.

Its own module so the check families (``agents``, ``desktop``) and the command
(``__init__``) share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Check:
    name: str
    state: str
    detail: str
    fix: str = ""
