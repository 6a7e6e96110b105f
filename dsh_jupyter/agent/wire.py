"""The chat-completions wire format: tools out, responses in.

:func:`parse_chat_completion` checks a response body field by field and names
the first field that is wrong and what it held, e.g. ``malformed
chat-completions response: choices[0].message.tool_calls[1].function.name:
expected a non-empty string, received 42 (int)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, cast

from ..json_value import JsonObject, JsonValue
from .errors import ModelResponseError
from .model import FunctionTool, ModelResponse, ModelToolCall

_SHOWN = 200


def function_tools(schemas: Iterable[JsonObject]) -> tuple[FunctionTool, ...]:
    """``{name, description, parameters}`` schemas (as in ``PromptAssembly.tools``)
    as OpenAI function tools."""
    return tuple(
        {"type": "function",
         "function": {"name": str(s["name"]), "description": str(s.get("description") or ""),
                      "parameters": cast(JsonObject, s.get("parameters") or {"type": "object"})}}
        for s in schemas)


def encode(value: object) -> bytes:
    """Compact UTF-8 JSON: what adapters send, and what accounting measures."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def describe(value: object) -> str:
    """A short rendering of a received value for error messages."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > _SHOWN:
        text = text[:_SHOWN] + f"... ({len(text)} characters)"
    kind = "null" if value is None else type(value).__name__
    return f"{text} ({kind})"


def parse_chat_completion(body: object, *, attempts: int = 1) -> ModelResponse:
    """The first choice of a chat-completions response body (already JSON-decoded)."""
    parser = Parser(attempts)
    root = parser.obj(body, "")
    if "choices" not in root and "error" in root:
        error = root["error"]
        message = error.get("message") if isinstance(error, Mapping) else error
        raise ModelResponseError("error", f"the API returned an error instead of a "
                                 f"completion: {describe(message)}", attempts=attempts)
    choices = root.get("choices")
    if not isinstance(choices, list) or not choices:
        parser.fail("choices", "expected a non-empty array", choices)
    choice = parser.obj(choices[0], "choices[0]")
    message = parser.obj(choice.get("message"), "choices[0].message")
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        parser.fail("choices[0].message.tool_calls", "expected an array or null", calls)
    usage = root.get("usage")
    usage = parser.obj(usage, "usage") if usage is not None else {}
    return ModelResponse(
        content=parser.content(message.get("content"), "choices[0].message.content"),
        tool_calls=tuple(parser.tool_call(c, f"choices[0].message.tool_calls[{i}]")
                         for i, c in enumerate(calls or ())),
        finish_reason=parser.optional_str(choice.get("finish_reason"),
                                          "choices[0].finish_reason"),
        reasoning=parser.optional_str(message.get("reasoning_content", message.get("reasoning")),
                                      "choices[0].message.reasoning_content"),
        prompt_tokens=parser.optional_int(usage.get("prompt_tokens"), "usage.prompt_tokens"),
        completion_tokens=parser.optional_int(usage.get("completion_tokens"),
                                              "usage.completion_tokens"),
        model=parser.optional_str(root.get("model"), "model"),
        attempts=attempts,
        raw=cast(JsonValue, body),
    )


class Parser:
    """Checks received values field by field; ``kind`` names the API in errors."""

    def __init__(self, attempts: int, kind: str = "chat-completions") -> None:
        self.attempts = attempts
        self.kind = kind

    def fail(self, field: str, expected: str, received: object) -> NoReturn:
        raise ModelResponseError(field, f"{expected}, received {describe(received)}",
                                 attempts=self.attempts, kind=self.kind)

    def text(self, value: object, field: str) -> str:
        if not isinstance(value, str):
            self.fail(field, "expected a string", value)
        return value

    def name(self, value: object, field: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(field, "expected a non-empty string", value)
        return value

    def array(self, value: object, field: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(field, "expected an array", value)
        return value

    def obj(self, value: object, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(field, "expected an object", value)
        return cast(dict[str, Any], value)

    def optional_str(self, value: object, field: str) -> str | None:
        if value is not None and not isinstance(value, str):
            self.fail(field, "expected a string or null", value)
        return value

    def optional_int(self, value: object, field: str) -> int | None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            self.fail(field, "expected an integer or null", value)
        return value

    def content(self, value: object, field: str) -> str | None:
        # Some servers send content parts; only text parts carry an answer.
        if isinstance(value, list):
            texts = [p.get("text") for p in value if isinstance(p, dict)]
            if len(texts) != len(value) or not all(isinstance(t, str) for t in texts):
                self.fail(field, "expected a string, null or text parts", value)
            return "".join(cast(list[str], texts))
        return self.optional_str(value, field)

    def tool_call(self, value: object, field: str) -> ModelToolCall:
        call = self.obj(value, field)
        if call.get("type", "function") != "function":
            self.fail(f"{field}.type", 'expected "function"', call.get("type"))
        call_id = self.optional_str(call.get("id"), f"{field}.id") or ""
        function = self.obj(call.get("function"), f"{field}.function")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            self.fail(f"{field}.function.name", "expected a non-empty string", name)
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send the object itself
            arguments = json.dumps(arguments, ensure_ascii=False)
        elif arguments is None:
            arguments = ""
        elif not isinstance(arguments, str):
            self.fail(f"{field}.function.arguments", "expected a JSON string", arguments)
        return ModelToolCall(id=call_id, name=name, arguments=arguments)
