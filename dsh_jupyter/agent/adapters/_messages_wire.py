"""Anthropic's Messages API: our chat messages as content blocks, the reply back.

System messages become ``system``; an assistant turn becomes a text block plus one
``tool_use`` block per call; ``tool`` messages become ``tool_result`` blocks, and
consecutive user-side messages (the results of one step's parallel calls, then
their deferred contexts) are merged into one user message, results first, as the
API requires.

Prompt caching: the prefix of a request is tools, then system, then messages.
The tools and the system prompt (instructions and the SDK section) change only
when the tool set does, so a ``cache_control`` breakpoint goes on the last tool
and on the system block: a later step (or run) with the same tools reads them
from the cache instead of paying for them again.
"""

from __future__ import annotations

import json
from typing import Any, cast

from ...json_value import JsonValue
from ..errors import ModelResponseError
from ..model import ChatRequest, ModelResponse, ModelToolCall
from ..wire import Parser, describe

KIND = "Messages API"
EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
                 "max_tokens": "length", "refusal": "content_filter"}


def messages_body(request: ChatRequest, *, cache: bool = True) -> dict[str, Any]:
    """The request body without ``model``, ``max_tokens`` and options."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for message in request.messages:
        if message["role"] == "system":
            system.append(message["content"])
        elif message["role"] == "user":
            add("user", [{"type": "text", "text": message["content"]}])
        elif message["role"] == "assistant":
            blocks: list[dict[str, Any]] = []
            if message["content"]:
                blocks.append({"type": "text", "text": message["content"]})
            blocks.extend({"type": "tool_use", "id": call["id"],
                           "name": call["function"]["name"],
                           "input": _tool_input(call["function"]["arguments"])}
                          for call in message.get("tool_calls", ()))
            add("assistant", blocks)
        else:
            add("user", [{"type": "tool_result", "tool_use_id": message["tool_call_id"],
                          "content": message["content"]}])
    body: dict[str, Any] = {"messages": messages}
    if system:
        block: dict[str, Any] = {"type": "text", "text": "\n\n".join(system)}
        if cache:
            block["cache_control"] = EPHEMERAL
        body["system"] = [block]
    if request.tools:
        tools: list[dict[str, Any]] = [
            {"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"]} for t in request.tools]
        if cache:
            tools[-1]["cache_control"] = EPHEMERAL
        body["tools"] = tools
    return body


def _tool_input(arguments: str) -> dict[str, Any]:
    # tool_use.input must be an object. Arguments that are not one never reached a
    # tool (the loop answered the call with an error), so an empty input keeps the
    # transcript valid without pretending otherwise.
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def parse_message(body: object, *, attempts: int = 1) -> ModelResponse:
    """A Messages API response body (already JSON-decoded)."""
    parser = Parser(attempts, KIND)
    root = parser.obj(body, "")
    if root.get("type") == "error" or ("content" not in root and "error" in root):
        error = root.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        raise ModelResponseError("error", f"the API returned an error instead of a "
                                 f"message: {describe(message)}", attempts=attempts, kind=KIND)
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ModelToolCall] = []
    for i, value in enumerate(parser.array(root.get("content"), "content")):
        block = parser.obj(value, f"content[{i}]")
        kind = block.get("type")
        if kind == "text":
            texts.append(parser.text(block.get("text"), f"content[{i}].text"))
        elif kind == "thinking":
            thinking.append(parser.text(block.get("thinking"), f"content[{i}].thinking"))
        elif kind == "tool_use":
            name = parser.name(block.get("name"), f"content[{i}].name")
            call_id = parser.optional_str(block.get("id"), f"content[{i}].id") or ""
            arguments = parser.obj(block.get("input"), f"content[{i}].input")
            calls.append(ModelToolCall(id=call_id, name=name,
                                       arguments=json.dumps(arguments, ensure_ascii=False)))
    usage = root.get("usage")
    usage = parser.obj(usage, "usage") if usage is not None else {}
    stop = parser.optional_str(root.get("stop_reason"), "stop_reason")
    return ModelResponse(
        content="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        finish_reason=_STOP_REASONS.get(stop, stop) if stop is not None else None,
        reasoning="\n".join(thinking) if thinking else None,
        prompt_tokens=_prompt_tokens(parser, usage),
        completion_tokens=parser.optional_int(usage.get("output_tokens"),
                                              "usage.output_tokens"),
        model=parser.optional_str(root.get("model"), "model"),
        attempts=attempts,
        raw=cast(JsonValue, body),
    )


def _prompt_tokens(parser: Parser, usage: dict[str, Any]) -> int | None:
    """All input tokens: ``input_tokens`` counts only those after the last cache
    breakpoint; cached reads and cache writes are reported apart."""
    total = parser.optional_int(usage.get("input_tokens"), "usage.input_tokens")
    for key in ("cache_read_input_tokens", "cache_creation_input_tokens"):
        count = parser.optional_int(usage.get(key), f"usage.{key}")
        if total is not None and count is not None:
            total += count
    return total
