"""`rltray autostart`: start rltray at login (XDG autostart, LaunchAgent, Windows Run key)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def add_commands(add: Callable[..., Any]) -> None:
    """Register this module's commands with the CLI parser (see cli.COMMAND_MODULES)."""
