"""Two small servers the real OpenClaw gateway talks to in tests, both on 127.0.0.1.

``FakeModel`` is an OpenAI-compatible ``/v1/chat/completions`` (streamed or not) that
answers every request with the next of its scripted answers and counts its calls, so a
test can say "no model call happened". ``FakeTelegram`` is the part of the Telegram Bot
API a polling bot uses: ``getUpdates`` hands out the updates a test queued (a user's
message, a reaction) and every ``sendMessage`` is kept with the message id it was given.
Written here because no maintained package fakes either API offline.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server:
    """A ThreadingHTTPServer on a free loopback port, served from a daemon thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self  # type: ignore[attr-defined]
        # a gateway stopped mid long-poll closes its socket: no traceback for that
        self.httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _read_json(handler: BaseHTTPRequestHandler) -> dict[str, Any]:
    length = int(handler.headers.get("Content-Length") or 0)
    body = handler.rfile.read(length) if length else b""
    if not body:
        return {}
    kind = handler.headers.get("Content-Type") or ""
    if "json" in kind:
        value = json.loads(body)
        return value if isinstance(value, dict) else {}
    if "x-www-form-urlencoded" in kind:
        from urllib.parse import parse_qsl

        return dict(parse_qsl(body.decode()))
    return {"_raw": body[:2000].decode("utf-8", "replace")}


def _send_json(handler: BaseHTTPRequestHandler, status: int, value: object) -> None:
    data = json.dumps(value).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


# -- the model ------------------------------------------------------------------------


