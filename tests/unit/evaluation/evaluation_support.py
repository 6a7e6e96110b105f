"""Helpers for the evaluation tests: small task files and recorded scripts."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ORDER = {"id": "o-1", "customer_id": "c-1", "date": "2024-01-01", "status": "open", "total": 5.0}


def task_file(folder: Path, tasks: list[dict[str, Any]], **extra: Any) -> Path:
    """Write a task file with ``tasks`` (and top-level ``extra``) into ``folder``."""
    body: dict[str, Any] = {"format": "dsh-jupyter-tasks/1", "name": "tiny", "tasks": tasks,
                            "world": {"files": {"a.txt": "alpha beta"},
                                      "database": {"customers": [], "orders": [ORDER]}}}
    body.update(extra)
    path = folder / "tasks.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def script_file(folder: Path, name: str, script: list[dict[str, Any]]) -> str:
    """Write a recorded script; returns its path relative to ``folder``."""
    (folder / name).write_text(json.dumps(script), encoding="utf-8")
    return name


class ChatServer:
    """A chat-completions server on 127.0.0.1 replying with ``replies`` in order
    (``{"content": ...}`` or ``{"calls": [(name, arguments), ...]}``)."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                server.requests.append(json.loads(self.rfile.read(length)))
                body = json.dumps(_completion(server.replies.pop(0))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _completion(reply: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    calls = reply.get("calls", [])
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{n}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}}
            for n, (name, arguments) in enumerate(calls, start=1)]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "test-model",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}
