"""The scripted model (replay, recording, clear failures) and the notebook runner."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from agent_support import ChatServer, completion

from dsh_jupyter import AbortController, JsonlSessionWriter, ToolRegistry, define_tool
from dsh_jupyter.agent import (
    Agent,
    ModelConfigError,
    OpenAIChatModel,
    ScriptedModel,
    ScriptExhaustedError,
    ScriptMismatchError,
    dump_script,
    run_agent,
)

pytestmark = pytest.mark.timeout(30)


def registry_with_echo() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(define_tool(
        name="echo", description="Echo text.",
        parameters={"type": "object", "properties": {"text": {"type": "string"}},
                    "required": ["text"]},
        output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
        execute=lambda args, ctx: args["text"]))
    return registry


async def test_short_and_recorded_entries_replay() -> None:
    model = ScriptedModel([
        {"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}], "expect_tools": ["echo"]},
        completion(None, [("rec1", "echo", {"text": "b"})]),
        {"content": "a and b"},
    ])
    result = await run_agent(registry_with_echo(), model, "go")
    assert result.stop == "answered" and result.answer == "a and b"
    assert model.remaining == 0 and len(model.requests) == 3
    tools = [m for m in result.messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tools] == [("call_1", "a"), ("rec1", "b")]
    assert result.responses[1].prompt_tokens == 100


async def test_running_out_of_script_is_reported_clearly() -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]}],
                          name="short")
    result = await run_agent(registry_with_echo(), model, "go")
    assert result.stop == "model_error"
    assert isinstance(result.error, ScriptExhaustedError)
    assert result.error.code == "SCRIPT_EXHAUSTED"
    assert result.error.message == ("script 'short' has 1 responses and request 2 asked for "
                                    "another; the request ends with a tool message: 'a'")


async def test_a_response_expecting_other_tools_fails() -> None:
    model = ScriptedModel([{"content": "hi", "expect_tools": ["echo", "search"]}])
    result = await run_agent(registry_with_echo(), model, "go")
    assert isinstance(result.error, ScriptMismatchError)
    assert result.error.message == ("script 'scripted' response 1 expects tools "
                                    "['echo', 'search'] but the request offered ['echo']")


async def test_a_call_to_a_tool_not_offered_fails_unless_allowed() -> None:
    script: list[dict[str, Any]] = [{"tool_calls": [{"name": "search", "arguments": {}}]},
                                    {"content": "done"}]
    result = await run_agent(registry_with_echo(), ScriptedModel(script), "go")
    assert isinstance(result.error, ScriptMismatchError)
    assert "calls 'search', which the request does not offer (offered: echo)" in str(
        result.error)
    lenient = await run_agent(registry_with_echo(), ScriptedModel(script, check_calls=False),
                              "go")
    assert lenient.stop == "answered"
    assert str(lenient.messages[3]["content"]).startswith("Error: unknown tool 'search'")


@pytest.mark.parametrize(("script", "message"), [
    ("not a list", "a script is a list of responses"),
    ([["x"]], "script entry 1: expected an object"),
    ([{"text": "hi"}], "script entry 1: unknown keys ['text']"),
    ([{"content": 1}], "script entry 1: content must be a string or null"),
    ([{"tool_calls": [{"arguments": {}}]}], "tool_calls[0] needs a string 'name'"),
    ([{"choices": []}], "script entry 1: malformed chat-completions response: choices"),
    ([{"content": "x", "expect_tools": "echo"}], "expect_tools must be a list"),
])
def test_bad_scripts_are_rejected_up_front(script: Any, message: str) -> None:
    with pytest.raises(ModelConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ScriptedModel(script)


async def test_a_recorded_http_run_replays_offline(server: ChatServer, model: OpenAIChatModel,
                                                   tmp_path: Path) -> None:
    server.answer(None, [("c1", "echo", {"text": "recorded"})])
    server.answer("all done")
    live = await run_agent(registry_with_echo(), model, "go")
    path = tmp_path / "run.json"
    dump_script(live.responses, path)

    replay_model = ScriptedModel.from_file(path)
    replay = await run_agent(registry_with_echo(), replay_model, "go")

    assert replay_model.name == "run"
    assert replay.stop == live.stop == "answered"
    assert replay.messages == live.messages
    assert [r.body for r in server.received] == [
        {"model": "test-model", **r.body()} for r in replay_model.requests]


async def test_agent_events_go_to_a_jsonl_log() -> None:
    registry = registry_with_echo()
    buffer = io.StringIO()
    registry.on_event(JsonlSessionWriter(buffer))
    model = ScriptedModel([{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]},
                           {"content": "done"}])
    await run_agent(registry, model, "go", run_id="log")
    events = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert {e["kind"] for e in events} == {"agent/run-start", "agent/message", "agent/request",
                                           "agent/response", "tool/call", "tool/result",
                                           "agent/run-end"}
    assert all(e["run_id"] == "log" for e in events if e["kind"].startswith("agent/"))
    request = next(e for e in events if e["kind"] == "agent/request")
    assert request["tools"] == ["echo"] and request["sizes"]["tool_schema_bytes"] > 0


def test_run_sync_outside_a_loop() -> None:
    agent = Agent(registry_with_echo(), ScriptedModel([{"content": "sync"}]))
    assert agent.run_sync("go").answer == "sync"


async def test_run_sync_refuses_inside_a_running_loop() -> None:
    agent = Agent(registry_with_echo(), ScriptedModel([{"content": "x"}]))
    with pytest.raises(RuntimeError, match=r"use `result = await agent.run\(...\)`"):
        agent.run_sync("go")


def test_start_needs_a_running_loop() -> None:
    agent = Agent(registry_with_echo(), ScriptedModel([{"content": "x"}]))
    with pytest.raises(RuntimeError, match="needs a running event loop"):
        agent.start("go")


async def test_start_runs_in_the_background_and_can_be_aborted() -> None:
    registry = registry_with_echo()
    waiting = asyncio.Event()

    async def wait(args: Any, ctx: Any) -> str:
        waiting.set()
        await ctx.signal.wait()
        return "stopped"

    registry.register(define_tool(name="wait", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=wait))
    agent = Agent(registry, ScriptedModel([{"tool_calls": [{"name": "wait"}]}]), max_steps=5)
    handle = agent.start("go", run_id="bg")
    assert not handle.done() and "running" in repr(handle)
    await waiting.wait()
    handle.abort("enough")
    result = await handle
    assert result.stop == "aborted" and handle.result() is result
    assert result.messages[-1]["content"] == "Error: tool call aborted: enough"

    outer = AbortController()
    outer.abort("before it began")
    early = await Agent(registry, ScriptedModel([])).start("go", signal=outer.signal)
    assert early.stop == "aborted" and early.accounting.steps == 0


async def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="max_steps must be a positive integer"):
        await run_agent(ToolRegistry(), ScriptedModel([]), "go", max_steps=0)
    with pytest.raises(ValueError, match="max_parallel must be a positive integer"):
        await run_agent(ToolRegistry(), ScriptedModel([]), "go", max_parallel=True)
