"""OpenAI's Responses API: our chat messages as input items, output items back.

System messages become ``instructions``; an assistant turn becomes its text as an
assistant message plus one ``function_call`` item per call (``call_id`` is our
call id); a ``tool`` message becomes a ``function_call_output``. Requests are sent
with ``store: false``: the loop sends the whole conversation every step.
"""

from __future__ import annotations

import json
from typing import Any, cast

from ...json_value import JsonValue
from ..errors import ModelResponseError
from ..model import ChatRequest, ModelResponse, ModelToolCall
from ..wire import Parser, describe

KIND = "Responses API"
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def responses_body(request: ChatRequest) -> dict[str, Any]:
    """The request body without ``model`` and options."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for message in request.messages:
        if message["role"] == "system":
            instructions.append(message["content"])
        elif message["role"] == "user":
            items.append({"role": "user", "content": message["content"]})
        elif message["role"] == "assistant":
            if message["content"]:
                items.append({"role": "assistant", "content": message["content"]})
            items.extend({"type": "function_call", "call_id": call["id"],
                          "name": call["function"]["name"],
                          "arguments": call["function"]["arguments"]}
                         for call in message.get("tool_calls", ()))
        else:
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"],
                          "output": message["content"]})
    body: dict[str, Any] = {"input": items, "store": False}
    if instructions:
        body["instructions"] = "\n\n".join(instructions)
    if request.tools:
        # strict: our schemas are not written for strict mode (optional fields, no
        # additionalProperties everywhere); the registry validates arguments anyway.
        body["tools"] = [{"type": "function", "name": t["function"]["name"],
                          "description": t["function"]["description"],
                          "parameters": t["function"]["parameters"], "strict": False}
                         for t in request.tools]
    return body


def parse_response(body: object, *, attempts: int = 1) -> ModelResponse:
    """A Responses API response body (already JSON-decoded)."""
    parser = Parser(attempts, KIND)
    root = parser.obj(body, "")
    if root.get("error") is not None:
        error = root["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise ModelResponseError("error", f"the API returned an error instead of a "
                                 f"response: {describe(message)}", attempts=attempts, kind=KIND)
    output = parser.array(root.get("output"), "output")
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ModelToolCall] = []
    for i, value in enumerate(output):
        item = parser.obj(value, f"output[{i}]")
        kind = item.get("type")
        if kind == "message":
            for j, part_value in enumerate(parser.array(item.get("content"),
                                                        f"output[{i}].content")):
                part = parser.obj(part_value, f"output[{i}].content[{j}]")
                if part.get("type") == "output_text":
                    texts.append(parser.text(part.get("text"), f"output[{i}].content[{j}].text"))
                elif part.get("type") == "refusal":
                    texts.append(parser.text(part.get("refusal"),
                                             f"output[{i}].content[{j}].refusal"))
        elif kind == "function_call":
            calls.append(_function_call(parser, item, f"output[{i}]"))
        elif kind == "reasoning":
            for j, summary in enumerate(item.get("summary") or ()):
                reasoning.append(parser.text(parser.obj(summary, f"output[{i}].summary[{j}]")
                                             .get("text"), f"output[{i}].summary[{j}].text"))
    usage = root.get("usage")
    usage = parser.obj(usage, "usage") if usage is not None else {}
    status = parser.optional_str(root.get("status"), "status")
    if calls:
        finish = "tool_calls"
    elif status == "incomplete":
        details = root.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        finish = _INCOMPLETE.get(str(reason), str(reason or "incomplete"))
    else:
        finish = "stop"
    return ModelResponse(
        content="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        finish_reason=finish,
        reasoning="\n".join(reasoning) if reasoning else None,
        prompt_tokens=parser.optional_int(usage.get("input_tokens"), "usage.input_tokens"),
        completion_tokens=parser.optional_int(usage.get("output_tokens"),
                                              "usage.output_tokens"),
        model=parser.optional_str(root.get("model"), "model"),
        attempts=attempts,
        raw=cast(JsonValue, body),
    )


def _function_call(parser: Parser, item: dict[str, Any], field: str) -> ModelToolCall:
    name = parser.name(item.get("name"), f"{field}.name")
    call_id = parser.optional_str(item.get("call_id"), f"{field}.call_id") or ""
    arguments = item.get("arguments")
    if isinstance(arguments, dict):
        arguments = json.dumps(arguments, ensure_ascii=False)
    elif arguments is None:
        arguments = ""
    elif not isinstance(arguments, str):
        parser.fail(f"{field}.arguments", "expected a JSON string", arguments)
    return ModelToolCall(id=call_id, name=name, arguments=arguments)

