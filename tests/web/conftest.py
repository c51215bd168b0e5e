"""Fixtures for the settings web app: a real Service over a temp data folder, signed-in clients.

``client`` went through the real launch URL (one-time token -> cookie), so
every test exercises the same door the window uses.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rltray.app.service import Service
from rltray.web.app import create_app
from rltray.web.security import Guard

from tests.web.webtesting import LLAMA_SHOW, signed_in


@pytest.fixture
def guard() -> Guard:
    return Guard()


@pytest.fixture
def app(runtime: Any, guard: Guard, tmp_path) -> Any:
    app = create_app(
        runtime,
        guard=guard,
        options={"ollama_host": "http://127.0.0.1:9", "model_roots": [str(tmp_path / "models")]},
    )
    app.config["TESTING"] = True
    return app


@pytest.fixture
def anonymous(app: Any) -> Any:
    return app.test_client()


@pytest.fixture
def client(app: Any, guard: Guard) -> Any:
    """A client signed in through a launch URL; JSON posts carry the CSRF header."""
    return signed_in(app, guard)


@pytest.fixture
def add_turns(service: Service) -> Callable[..., list[int]]:
    """Store ``n`` captured turns through the real store; returns their ids, oldest first."""
    counter = itertools.count(1)

    def add(n: int = 1, **fields: Any) -> list[int]:
        ids = []
        for _ in range(n):
            k = next(counter)
            rec = {
                "agent": "claude-code",
                "session": "s1",
                "turn": f"t{k}",
                "prompt": f"Question {k}: how do I fix the parser?",
                "response": f"Answer {k}:\n\n```python\nprint({k})\n```",
                "context": [{"role": "user", "content": f"earlier {k}"}],
                "cwd": "/work/project",
                "captured_at": f"2025-03-01T10:{k // 60 % 60:02d}:{k % 60:02d}Z",
            }
            rec.update(fields)
            ids.append(service.store.add_turn(rec)[0])
        return ids

    return add


# -- a small Ollama for the wizard: /api/tags and /api/show, as Ollama documents them ----------

@pytest.fixture
def ollama() -> Iterator[str]:
    """An HTTP server answering /api/tags and /api/show for two models; yields its URL."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    shapes = {
        "tiny:latest": LLAMA_SHOW,
        "other:7b": {
            "details": {"parameter_size": "7B"},
            "model_info": {"general.architecture": "qwen2", "qwen2.block_count": 28,
                           "qwen2.embedding_length": 3584, "qwen2.vocab_size": 152064},
        },
    }  # fmt: skip

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/api/tags":
                self._send(200, {"models": [{"name": n, "size": 1000} for n in shapes]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/api/show" and body.get("model") in shapes:
                self._send(200, shapes[body["model"]])
            else:
                self._send(404, {"error": f"model '{body.get('model')}' not found"})

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


