"""The real OpenClaw gateway, offline, in a temp folder, talking to ``openclaw_fakes``.

``Gateway(install, folder, model, telegram, owner)`` writes an ``openclaw.json`` with the
fake model as an ``openai-completions`` provider and Telegram's ``apiRoot`` on 127.0.0.1
(DMs from ``owner`` only), and everything that would reach the network or call the model
on its own switched off: the model catalogue refresh, the heartbeat, cron, the control UI,
Bonjour, updates. ``start()`` waits until the gateway polls the fake Telegram (10-18 s);
``stop()`` ends it (SIGTERM, then SIGKILL). ``cli(...)`` runs an ``openclaw`` command with
the same folders, which is how rltray's installer reaches this gateway's config.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support.openclaw_fakes import FakeModel, FakeTelegram
from tests.support.openclaw_install import Install

BOT_TOKEN = "7000001:rltray-test-token"
START_TIMEOUT_S = 240  # 10-18 s on an idle machine; a loaded 2-core CI box is far slower


def base_config(model: FakeModel, telegram: FakeTelegram, owner: int) -> dict[str, Any]:
    """An OpenClaw config for an offline test gateway (only documented keys)."""
    return {
        "models": {
            "mode": "merge",
            "catalogRefresh": {"enabled": False},
            "providers": {"fake": {
                "baseUrl": f"{model.url}/v1", "apiKey": "fake-key", "api": "openai-completions",
                "models": [{"id": "fake-model", "name": "Fake", "reasoning": False,
                            "input": ["text"], "contextWindow": 32000, "maxTokens": 1000,
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}],
            }},
        },
        "agents": {"defaults": {"model": {"primary": "fake/fake-model"},
                                "heartbeat": {"every": "0m"}}},
        "cron": {"enabled": False},
        "gateway": {"mode": "local", "bind": "loopback", "controlUi": {"enabled": False}},
        "channels": {"telegram": {
            "enabled": True, "botToken": BOT_TOKEN, "apiRoot": telegram.url,
            "dmPolicy": "allowlist", "allowFrom": [f"tg:{owner}"],
            "streaming": {"mode": "off"}, "reactionNotifications": "own",
        }},
    }


class Gateway:
    def __init__(self, install: Install, folder: Path) -> None:
        self.install = install
        self.folder = folder
        self.home = folder / "home"
        self.state = self.home / ".openclaw"
        self.config = self.state / "openclaw.json"
        self.log = folder / "gateway.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.state.mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items()
                if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "TZ", "RLTRAY_HOME")}
        return {**keep, "HOME": str(self.home), "OPENCLAW_HOME": str(self.home),
                "OPENCLAW_STATE_DIR": str(self.state), "OPENCLAW_CONFIG_PATH": str(self.config),
                "OPENCLAW_OFFLINE": "1", "OPENCLAW_NO_AUTO_UPDATE": "1",
                "OPENCLAW_DISABLE_BONJOUR": "1", "NO_COLOR": "1"}

    def write_config(self, config: dict[str, Any]) -> None:
        self.config.write_text(json.dumps(config, indent=2) + "\n")

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.install.argv(*args), capture_output=True, text=True,
                              env=self.env, timeout=timeout, stdin=subprocess.DEVNULL)

    def start(self, telegram: FakeTelegram) -> None:
        telegram.reset_polling()
        out = self.log.open("ab")
        self.proc = subprocess.Popen(self.install.argv("gateway", "run"), env=self.env,
                                     stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the gateway exited with {self.proc.returncode}: "
                                   f"{self.tail()}")
            try:
                telegram.wait_polling(1.0)
                return
            except TimeoutError:
                continue
        raise TimeoutError(f"the gateway did not poll Telegram in {START_TIMEOUT_S} s: "
                           f"{self.tail()}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text("utf-8", "replace")[-chars:]
        except OSError:
            return "(no log)"
