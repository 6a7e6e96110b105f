"""A model that replays recorded responses: offline tests and evaluations.

Each entry of a script is a chat-completions response body as a server sent it
(what :func:`dump_script` writes from a real run), or a short form::

    {"content": "The answer is 4."}
    {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 2}}],
     "expect_tools": ["add"]}

In the short form ``arguments`` is an object or JSON text, a call's ``id``
defaults to ``call_<n>`` (numbered over the script), and ``finish_reason`` is
optional. ``expect_tools`` (either form) is the exact set of tool names the
request must offer. Every call must name an offered tool unless
``check_calls=False``. Replay fails with :class:`ScriptMismatchError` when a
request does not fit its entry, and :class:`ScriptExhaustedError` when a
request finds the script used up; the loop reports either as a model error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...abort import AbortSignal
from ...json_value import JsonValue, snapshot_json
from ..errors import (
    ModelConfigError,
    ModelResponseError,
    ScriptExhaustedError,
    ScriptMismatchError,
)
from ..model import ChatRequest, ModelResponse, ModelToolCall
from ..wire import parse_chat_completion

_SHORT_KEYS = frozenset({"content", "tool_calls", "finish_reason", "expect_tools"})


class ScriptedModel:
    """Replays ``script`` one entry per request; ``requests`` keeps what it received."""

    def __init__(self, script: Sequence[Mapping[str, Any]], *, name: str = "scripted",
                 check_calls: bool = True) -> None:
        if not isinstance(script, list | tuple):
            raise ModelConfigError(f"a script is a list of responses, got {type(script).__name__}")
        self._name = name
        self.check_calls = check_calls
        self._entries: list[tuple[ModelResponse, frozenset[str] | None]] = []
        for number, entry in enumerate(script, start=1):
            self._entries.append(_load_entry(entry, number, call_base=self._call_count()))
        self.requests: list[ChatRequest] = []

    @classmethod
    def from_file(cls, path: str | Path, *, name: str | None = None,
                  check_calls: bool = True) -> ScriptedModel:
        """A script from a JSON file holding a list of entries."""
        script = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(script, name=name or Path(path).stem, check_calls=check_calls)

    @property
    def name(self) -> str:
        return self._name

    @property
    def remaining(self) -> int:
        return len(self._entries) - len(self.requests)

    def __repr__(self) -> str:
        return (f"<ScriptedModel {self._name!r} used={len(self.requests)}/"
                f"{len(self._entries)}>")

    def _call_count(self) -> int:
        return sum(len(response.tool_calls) for response, _ in self._entries)

    async def complete(self, request: ChatRequest, *, signal: AbortSignal) -> ModelResponse:
        signal.raise_if_aborted()
        number = len(self.requests) + 1
        self.requests.append(request)
        if number > len(self._entries):
            last = request.messages[-1] if request.messages else None
            said = (f"; the request ends with a {last['role']} message: "
                    f"{str(last.get('content'))[:120]!r}") if last is not None else ""
            raise ScriptExhaustedError(
                f"script {self._name!r} has {len(self._entries)} responses and request "
                f"{number} asked for another{said}")
        response, expected = self._entries[number - 1]
        offered = request.tool_names
        if expected is not None and expected != frozenset(offered):
            raise ScriptMismatchError(
                f"script {self._name!r} response {number} expects tools {sorted(expected)} "
                f"but the request offered {sorted(offered)}")
        if self.check_calls:
            for call in response.tool_calls:
                if call.name not in offered:
                    raise ScriptMismatchError(
                        f"script {self._name!r} response {number} calls {call.name!r}, which "
                        f"the request does not offer (offered: {', '.join(offered) or 'none'})")
        return response


def dump_script(responses: Sequence[ModelResponse], path: str | Path) -> None:
    """Write ``responses`` (e.g. ``result.responses`` of a real run) as a script
    that :meth:`ScriptedModel.from_file` replays. Chat-completions bodies are
    written as received; a response of another API (Responses, Anthropic
    Messages) in the short form: its text, calls and finish reason."""
    bodies: list[JsonValue] = []
    for number, response in enumerate(responses, start=1):
        if response.raw is None:
            raise ValueError(f"response {number} has no recorded body (raw is None)")
        if isinstance(response.raw, dict) and "choices" in response.raw:
            bodies.append(response.raw)
            continue
        bodies.append({"content": response.content,
                       "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                      for c in response.tool_calls],
                       "finish_reason": response.finish_reason})
    Path(path).write_text(json.dumps(bodies, ensure_ascii=False, indent=1) + "\n",
                          encoding="utf-8")


def _load_entry(entry: object, number: int, *,
                call_base: int) -> tuple[ModelResponse, frozenset[str] | None]:
    where = f"script entry {number}"
    if not isinstance(entry, Mapping):
        raise ModelConfigError(f"{where}: expected an object, got {type(entry).__name__}")
    body = dict(entry)
    expected = body.pop("expect_tools", None)
    if expected is not None and (not isinstance(expected, list)
                                 or not all(isinstance(n, str) for n in expected)):
        raise ModelConfigError(f"{where}: expect_tools must be a list of tool names")
    names = frozenset(expected) if expected is not None else None
    try:
        raw = snapshot_json(dict(entry), freeze=False)
    except ValueError as exc:
        raise ModelConfigError(f"{where}: not JSON: {exc}") from None
    if "choices" in body:
        try:
            return parse_chat_completion(body), names
        except ModelResponseError as exc:
            raise ModelConfigError(f"{where}: {exc.message}") from None
    unknown = sorted(set(body) - _SHORT_KEYS)
    if unknown:
        raise ModelConfigError(f"{where}: unknown keys {unknown}; a short entry has "
                               f"{sorted(_SHORT_KEYS)}, a recorded one has 'choices'")
    content = body.get("content")
    if content is not None and not isinstance(content, str):
        raise ModelConfigError(f"{where}: content must be a string or null")
    calls: list[ModelToolCall] = []
    for index, call in enumerate(body.get("tool_calls") or (), start=1):
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise ModelConfigError(f"{where}: tool_calls[{index - 1}] needs a string 'name'")
        arguments = call.get("arguments", {})
        calls.append(ModelToolCall(
            id=str(call.get("id") or f"call_{call_base + index}"), name=call["name"],
            arguments=arguments if isinstance(arguments, str)
            else json.dumps(arguments, ensure_ascii=False)))
    finish = body.get("finish_reason") or ("tool_calls" if calls else "stop")
    return ModelResponse(content=content, tool_calls=tuple(calls), finish_reason=str(finish),
                         raw=raw), names
