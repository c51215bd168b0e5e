"""`rltray doctor`'s agent versions: which release of each agent is installed, and whether
it is inside the range rltray's real-program tests verified (hook formats change between
releases, so a newer agent is the first suspect when turns or `/rl` stop arriving).

The verified range lives on each agent's class (``Agent.verified``); this only asks each
installed agent for ``--version`` (short timeout) and compares.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rltray.app.cli.doctor.check import Check


def agent_version_checks(env: Mapping[str, str] | None = None) -> Iterator[Check]:
    from rltray.app.cli.doctor.check import OK, WARN, Check
    from rltray.app.hooks import registry

    for agent in registry.all_agents(env=env):
        version = agent.installed_version()
        name = f"{agent.display_name} version"
        if version is None:
            if agent.detect():
                yield Check(name, WARN, f"`{agent.executable} --version` gave no version")
            continue
        note = agent.version_note(version)
        if note is None:
            yield Check(name, OK, f"{version} (verified)")
        else:
            yield Check(name, WARN, note, f"rltray was verified with {agent.executable} "
                                          f"{agent.verified[-1]}")
