"""Streamed responses: server-sent events in, text deltas out, and the whole body at the end.

Each API's events are folded back into the body its non-streamed response would
have had, which the same parser then checks (so a streamed response fails with the
same field-naming errors, and ``raw`` still records a body ``dump_script`` can
write). A field an event gets wrong is named by the event's position:
``events[3].delta.text``. A server that answers a streamed request with plain JSON
is read as such.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ModelResponseError, ModelUnavailableError
from ..wire import Parser
from ._http import json_body

if TYPE_CHECKING:
    import httpx2

TextSink = Callable[[str], None]


class Fold(Protocol):
    """One API's events folded into a body; ``feed`` returns a text delta, if any."""

    def feed(self, event: str | None, data: Any, parser: Parser, at: str) -> str | None: ...

    def body(self, parser: Parser) -> object: ...


async def read_stream(response: httpx2.Response, fold: Fold, *, on_text: TextSink | None,
                      attempts: int, kind: str, what: str) -> object:
    """The body of a streamed ``response``, calling ``on_text`` with each text delta."""
    import httpx2

    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        await response.aread()
        return json_body(response, attempts=attempts, kind=kind)
    parser = Parser(attempts, kind)
    count = 0
    try:
        async for event, data in _server_sent_events(response):
            if data == "[DONE]":
                break
            at = f"events[{count}]"
            count += 1
            try:
                decoded = json.loads(data)
            except ValueError:
                parser.fail(at, "expected JSON data", data)
            text = fold.feed(event, decoded, parser, at)
            if text and on_text is not None:
                on_text(text)
    except httpx2.TransportError as exc:
        raise ModelUnavailableError(
            f"{what} failed after {count} streamed events: {type(exc).__name__}: "
            f"{str(exc) or 'no detail'}", attempts=attempts) from None
    return fold.body(parser)


async def _server_sent_events(response: httpx2.Response) -> AsyncIterator[tuple[str | None, str]]:
    event: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = None, []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield event, "\n".join(data)


