"""The agents rltray knows.

Adding an agent: a module with its ``Agent`` subclass (install, detect, doctor), an
``events_<prefix>.py`` beside ``capture_core.py`` that reads its hook payloads, one line
in ``AGENTS``; its events in ``capture_core.EVENTS`` and its ``agents.<name>`` switch
in ``config.AgentsSettings`` (the hook and the settings cannot import this registry).
"""

from __future__ import annotations

from collections.abc import Mapping

from rltray.app.hooks.base import Agent, AgentNotFound
from rltray.app.hooks.claude_code import ClaudeCode
from rltray.app.hooks.codex import Codex

AGENTS: tuple[type[Agent], ...] = (
    ClaudeCode,
    Codex,
)


def names() -> list[str]:
    """Agent names as the CLI accepts them and the store records them."""
    return [cls.name for cls in AGENTS]


def display_names() -> dict[str, str]:
    """Agent name -> how people write it ("claude-code" -> "Claude Code")."""
    return {cls.name: cls.display_name for cls in AGENTS}


def all_agents(env: Mapping[str, str] | None = None, python: str | None = None) -> list[Agent]:
    """One fresh instance per known agent (no shared state between callers)."""
    return [cls(env=env, python=python) for cls in AGENTS]


def get(name: str, env: Mapping[str, str] | None = None, python: str | None = None) -> Agent:
    """The agent called ``name``; AgentNotFound (a UserError) names the known ones."""
    for cls in AGENTS:
        if cls.name == name:
            return cls(env=env, python=python)
    raise AgentNotFound(f"Unknown agent {name!r}; rltray knows: {', '.join(names())}.")
