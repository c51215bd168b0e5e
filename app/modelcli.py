"""`rltray use|export-model`: run a trained version inside the agents, or export it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def add_commands(add: Callable[..., Any]) -> None:
    """Register this module's commands with the CLI parser (see cli.COMMAND_MODULES)."""