class FakeModel(_Server):
    """OpenAI chat completions; ``answer(request) -> text`` decides each reply."""

    def __init__(self, answer: Callable[[dict[str, Any]], str] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answer = answer or (lambda request: f"fake answer {len(self.requests)}")
        self.lock = threading.Lock()
        super().__init__(_ModelHandler)

    @property
    def calls(self) -> int:
        with self.lock:
            return len(self.requests)


class _ModelHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # /v1/models
        _send_json(self, 200, {"object": "list", "data": [
            {"id": "fake-model", "object": "model", "owned_by": "rltray-test"}]})

    def do_POST(self) -> None:
        model: FakeModel = self.server.owner  # type: ignore[attr-defined]
        request = _read_json(self)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            _send_json(self, 404, {"error": {"message": f"no route {self.path}"}})
            return
        with model.lock:
            model.requests.append(request)
        text = model.answer(request)
        created = int(time.time())
        if not request.get("stream"):
            _send_json(self, 200, {
                "id": "chatcmpl-fake", "object": "chat.completion", "created": created,
                "model": request.get("model"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created,
                "model": request.get("model")}
        chunks = [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                  "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}},
        ]
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


# -- Telegram ------------------------------------------------------------------------------


class FakeTelegram(_Server):
    """The Bot API methods a polling bot calls, for one bot and private chats."""

    BOT_ID = 7000001

    def __init__(self, token: str) -> None:
        self.token = token
        self.cond = threading.Condition()
        self.updates: list[dict[str, Any]] = []
        self.next_update = 1
        self.next_message = 100
        self.sent: list[dict[str, Any]] = []  # every message the bot sent, with its id
        self.edits: list[dict[str, Any]] = []  # every editMessageReplyMarkup
        self.answered: list[str] = []  # callback query ids answered (answerCallbackQuery)
        self.next_callback = 900
        self.calls: list[str] = []
        self.polls = 0
        super().__init__(_TelegramHandler)

    # what a test does as the user
    def user_message(self, user_id: int, text: str, name: str = "Ada") -> int:
        """Queue a private message from ``user_id``; returns its message id."""
        with self.cond:
            self.next_message += 1
            mid = self.next_message
            entities = ([{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}]
                        if text.startswith("/") else [])
            message = {"message_id": mid, "date": int(time.time()), "text": text,
                       "chat": {"id": user_id, "type": "private", "first_name": name},
                       "from": {"id": user_id, "is_bot": False, "first_name": name}}
            if entities:
                message["entities"] = entities
            self._queue({"message": message})
            return mid

    def user_reaction(self, user_id: int, message_id: int, emoji: str, name: str = "Ada") -> None:
        """Queue a ``message_reaction`` update: ``user_id`` reacts to ``message_id``."""
        with self.cond:
            self._queue({"message_reaction": {
                "chat": {"id": user_id, "type": "private", "first_name": name},
                "message_id": message_id, "user": {"id": user_id, "is_bot": False,
                                                   "first_name": name},
                "date": int(time.time()), "old_reaction": [],
                "new_reaction": [{"type": "emoji", "emoji": emoji}]}})

    def user_press(self, user_id: int, message: dict[str, Any], data: str,
                   name: str = "Ada") -> str:
        """Queue a ``callback_query``: ``user_id`` presses the inline button carrying
        ``data`` under ``message`` (a record of :attr:`sent`); returns the query's id."""
        with self.cond:
            self.next_callback += 1
            query = str(self.next_callback)
            chat = {"id": message["chat_id"], "type": "private", "first_name": name}
            shown = {"message_id": message["message_id"], "date": int(time.time()),
                     "chat": chat, "text": message["text"],
                     "from": {"id": self.BOT_ID, "is_bot": True, "first_name": "rltray test bot"}}
            markup = keyboard_of(message)
            if markup:
                shown["reply_markup"] = {"inline_keyboard": markup}
            self._queue({"callback_query": {
                "id": query, "chat_instance": f"ci{message['chat_id']}", "data": data,
                "from": {"id": user_id, "is_bot": False, "first_name": name},
                "message": shown}})
            return query

    def wait_edit(self, message_id: int, after: int, timeout: float) -> dict[str, Any]:
        """The first ``editMessageReplyMarkup`` of ``message_id`` with an index >= ``after``."""
        return self._wait_for(self.edits, after, timeout, f"no button edit of {message_id}",
                              lambda edit: int(edit.get("message_id") or 0) == message_id)

    def _wait_for(self, items: list[dict[str, Any]], after: int, timeout: float, none: str,
                  match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first of ``items[after:]`` that ``match``es, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for item in items[after:]:
                    if match(item):
                        return item
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{none} in {timeout} s; calls: {self.calls[-20:]}")
                self.cond.wait(left)

    def _queue(self, update: dict[str, Any]) -> None:
        self.updates.append({"update_id": self.next_update, **update})
        self.next_update += 1
        self.cond.notify_all()

    def wait_sent(self, chat_id: int, after: int, timeout: float) -> dict[str, Any]:
        """The first message the bot sent to ``chat_id`` with an index >= ``after``."""
        return self._wait_for(self.sent, after, timeout, f"the bot sent nothing to {chat_id}",
                              lambda message: message["chat_id"] == chat_id)

    def wait_polling(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.polls == 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the gateway never polled Telegram in {timeout} s; "
                                       f"calls: {self.calls[-20:]}")
                self.cond.wait(left)

    def reset_polling(self) -> None:
        with self.cond:
            self.polls = 0

    def handle(self, method: str, params: dict[str, Any]) -> object:
        with self.cond:
            self.calls.append(method)
        if method == "getMe":
            return {"id": self.BOT_ID, "is_bot": True, "first_name": "rltray test bot",
                    "username": "rltray_test_bot", "can_join_groups": False,
                    "can_read_all_group_messages": False, "supports_inline_queries": False}
        if method == "getUpdates":
            return self._get_updates(params)
        if method in ("sendMessage", "sendPhoto", "sendDocument"):
            with self.cond:
                self.next_message += 1
                chat = int(params.get("chat_id") or 0)
                record = {"message_id": self.next_message, "chat_id": chat,
                          "text": params.get("text") or params.get("caption") or "",
                          "params": params}
                self.sent.append(record)
                self.cond.notify_all()
            return {"message_id": record["message_id"], "date": int(time.time()),
                    "chat": {"id": chat, "type": "private"}, "text": record["text"],
                    "from": {"id": self.BOT_ID, "is_bot": True, "first_name": "rltray test bot"}}
        if method == "editMessageText":
            return {"message_id": int(params.get("message_id") or 0), "date": int(time.time()),
                    "chat": {"id": int(params.get("chat_id") or 0), "type": "private"},
                    "text": params.get("text") or ""}
        if method == "editMessageReplyMarkup":
            with self.cond:
                self.edits.append(params)
                self.cond.notify_all()
            return True
        if method == "answerCallbackQuery":
            with self.cond:
                self.answered.append(str(params.get("callback_query_id")))
            return True
        if method == "getMyCommands":
            return []
        if method == "getChat":
            return {"id": int(params.get("chat_id") or 0), "type": "private"}
        return True  # setMyCommands, deleteWebhook, sendChatAction, setMessageReaction, ...

    def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        wait = min(float(params.get("timeout") or 0), 2.0)
        deadline = time.monotonic() + wait
        with self.cond:
            self.polls += 1
            self.cond.notify_all()
            self.updates = [u for u in self.updates if u["update_id"] >= offset]
            while not self.updates:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            return list(self.updates)


class _TelegramHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _route(self) -> None:
        tg: FakeTelegram = self.server.owner  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        prefix = f"/bot{tg.token}/"
        if not path.startswith(prefix):
            _send_json(self, 404, {"ok": False, "error_code": 404, "description": "Not Found"})
            return
        params = _read_json(self) if self.command == "POST" else {}
        if "?" in self.path:
            from urllib.parse import parse_qsl

            params.update(parse_qsl(self.path.split("?", 1)[1]))
        _send_json(self, 200, {"ok": True, "result": tg.handle(path[len(prefix):], params)})

    do_GET = _route
    do_POST = _route


def keyboard_of(record: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The inline keyboard a sent message or a button edit carries (rows of buttons): the
    Bot API takes ``reply_markup`` as an object or, in a form body, as a JSON string."""
    markup = record.get("params", record).get("reply_markup")
    if isinstance(markup, str):
        markup = json.loads(markup)
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    return rows if isinstance(rows, list) else []
