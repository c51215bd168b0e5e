"""The real Claude Code and Codex programs, for tests: pinned npm installs, a private HOME
pointed at a fake model server, and a terminal (tmux) to drive their terminal UIs.

The pinned versions are the ones rltray is verified against; they come from the agents'
own modules (``VERIFIED``), so README, doctor and these tests name the same ones.
npm installs each into ``~/.cache/rltray-tests/npm/<package>@<version>`` (or
``$RLTRAY_TEST_NPM_CACHE``) once; later runs reuse it, so CI pays the download once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rltray.app.hooks.claude_code import ClaudeCode
from rltray.app.hooks.codex import Codex

PACKAGES = {
    "claude": ("@anthropic-ai/claude-code", ClaudeCode.verified[-1]),
    "codex": ("@openai/codex", Codex.verified[-1]),
}
FAKE_KEY = "sk-ant-fake-key-for-rltray-tests-0000"


class Unavailable(Exception):
    """Why the real agents cannot run here (npm missing, registry unreachable); skip reason."""


def cache_root(env: Mapping[str, str]) -> Path:
    override = env.get("RLTRAY_TEST_NPM_CACHE")
    return Path(override) if override else Path(env.get("HOME") or Path.home()) / ".cache" / (
        "rltray-tests") / "npm"


def install(env: Mapping[str, str]) -> dict[str, Path]:
    """Each agent's program from the npm cache, installing the pinned version when absent."""
    npm = shutil.which("npm", path=env.get("PATH"))
    bins = {}
    for name, (package, version) in PACKAGES.items():
        folder = cache_root(env) / f"{package}@{version}"
        program = folder / "node_modules" / ".bin" / name
        if not program.exists():
            if npm is None:
                raise Unavailable("npm is not installed (needed to install the real agents)")
            folder.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder),
                 f"{package}@{version}"],
                capture_output=True, text=True, timeout=600, env=dict(env),
            )
            if done.returncode != 0 or not program.exists():
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                raise Unavailable(f"npm could not install {package}@{version}: {tail[0]}")
        bins[name] = program
    return bins