class ChatFold:
    """Chat Completions chunks: ``choices[0].delta`` content and tool-call pieces
    (joined by their ``index``), the finish reason, usage from the last chunk."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: object = None
        self.model: object = None
        self.error: object = None

    def feed(self, event: str | None, data: Any, parser: Parser, at: str) -> str | None:
        chunk = parser.obj(data, at)
        if "error" in chunk and "choices" not in chunk:
            self.error = chunk["error"]
            return None
        self.model = chunk.get("model", self.model)
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            parser.fail(f"{at}.choices", "expected an array", choices)
        text: str | None = None
        for i, value in enumerate(choices[:1]):
            choice = parser.obj(value, f"{at}.choices[{i}]")
            delta = parser.obj(choice.get("delta") or {}, f"{at}.choices[{i}].delta")
            text = parser.optional_str(delta.get("content"), f"{at}.choices[{i}].delta.content")
            if text:
                self.content.append(text)
            thought = parser.optional_str(delta.get("reasoning_content", delta.get("reasoning")),
                                          f"{at}.choices[{i}].delta.reasoning_content")
            if thought:
                self.reasoning.append(thought)
            for j, piece in enumerate(delta.get("tool_calls") or ()):
                self.add_call(parser.obj(piece, f"{at}.choices[{i}].delta.tool_calls[{j}]"))
            self.finish = choice.get("finish_reason") or self.finish
        return text

    def add_call(self, piece: dict[str, Any]) -> None:
        index = piece.get("index")
        slot = self.calls.setdefault(index if isinstance(index, int) else len(self.calls), {
            "id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if piece.get("id"):
            slot["id"] = piece["id"]
        function = piece.get("function") or {}
        if isinstance(function, dict):
            if function.get("name"):
                slot["function"]["name"] = function["name"]
            if isinstance(function.get("arguments"), str):
                slot["function"]["arguments"] += function["arguments"]

    def body(self, parser: Parser) -> object:
        if self.error is not None and not (self.content or self.calls):
            return {"error": self.error}
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self.content) if self.content else None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        body: dict[str, Any] = {"object": "chat.completion", "model": self.model,
                                "choices": [{"index": 0, "message": message,
                                             "finish_reason": self.finish}]}
        if self.usage is not None:
            body["usage"] = self.usage
        return body


class MessagesFold:
    """Anthropic Messages events: ``message_start``, content blocks built from their
    deltas (``tool_use`` input from its JSON pieces), ``message_delta``'s stop
    reason and usage; an ``error`` event becomes an error body."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.inputs: dict[int, list[str]] = {}
        self.error: object = None

    def feed(self, event: str | None, data: Any, parser: Parser, at: str) -> str | None:
        payload = parser.obj(data, at)
        kind = payload.get("type", event)
        if kind == "error":
            self.error = payload.get("error")
            return None
        if kind == "message_start":
            self.message = dict(parser.obj(payload.get("message"), f"{at}.message"))
            return None
        if self.message is None:
            if kind == "ping":
                return None
            parser.fail(f"{at}.type", "expected message_start first", kind)
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            index = payload.get("index")
            if isinstance(index, bool) or not isinstance(index, int):
                parser.fail(f"{at}.index", "expected an integer", index)
            if kind == "content_block_start":
                self.blocks[index] = dict(parser.obj(payload.get("content_block"),
                                                     f"{at}.content_block"))
                if self.blocks[index].get("type") == "tool_use":
                    self.inputs[index] = []
                return None
            if index not in self.blocks:
                parser.fail(f"{at}.index", "expected the index of a started block", index)
            if kind == "content_block_delta":
                return self.delta(index, parser.obj(payload.get("delta"), f"{at}.delta"),
                                  parser, f"{at}.delta")
            pieces = self.inputs.pop(index, None)
            if pieces is not None:
                text = "".join(pieces)
                try:
                    self.blocks[index]["input"] = json.loads(text) if text else {}
                except ValueError:
                    parser.fail(f"{at}.input", "expected the input_json_delta pieces to "
                                "make JSON", text)
        elif kind == "message_delta":
            delta = parser.obj(payload.get("delta") or {}, f"{at}.delta")
            for key in ("stop_reason", "stop_sequence"):
                if key in delta:
                    self.message[key] = delta[key]
            if payload.get("usage") is not None:
                usage = parser.obj(payload["usage"], f"{at}.usage")
                self.message["usage"] = {**(self.message.get("usage") or {}),
                                         **{k: v for k, v in usage.items() if v is not None}}
        return None

    def delta(self, index: int, delta: dict[str, Any], parser: Parser, at: str) -> str | None:
        block = self.blocks[index]
        kind = delta.get("type")
        if kind == "text_delta":
            text = parser.text(delta.get("text"), f"{at}.text")
            block["text"] = str(block.get("text") or "") + text
            return text
        if kind == "input_json_delta" and index in self.inputs:
            self.inputs[index].append(parser.text(delta.get("partial_json"),
                                                  f"{at}.partial_json"))
        elif kind == "thinking_delta":
            block["thinking"] = (str(block.get("thinking") or "")
                                 + parser.text(delta.get("thinking"), f"{at}.thinking"))
        return None

    def body(self, parser: Parser) -> object:
        if self.error is not None:
            return {"type": "error", "error": self.error}
        if self.message is None:
            raise ModelResponseError("", "the stream ended before message_start",
                                     attempts=parser.attempts, kind=parser.kind)
        return {**self.message, "content": [self.blocks[i] for i in sorted(self.blocks)]}


class ResponsesFold:
    """Responses API events: ``response.output_text.delta`` text, and the response
    of the closing ``response.completed`` (or ``incomplete``, ``failed``) event."""

    _FINAL = ("response.completed", "response.incomplete", "response.failed")

    def __init__(self) -> None:
        self.response: object = None
        self.error: object = None

    def feed(self, event: str | None, data: Any, parser: Parser, at: str) -> str | None:
        payload = parser.obj(data, at)
        kind = payload.get("type", event)
        if kind == "response.output_text.delta":
            return parser.text(payload.get("delta"), f"{at}.delta")
        if kind in self._FINAL:
            self.response = parser.obj(payload.get("response"), f"{at}.response")
        elif kind == "error":
            self.error = payload.get("message", payload.get("error"))
        return None

    def body(self, parser: Parser) -> object:
        if self.response is not None:
            return self.response
        if self.error is not None:
            return {"error": {"message": self.error}, "output": []}
        raise ModelResponseError("", f"the stream ended without a {self._FINAL[0]} event",
                                 attempts=parser.attempts, kind=parser.kind)

