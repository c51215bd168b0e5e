"""`rltray hooks install|uninstall --agent openclaw` (app/hooks/openclaw.py) on a real
openclaw.json, with a stand-in `openclaw` program on PATH that edits the file as OpenClaw
2026.9.6's `plugins install --link` and `plugins uninstall` do (its load path; uninstall
drops the plugin's whole entry: dist/uninstall-config-*.mjs). tests/agents/test_openclaw.py
runs the real one."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from rltray.app.hooks.openclaw import PLUGIN_DIR, OpenClaw
from rltray.app.paths import Paths

STAND_IN = '''\
import json, os, sys
path = os.environ["OPENCLAW_CONFIG_PATH"]
doc = json.load(open(path))
plugins = doc.setdefault("plugins", {})
if sys.argv[1:3] == ["plugins", "install"]:
    plugins.setdefault("load", {}).setdefault("paths", []).append(sys.argv[4])
elif sys.argv[1:3] == ["plugins", "uninstall"]:
    plugins.get("entries", {}).pop(sys.argv[3], None)
    load = plugins.get("load", {})
    load["paths"] = [p for p in load.get("paths", []) if not p.endswith("openclaw_plugin")]
    if not load["paths"]:
        plugins.pop("load")
    if not plugins.get("entries", 1):
        plugins.pop("entries")
    if not plugins:
        doc.pop("plugins")
json.dump(doc, open(path, "w"), indent=2)
'''


@pytest.fixture
def agent(rltray_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> OpenClaw:
    program = tmp_path / "bin" / "openclaw"
    program.parent.mkdir()
    script = tmp_path / "openclaw_stand_in.py"
    script.write_text(STAND_IN)
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{program.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("OPENCLAW_CONFIG_PATH", str(tmp_path / "openclaw.json"))
    found = OpenClaw()
    found.accepted = True
    return found


def write(agent: OpenClaw, doc: dict[str, Any]) -> None:
    agent.config_path().write_text(json.dumps(doc, indent=2) + "\n")


def read(agent: OpenClaw) -> dict[str, Any]:
    return json.loads(agent.config_path().read_text())


def telegram(*allowed: str, policy: str = "allowlist") -> dict[str, Any]:
    return {"telegram": {"enabled": True, "botToken": "1:x", "dmPolicy": policy,
                         "allowFrom": list(allowed)}}


def test_reinstall_keeps_the_users_own_keys_and_uninstall_takes_only_rltrays(
    agent: OpenClaw, rltray_home: Path,
) -> None:
    """Regression (review 3, finding 6): install wrote plugins.entries.rltray whole, so the
    keys the user had set in it (a hook timeout, say) were gone after a reinstall; and
    uninstall took the whole entry, theirs included."""
    paths = Paths(rltray_home)
    write(agent, {"channels": telegram("tg:4242")})
    agent.install(paths)
    doc = read(agent)
    doc["plugins"]["entries"]["rltray"]["hooks"]["timeoutMs"] = 30000  # the user's own
    doc["plugins"]["entries"]["rltray"]["env"] = {"LANG": "C"}
    write(agent, doc)
    agent.reply_buttons = True
    agent.install(paths)
    entry = read(agent)["plugins"]["entries"]["rltray"]
    assert entry["hooks"] == {"allowConversationAccess": True, "timeoutMs": 30000}
    assert entry["env"] == {"LANG": "C"} and entry["enabled"] is True
    assert entry["config"]["buttons"] is True
    assert entry["config"]["command"] == agent.hook_command(paths)
    agent.reply_buttons = False
    agent.install(paths)
    assert "buttons" not in read(agent)["plugins"]["entries"]["rltray"]["config"]
    agent.uninstall(paths)
    after = read(agent)
    assert after["plugins"] == {"entries": {"rltray": {"hooks": {"timeoutMs": 30000},
                                                       "env": {"LANG": "C"}}}}
    assert str(PLUGIN_DIR) not in json.dumps(after)


def test_install_warns_when_direct_chats_share_one_session(
    agent: OpenClaw, rltray_home: Path,
) -> None:
    """Regression (review 3, finding 3): with OpenClaw's default session.dmScope "main"
    every direct chat is one session: a reaction cannot say whose chat it was in, and each
    run sees the other chats. Install says so when more than one sender can write."""
    paths = Paths(rltray_home)
    cases = [
        ({"channels": telegram("tg:4242", "tg:4343")}, "2 senders on telegram"),
        ({"channels": telegram("tg:4242", policy="open")}, "anyone on telegram"),
        ({"channels": telegram(policy="pairing")}, "every sender you approve"),
        ({"channels": telegram("tg:4242")}, None),
        ({"channels": telegram("tg:4242", "tg:4343"),
          "session": {"dmScope": "per-channel-peer"}}, None),
    ]
    for doc, who in cases:
        write(agent, doc)
        lines = agent.install(paths).lines
        shared = [line for line in lines if "session.dmScope is" in line]
        if who is None:
            assert shared == [], (doc, shared)
        else:
            assert len(shared) == 1 and who in shared[0], (doc, shared)
            assert "per-channel-peer" in shared[0]
        assert any("reaction rates only in a direct chat" in line for line in lines)
        agent.uninstall(paths)