@dataclass
class Agents:
    """One test's world: a private HOME, rltray's data folder, the fake server, the programs."""

    home: Path
    rltray_home: Path
    project: Path
    url: str
    bins: dict[str, Path]
    python: str

    def env(self, **extra: str) -> dict[str, str]:
        """The environment the agents run in: nothing reaches outside 127.0.0.1."""
        base = {
            "HOME": str(self.home),
            "PATH": os.pathsep.join([str(p.parent) for p in self.bins.values()]
                                    + [os.path.dirname(self.python), "/usr/bin", "/bin"]),
            "RLTRAY_HOME": str(self.rltray_home),
            "TMPDIR": str(self.home / "tmp"),
            "LANG": "C.UTF-8",
            "TERM": "xterm-256color",
            "HTTPS_PROXY": self.url, "HTTP_PROXY": self.url, "https_proxy": self.url,
            "http_proxy": self.url, "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "ANTHROPIC_BASE_URL": self.url, "ANTHROPIC_API_KEY": FAKE_KEY,
            "FAKE_API_KEY": "fake",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
        }
        if "RLTRAY_ALLOW_UNSAFE_LOCATION" in os.environ:  # a clone in /tmp (tests/conftest.py)
            base["RLTRAY_ALLOW_UNSAFE_LOCATION"] = os.environ["RLTRAY_ALLOW_UNSAFE_LOCATION"]
        base.update(extra)
        return base

    def run(self, argv: list[str], timeout: float = 120, **extra: str) -> str:
        """Run a program to its end in the project folder; its stdout + stderr."""
        done = subprocess.run(argv, cwd=self.project, env=self.env(**extra),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"{argv[:3]} exited {done.returncode}:\n{out[-3000:]}"
        return out

    def rltray(self, *args: str) -> str:
        return self.run([self.python, "-m", "rltray.app.cli", *args])

    def claude(self, *args: str, **extra: str) -> str:
        return self.run([str(self.bins["claude"]), *args], **extra)

    def codex(self, *args: str, **extra: str) -> str:
        return self.run([str(self.bins["codex"]), *args], **extra)

    def prepare(self, port: int) -> None:
        """What a user's first start would have settled: Claude Code's onboarding and API key
        approval, and a Codex provider on the fake server (Codex's folder trust stays asked)."""
        (self.home / "tmp").mkdir(parents=True, exist_ok=True)
        claude_state = {
            "hasCompletedOnboarding": True, "theme": "dark",
            "customApiKeyResponses": {"approved": [FAKE_KEY[-20:]], "rejected": []},
            "projects": {str(self.project): {"hasTrustDialogAccepted": True,
                                             "allowedTools": []}},
        }
        (self.home / ".claude").mkdir(parents=True, exist_ok=True)
        (self.home / ".claude.json").write_text(json.dumps(claude_state))
        (self.home / ".codex").mkdir(parents=True, exist_ok=True)
        (self.home / ".codex" / "config.toml").write_text(
            "# my Codex settings\n"
            'model = "fake-model"\n'
            'model_provider = "fake"\n\n'
            "[model_providers.fake]\n"
            'name = "Fake"\n'
            f'base_url = "http://127.0.0.1:{port}/v1"\n'
            'wire_api = "responses"\n'
            'env_key = "FAKE_API_KEY"\n'
        )


def trust_codex_hooks(agents: Agents, socket: Path) -> None:
    """Trust every user hook in Codex's terminal UI ("Hooks need review": trust all), as a
    user does once, and quit; Codex records it in config.toml, so `codex exec` runs them."""
    ui = Terminal([str(agents.bins["codex"]), "--no-daemon"], agents.env(), agents.project,
                  socket)
    try:
        through_codex_dialogs(ui, hooks="2")  # Trust all and continue
    finally:
        ui.close("/quit")


CODEX_READY = "Ask Codex to do anything"  # the empty composer's placeholder


def through_codex_dialogs(ui: Terminal, hooks: str) -> None:
    """Past Codex's opening dialogs to its empty composer: trust the folder where it asks
    (some folders only: Codex remembers the answer), then answer "Hooks need review" with
    ``hooks`` ("2" trust all and continue, "3" continue without trusting)."""
    if ui.wait_for("Trust this folder?", "Hooks need review") == "Trust this folder?":
        ui.choose("1", "Trust this folder?")
        ui.wait_for("Hooks need review")
    ui.choose(hooks, "Hooks need review")
    ui.wait_for(CODEX_READY)


def wait_until(check: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


class Terminal:
    """A terminal UI running in a private tmux server: type keys, read the rendered screen."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, socket: Path) -> None:
        self.socket = socket
        self.base = ["tmux", "-S", str(socket), "-f", os.devnull]
        subprocess.run([*self.base, "new-session", "-d", "-s", "ui", "-x", "160", "-y", "50",
                        "-c", str(cwd), *argv], env=env, check=True, timeout=30)

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", "-t", "ui", *keys], check=True, timeout=10)

    def choose(self, digit: str, menu: str, timeout: float = 60, patience: float = 5) -> None:
        """Pick item ``digit`` of the menu titled ``menu``: its digit moves the cursor (›)
        there, Enter confirms (Codex confirms some items on the digit alone).

        A terminal UI can draw its menu before it reads keys: on a loaded 2-core CI machine
        Codex 0.169 dropped both keys sent to its freshly drawn hook dialog. So each key is
        pressed again when the screen has not answered it in ``patience`` seconds; a digit
        that was late, not lost, lands in the next screen's empty composer and is erased
        (a late Enter there sends nothing)."""
        deadline = time.monotonic() + timeout
        digits = 0
        while menu in (screen := self.screen()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{menu!r} stayed on screen after {timeout:.0f} s "
                                     f"of choosing {digit}:\n{screen}")
            on_it = f"› {digit}." in screen
            self.keys("Enter" if on_it else digit)
            digits += not on_it
            waited = time.monotonic() + patience
            while time.monotonic() < waited:
                screen = self.screen()
                if menu not in screen or (not on_it and f"› {digit}." in screen):
                    break
                time.sleep(0.2)
        if digits > 1:
            time.sleep(patience)  # a late digit shows by then, typed into the composer
            typed = [line for line in self.screen().splitlines() if line.strip() == f"› {digit}"]
            if typed:
                self.keys(*["BSpace"] * len(typed))

    def type(self, text: str, settle: float = 0.6) -> None:
        """Type ``text`` (literally), wait for the UI's paste detection, press Enter."""
        subprocess.run([*self.base, "send-keys", "-t", "ui", "-l", text], check=True, timeout=10)
        time.sleep(settle)
        self.keys("Enter")

    def screen(self) -> str:
        done = subprocess.run([*self.base, "capture-pane", "-p", "-J", "-t", "ui", "-S", "-200"],
                              capture_output=True, text=True, timeout=10)
        return done.stdout

    def wait_for(self, *texts: str, timeout: float = 60, count: int = 1) -> str:
        """The first of ``texts`` to show on the screen (``count`` times); fails with it."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            for text in texts:
                if screen.count(text) >= count:
                    return text
            if time.monotonic() > deadline:
                raise AssertionError(f"{texts!r} not on screen after {timeout:.0f} s:\n{screen}")
            time.sleep(0.3)

    def alive(self) -> bool:
        done = subprocess.run([*self.base, "has-session", "-t", "ui"], capture_output=True,
                              timeout=10)
        return done.returncode == 0

    def close(self, quit_command: str | None = None) -> None:
        """Quit the program (``quit_command`` typed, so it saves its state), then tmux."""
        if quit_command is not None and self.alive():
            self.type(quit_command)
            deadline = time.monotonic() + 15
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.2)
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=10)
