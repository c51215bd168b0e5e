"""The fake Ollama (tests/support/fake_ollama.py), able to hold or fail chosen requests.

Why: what happens *during* an export (a rollback, a Ctrl+C, a killed tray) needs an
export that is provably still running; a request held until the test releases it does
that without a sleep. A failed request is Ollama's own JSON error with status 500.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tests.support.fake_ollama import FakeOllama

HOLD_S = 60.0  # a held request is answered after this at the latest (a test that failed)


class GatedOllama(FakeOllama):
    """``hold(method, path)``: the next such request waits for ``release()``;
    ``fail(method, path, needle)``: the next one whose body holds ``needle`` gets a 500."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held = threading.Event()  # set once a held request arrived
        self._release = threading.Event()
        self._hold: tuple[str, str] | None = None
        self._fail: list[tuple[str, str, str]] = []

    def hold(self, method: str, path: str) -> None:
        self._hold = (method, path)

    def release(self) -> None:
        self._release.set()

    def fail(self, method: str, path: str, needle: str = "") -> None:
        self._fail.append((method, path, needle))

    def route(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        if self._hold == (method, path):
            self._hold = None
            self.held.set()
            self._release.wait(HOLD_S)
        for rule in list(self._fail):
            if rule[:2] == (method, path) and rule[2].encode() in (body or b""):
                self._fail.remove(rule)
                with self._lock:
                    self.requests.append((method, path))
                return 500, {"error": f"injected failure of {method} {path}"}
        return super().route(method, path, body)


def serving_tiny_gated(folder: Path) -> GatedOllama:
    """``serving_tiny`` (tests/support/fake_ollama.py) as a GatedOllama: ``tiny:1m`` served."""
    from tests.support.tinygguf import GO_TEMPLATE, build_tiny_gguf

    server = GatedOllama(folder / "ollama", "0.35.0").start()
    server.install(
        "tiny:1m", build_tiny_gguf(folder / "tiny.gguf"), template=GO_TEMPLATE,
        parameters={"stop": ["<|im_end|>"]},
    )  # fmt: skip
    return server
