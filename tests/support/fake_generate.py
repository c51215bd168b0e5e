"""An Ollama ``/api/generate`` for tests, written from Ollama's documented API.

Why its own server: ``fake_ollama.FakeOllama`` serves what publishing needs
(blobs, create, show); a lesson's suggested wording needs only generation, which
a real Ollama cannot do here. The rules that matter to rltray are the real one's:

* a model it does not have is a 404 ``{"error": "model 'x' not found"}``;
* without ``"stream": false`` the answer streams as JSON lines (one object per
  piece of text, the last with ``"done": true``), which a client expecting one
  object cannot read: rltray must ask for the single object;
* the single object carries the text in ``response`` with ``done``, ``model`` and
  the timings.

``answers`` maps a model to its reply (text, or a function of the prompt);
``delay_s`` makes each answer late; every request body is kept in ``requests``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = str | Callable[[str], str]


class FakeGenerate:
    """``with FakeGenerate({"tiny:latest": "Run one test"}) as ollama: ollama.url``."""

    def __init__(self, answers: dict[str, Answer] | None = None, delay_s: float = 0.0) -> None:
        self.answers: dict[str, Answer] = dict(answers or {})
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeGenerate:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                fake.requests.append(body)
                if self.path != "/api/generate":
                    return self._send(404, {"error": "404 page not found"})
                name = str(body.get("model") or "")
                answer = fake.answers.get(name) or fake.answers.get(_tagged(name))
                if answer is None:
                    return self._send(404, {"error": f"model '{name}' not found"})
                time.sleep(fake.delay_s)
                text = answer(str(body.get("prompt") or "")) if callable(answer) else answer
                if body.get("stream") is False:
                    return self._send(200, _done(name, text))
                lines = [{"model": name, "response": w, "done": False} for w in text.split(" ")]
                self._send_lines(200, [*lines, {**_done(name, ""), "response": ""}])

            def _send(self, status: int, body: Any) -> None:
                self._send_lines(status, [body], "application/json")

            def _send_lines(self, status: int, bodies: list[Any], kind: str = "") -> None:
                data = b"".join(json.dumps(b).encode() + b"\n" for b in bodies)
                with contextlib.suppress(OSError):  # the client gave up waiting (a timeout test)
                    self.send_response(status)
                    self.send_header("Content-Type", kind or "application/x-ndjson")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        serve = self._server.serve_forever
        threading.Thread(target=serve, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeGenerate:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _tagged(name: str) -> str:
    """``tiny`` is ``tiny:latest`` to Ollama."""
    return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"


def _done(model: str, text: str) -> dict[str, Any]:
    return {
        "model": model,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "response": text,
        "done": True,
        "done_reason": "stop",
        "context": [1, 2, 3],
        "total_duration": 1_000_000,
        "eval_count": len(text.split()),
    }
