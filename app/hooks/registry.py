"""The agents rltray knows.

Adding an agent is two files and one line: a module with its ``Agent`` subclass
(install, detect, doctor), an ``events_<prefix>.py`` beside ``capture_core.py`` that
names the agent, its events and its `/rl` usage and reads its hook payloads, and its
``Entry`` in ``AGENTS`` (which also gives it its ``agents.<name>`` switch in config.toml).

Names and display names are read here without importing the agents' modules (the
CLI's parser lists them on every start); a class is imported when it is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rltray.app.hooks.base import Agent


@dataclass(frozen=True)
class Entry:
    name: str  # as the CLI accepts it and the store records it
    display_name: str
    module: str
    cls: str
    captures: str  # how rltray hears of its turns, for the agents.<name> setting's help
    #: whether its sessions can be told the lessons (a SessionStart hook reads the lesson
    #: files): only such an agent gets a ``lessons.<name>`` switch and a Lessons page row
    lessons: bool = True

    @property
    def setting(self) -> str:
        """Its switch's name in config.toml's [agents] table (``agents.claude_code``)."""
        return self.name.replace("-", "_")

    def load(self) -> type[Agent]:
        return getattr(importlib.import_module(self.module), self.cls)


AGENTS: tuple[Entry, ...] = (
    Entry("claude-code", "Claude Code", "rltray.app.hooks.claude_code", "ClaudeCode",
          "its Stop and UserPromptSubmit hooks"),
    Entry("codex", "Codex", "rltray.app.hooks.codex", "Codex", "its notify program and hooks"),
    Entry("openclaw", "OpenClaw", "rltray.app.hooks.openclaw", "OpenClaw",
          "rltray's plugin in its gateway (agent_end, message_sent, /rl)",
          lessons=False),  # its plugin hands no lessons to a session yet
)


def lesson_agents() -> tuple[Entry, ...]:
    """The agents whose sessions can be told the lessons (see ``Entry.lessons``)."""
    return tuple(entry for entry in AGENTS if entry.lessons)


def names() -> list[str]:
    """Agent names as the CLI accepts them and the store records them."""
    return [entry.name for entry in AGENTS]


def display_names() -> dict[str, str]:
    """Agent name -> how people write it ("claude-code" -> "Claude Code")."""
    return {entry.name: entry.display_name for entry in AGENTS}


def all_agents(env: Mapping[str, str] | None = None, python: str | None = None) -> list[Agent]:
    """One fresh instance per known agent (no shared state between callers)."""
    return [entry.load()(env=env, python=python) for entry in AGENTS]


def get(name: str, env: Mapping[str, str] | None = None, python: str | None = None) -> Agent:
    """The agent called ``name``; AgentNotFound (a UserError) names the known ones."""
    for entry in AGENTS:
        if entry.name == name:
            return entry.load()(env=env, python=python)
    from rltray.app.hooks.base import AgentNotFound

    raise AgentNotFound(f"Unknown agent {name!r}; rltray knows: {', '.join(names())}.")
