"""A fake model server for driving the real Claude Code and Codex programs in tests.

It speaks just enough of two wire protocols, both streaming (SSE):

- Anthropic Messages (``POST /v1/messages``), what Claude Code talks;
- OpenAI Responses (``POST /v1/responses``), what Codex talks.

Every answer is scripted from the request (no model runs): a prompt holding ``RUN-TOOL``
gets one shell tool call first (``echo tool-ran``), then, once the tool's result comes
back, a text answer; any other prompt gets ``ANSWER <n>: <the prompt's first words>``.
Every request is recorded (``requests``), so tests can check which model name an agent
asked for and which earlier messages a resumed session sent. Ollama's own
``/api/version`` and ``/api/tags`` answer too (``ollama_models`` lists the tags), for
an agent that checks the model exists before using Ollama's OpenAI-compatible API.

It is also the agents' HTTP(S) proxy (point ``HTTPS_PROXY``/``HTTP_PROXY`` at ``url``):
a ``CONNECT`` or an absolute-URL request for any host but this server's own is refused
with 403 and recorded in ``refused``, so an agent trying to reach the internet fails in
the test instead of quietly succeeding (or hanging) on a developer's machine.
Binds 127.0.0.1 only; standard library only.
"""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

TOOL_TRIGGER = "RUN-TOOL"
TOOL_COMMAND = "echo tool-ran"
TOOL_OUTPUT = "tool-ran"


@dataclass
class Seen:
    """One request the server answered: which API, which model, the user texts it carried."""

    api: str  # "anthropic" | "responses"
    path: str
    model: str | None
    user_texts: list[str]
    body: dict[str, Any] = field(repr=False)
    answer: str | None = None  # the text the server answered with (None for a tool call)


def _text_of(content: object) -> str:
    """The typed text of an Anthropic or Responses message content (string or blocks).

    Both agents add their own context as extra text blocks or messages that start with a
    tag (``<system-reminder>``, ``<environment_context>``, ...): those are left out.
    """
    blocks = [content] if isinstance(content, str) else content
    parts = []
    if isinstance(blocks, list):
        for block in blocks:
            text = block.get("text") if isinstance(block, dict) else block
            if isinstance(text, str) and text.strip() and not text.lstrip().startswith("<"):
                parts.append(text)
    return "\n".join(parts)


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


