"""`rltray doctor`'s agent versions: asked from the program on PATH, compared with the
range rltray was verified with (the real programs run in tests/agents/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rltray.app.cli.doctor import OK, WARN
from rltray.app.cli.doctor.agents import agent_version_checks
from rltray.app.hooks.claude_code import ClaudeCode
from rltray.app.hooks.codex import Codex


def program(folder: Path, name: str, prints: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{prints}'\n")
    path.chmod(0o755)


@pytest.mark.skipif(os.name != "posix", reason="stands in shell scripts for the agents")
def test_versions_inside_and_beyond_the_verified_range(tmp_path: Path) -> None:
    program(tmp_path, "claude", f"{ClaudeCode.verified[-1]} (Claude Code)")
    program(tmp_path, "codex", "codex-cli 99.0.0")
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    checks = {c.name: c for c in agent_version_checks(env)}
    claude, codex = checks["Claude Code version"], checks["Codex version"]
    assert (claude.state, claude.detail) == (OK, f"{ClaudeCode.verified[-1]} (verified)")
    assert codex.state == WARN and "99.0.0 is newer than" in codex.detail
    assert Codex.verified[-1] in codex.detail


def test_an_agent_that_is_not_installed_is_not_listed(tmp_path: Path) -> None:
    assert list(agent_version_checks({"PATH": str(tmp_path), "HOME": str(tmp_path)})) == []
