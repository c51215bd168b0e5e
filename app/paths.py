"""Where rltray keeps its state on each OS.

One switch moves everything: ``RLTRAY_HOME`` relocates the database, spool,
adapters, runs, config, locks and logs, so tests and benchmarks never touch a
user's real data. Without it, platformdirs picks the per-OS data folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_HOME = "RLTRAY_HOME"
APP_NAME = "rltray"


def default_home(env: dict[str, str] | None = None) -> Path:
    """The data folder: ``$RLTRAY_HOME`` if set, else platformdirs' user data dir."""
    env = os.environ if env is None else env
    override = env.get(ENV_HOME)
    if override:
        return Path(override).expanduser().absolute()
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


@dataclass(frozen=True)
class Paths:
    """Every file and folder rltray writes, derived from one root."""

    home: Path

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Paths:
        return cls(default_home(env))

    @property
    def db(self) -> Path:
        return self.home / "rltray.db"

    @property
    def config(self) -> Path:
        return self.home / "config.toml"

    @property
    def spool(self) -> Path:
        return self.home / "spool"

    @property
    def spool_incoming(self) -> Path:
        return self.spool / "incoming"

    @property
    def spool_rejected(self) -> Path:
        return self.spool / "rejected"

    @property
    def hook_state(self) -> Path:
        """Per-session scratch the hook keeps between UserPromptSubmit and Stop."""
        return self.spool / "sessions"

    @property
    def adapters(self) -> Path:
        return self.home / "adapters"

    @property
    def runs(self) -> Path:
        return self.home / "runs"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def hook_log(self) -> Path:
        return self.logs / "hook.log"

    @property
    def backups(self) -> Path:
        """Copies of agent config files taken before rltray edits them."""
        return self.home / "backups"

    @property
    def lock(self) -> Path:
        return self.home / "rltray.lock"

    @property
    def endpoint(self) -> Path:
        """Port and pid of the running tray's local API (0600)."""
        return self.home / "endpoint.json"

    def ensure(self) -> Paths:
        """Create every folder, private to the user (0700), and return self."""
        for folder in (
            self.home,
            self.spool,
            self.spool_incoming,
            self.spool_rejected,
            self.hook_state,
            self.adapters,
            self.runs,
            self.logs,
            self.backups,
        ):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if os.name == "posix":
                os.chmod(folder, 0o700)
        return self