class FakeModel:
    """The server; use as a context manager (``with FakeModel() as model: model.url``)."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self.refused: list[str] = []
        self.ollama_models: list[str] = []
        self._count = itertools.count(1)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answered(self, api: str | None = None) -> list[Seen]:
        """The requests that were answered, optionally of one API only."""
        with self._lock:
            return [s for s in self.requests if api is None or s.api == api]

    # -- scripting ------------------------------------------------------------------

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)

    def _answer_text(self, prompt: str) -> str:
        words = " ".join(prompt.split())[:60]
        return f"ANSWER {next(self._count)}: {words}"

    # -- Anthropic Messages ----------------------------------------------------------

    def anthropic(self, body: dict[str, Any]) -> tuple[bytes, str]:
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        user_texts = [
            _text_of(m.get("content")) for m in messages
            if isinstance(m, dict) and m.get("role") == "user"
        ]
        last = messages[-1] if messages else {}
        last_blocks = last.get("content") if isinstance(last, dict) else None
        tool_result = isinstance(last_blocks, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in last_blocks
        )
        prompt = next((t for t in reversed(user_texts) if t.strip()), "")
        tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        use_tool = TOOL_TRIGGER in prompt and not tool_result and "Bash" in tools
        seen = Seen("anthropic", "/v1/messages", body.get("model"), user_texts, body)
        if use_tool:
            block: dict[str, Any] = {
                "type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", "name": "Bash",
                "input": {"command": TOOL_COMMAND, "description": "Print a word"},
            }
            stop = "tool_use"
        else:
            text = (f"The tool printed {TOOL_OUTPUT}. " if tool_result else "")
            text += self._answer_text(prompt)
            seen.answer = text
            block = {"type": "text", "text": text}
            stop = "end_turn"
        self._record(seen)
        message_id = f"msg_{uuid.uuid4().hex[:24]}"
        model = body.get("model") or "fake"
        usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        if not body.get("stream"):
            message = {"id": message_id, "type": "message", "role": "assistant", "model": model,
                       "content": [block], "stop_reason": stop, "stop_sequence": None,
                       "usage": usage}
            return json.dumps(message).encode(), "application/json"
        start = dict(block)
        if block["type"] == "text":
            start["text"] = ""
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start["input"] = {}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events = [
            ("message_start", {"type": "message_start", "message": {
                "id": message_id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": start}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 5}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        return _sse(events), "text/event-stream"

    # -- OpenAI Responses --------------------------------------------------------------

    def responses(self, body: dict[str, Any]) -> tuple[bytes, str]:
        items = body.get("input") if isinstance(body.get("input"), list) else []
        user_texts = [
            _text_of(i.get("content")) for i in items
            if isinstance(i, dict) and i.get("role") == "user" and i.get("type", "message")
            == "message"
        ]
        # Codex sends its own context (AGENTS.md, environment) as user messages too.
        typed = [t for t in user_texts if t.strip()]
        prompt = typed[-1] if typed else ""
        tool_result = bool(items) and isinstance(items[-1], dict) and (
            items[-1].get("type") == "function_call_output")
        seen = Seen("responses", "/v1/responses", body.get("model"), typed, body)
        call = None if tool_result or TOOL_TRIGGER not in prompt else _shell_call(body)
        response_id = f"resp_{uuid.uuid4().hex[:24]}"
        if call is not None:
            item = call
        else:
            text = (f"The tool printed {TOOL_OUTPUT}. " if tool_result else "")
            text += self._answer_text(prompt)
            seen.answer = text
            item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}
        self._record(seen)
        base = {"id": response_id, "object": "response", "model": body.get("model"),
                "status": "in_progress", "output": []}
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 15}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"type": "response.created", "response": base}),
            ("response.output_item.added", {"type": "response.output_item.added",
                                            "output_index": 0, "item": item}),
        ]
        if item["type"] == "message":
            events.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                "content_index": 0, "delta": item["content"][0]["text"]}))
        events += [
            ("response.output_item.done", {"type": "response.output_item.done",
                                           "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed", "response": {
                **base, "status": "completed", "output": [item], "usage": usage}}),
        ]
        return _sse(events), "text/event-stream"

    # -- HTTP ----------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet tests
                pass

            def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _refuse(self, target: str) -> None:
                with model._lock:
                    model.refused.append(target)
                self.close_connection = True
                self._send(403, b'{"error": "rltray tests: outside hosts are refused"}')

            def _local_path(self) -> str | None:
                """The request's path when it is meant for this server, else None (refused)."""
                if self.path.startswith("/"):
                    return urlsplit(self.path).path
                parts = urlsplit(self.path)
                if parts.hostname in ("127.0.0.1", "localhost") and parts.port == model.port:
                    return parts.path
                self._refuse(self.path)
                return None

            def do_CONNECT(self) -> None:
                self._refuse(self.path)

            def do_HEAD(self) -> None:
                if self._local_path() is not None:
                    self._send(200, b"")

            def do_GET(self) -> None:
                path = self._local_path()
                if path is None:
                    return
                if path == "/api/version":
                    self._send(200, b'{"version": "0.14.0"}')
                elif path == "/api/tags":
                    models = [{"name": n, "model": n, "size": 1, "digest": "0" * 64,
                               "details": {"format": "gguf"}} for n in model.ollama_models]
                    self._send(200, json.dumps({"models": models}).encode())
                elif path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [], "models": []})
                               .encode())
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:
                path = self._local_path()
                if path is None:
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._send(400, b'{"error": "not JSON"}')
                    return
                if path.endswith("/messages/count_tokens"):
                    self._send(200, b'{"input_tokens": 10}')
                elif path.endswith("/messages"):
                    self._send(200, *model.anthropic(body))
                elif path.endswith("/responses"):
                    self._send(200, *model.responses(body))
                else:
                    self._send(404, b'{"error": "not found"}')

        return Handler


def _shell_call(body: dict[str, Any]) -> dict[str, Any] | None:
    """A function call running TOOL_COMMAND with whichever shell tool the agent offers."""
    tools = {t.get("name"): t for t in body.get("tools") or [] if isinstance(t, dict)}
    call_id = f"call_{uuid.uuid4().hex[:20]}"
    for name, arguments in (
        ("exec_command", {"cmd": TOOL_COMMAND}),
        ("shell_command", {"command": TOOL_COMMAND}),
        ("shell", {"command": ["bash", "-lc", TOOL_COMMAND]}),
    ):
        if name in tools:
            return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:20]}",
                    "status": "completed", "name": name, "call_id": call_id,
                    "arguments": json.dumps(arguments)}
    return None
