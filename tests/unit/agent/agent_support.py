"""A scripted model server on 127.0.0.1, over real HTTP: it answers any POST path,
so it speaks chat completions, the Responses API or Anthropic Messages, whichever
bodies are scripted (:func:`completion`, :func:`response`, :func:`message`).

Replies are queued in order; each request takes the next one. A reply is a JSON
body (or raw bytes) with a status and headers, optionally delayed, or a dropped
connection. Every request is recorded (path, headers, decoded JSON body).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """``cut`` sends only that many bytes of the body, then closes the connection, or,
    with ``pause``, waits that long before sending the rest (a stream mid-way)."""

    body: Any = None
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False
    cut: int | None = None
    pause: float = 0.0


def sse(*events: tuple[str | None, Any]) -> bytes:
    """Server-sent events: ``(event name or None, data)``; data other than a string
    is sent as JSON."""
    lines = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        text = data if isinstance(data, str) else json.dumps(data)
        lines.append(f"{head}data: {text}\n\n")
    return "".join(lines).encode()


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # names lower-cased: clients differ in how they spell them
    body: Any


def completion(content: str | None = None, calls: Sequence[tuple[str, str, Any]] = (),
               *, usage: tuple[int, int] | None = (100, 10)) -> dict[str, Any]:
    """A chat-completions body; ``calls`` are ``(id, name, arguments)``, arguments an
    object (sent as JSON text, as OpenAI does) or a string sent verbatim."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function",
             "function": {"name": name,
                          "arguments": args if isinstance(args, str) else json.dumps(args)}}
            for call_id, name, args in calls]
    body: dict[str, Any] = {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "test-model",
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if calls else "stop"}]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                         "total_tokens": sum(usage)}
    return body


def response(content: str | None = None, calls: Sequence[tuple[str, str, Any]] = (),
             *, usage: tuple[int, int] | None = (100, 10)) -> dict[str, Any]:
    """A Responses API body: a message item with ``content``, then one
    ``function_call`` item per ``(call_id, name, arguments)``."""
    output: list[dict[str, Any]] = []
    if content is not None:
        output.append({"type": "message", "id": "msg_1", "role": "assistant",
                       "status": "completed",
                       "content": [{"type": "output_text", "text": content,
                                    "annotations": []}]})
    output.extend({"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id,
                   "name": name, "status": "completed",
                   "arguments": args if isinstance(args, str) else json.dumps(args)}
                  for call_id, name, args in calls)
    body: dict[str, Any] = {"id": "resp_test", "object": "response", "created_at": 0,
                            "status": "completed", "error": None, "model": "test-model",
                            "output": output}
    if usage is not None:
        body["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1],
                         "total_tokens": sum(usage)}
    return body


def message(*texts: str, calls: Sequence[tuple[str, str, Any]] = (),
            usage: Mapping[str, int] | None = None) -> dict[str, Any]:
    """An Anthropic Messages body: one text block per text, then one ``tool_use``
    block per ``(id, name, input)``."""
    content: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts]
    content.extend({"type": "tool_use", "id": call_id, "name": name, "input": args}
                   for call_id, name, args in calls)
    return {"id": "msg_test", "type": "message", "role": "assistant", "model": "test-model",
            "content": content, "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": dict(usage or {"input_tokens": 100, "output_tokens": 10})}


class ChatServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self.unexpected: list[str] = []
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        name="chat-server", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def root_url(self) -> str:
        """The base URL without ``/v1`` (Anthropic's clients add it)."""
        return self.base_url.removesuffix("/v1")

    def reply(self, body: Any = None, **kw: Any) -> None:
        self.replies.append(Reply(body=body, **kw))

    def stream(self, body: bytes, **kw: Any) -> None:
        """Reply with an event stream (see :func:`sse`)."""
        self.reply(body, headers={"Content-Type": "text/event-stream"}, **kw)

    def answer(self, content: str | None = None, calls: Sequence[tuple[str, str, Any]] = (),
               **kw: Any) -> None:
        self.reply(completion(content, calls), **kw)

    async def until_received(self, count: int, *, seconds: float = 10.0) -> None:
        """Until ``count`` requests have arrived (the server answers in its own threads)."""
        def wait() -> bool:
            with self._arrived:
                return self._arrived.wait_for(lambda: len(self.received) >= count, seconds)

        assert await asyncio.to_thread(wait), f"fewer than {count} requests in {seconds} s"

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, received: Received) -> Reply | None:
        with self._lock:
            self.received.append(received)
            self._arrived.notify_all()
            return self.replies.popleft() if self.replies else None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw
                headers = {name.lower(): value for name, value in self.headers.items()}
                reply = server._next(Received(path=self.path, headers=headers, body=body))
                if reply is None:
                    server.unexpected.append(self.path)
                    reply = Reply(status=500, body={"error": {"message": "no reply scripted"}})
                if reply.delay:
                    server._release.wait(reply.delay)
                if reply.drop:
                    self.close_connection = True
                    return
                payload = (reply.body if isinstance(reply.body, bytes)
                           else json.dumps(reply.body).encode())
                self.send_response(reply.status)
                sent = {"Content-Type": "application/json", **reply.headers}
                for name, value in sent.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if reply.cut is None:
                    self.wfile.write(payload)
                    return
                self.wfile.write(payload[:reply.cut])
                self.wfile.flush()
                if not reply.pause:
                    self.close_connection = True
                    return
                server._release.wait(reply.pause)
                self.wfile.write(payload[reply.cut:])

        return Handler
