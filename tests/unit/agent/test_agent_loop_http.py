"""The agent loop against a scripted chat-completions server over real HTTP:
native, code and both modes, scheduling, step limit, cancellation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agent_support import ChatServer

from dsh_jupyter import (
    AbortController,
    Accept,
    AdditionalContext,
    ToolExecution,
    ToolRegistry,
    ToolRunContext,
    define_tool,
)
from dsh_jupyter.agent import (
    DEFAULT_INSTRUCTIONS,
    OpenAIChatModel,
    SectionSize,
    run_agent,
)
from dsh_jupyter.agent.wire import encode
from dsh_jupyter.testing import InProcessRuntime

pytestmark = pytest.mark.timeout(30)


def echo() -> Any:
    return define_tool(name="echo", description="Echo text.",
                       parameters={"type": "object", "properties": {"text": {"type": "string"}},
                                   "required": ["text"]},
                       output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                       execute=lambda args, ctx: args["text"])


class Probe:
    """Tools that record how many bodies overlap and the order they start and end."""

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self.events: list[str] = []

    def tool(self, name: str, *, safe: bool) -> Any:
        async def body(args: Any, ctx: ToolRunContext) -> Any:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.events.append(f"start {ctx.call_id}")
            try:
                await asyncio.sleep(args.get("delay", 0.01))
            finally:
                self.active -= 1
            self.events.append(f"end {ctx.call_id}")
            return f"{name} {ctx.call_id}"

        return define_tool(name=name, parameters={"type": "object"},
                           output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                           execute=body, is_concurrency_safe=(lambda a: True) if safe else None)


def roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


async def test_native_mode_round_trip(server: ChatServer, model: OpenAIChatModel) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    events: list[dict[str, Any]] = []
    registry.on_event(lambda e: events.append(dict(e)))
    server.answer(None, [("call_a", "echo", {"text": "hi"})])
    server.answer("done: hi")

    result = await run_agent(registry, model, "Echo hi")

    assert result.stop == "answered" and result.answer == "done: hi" and result.error is None
    first, second = server.received
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.body["model"] == "test-model"
    assert first.body["tools"] == [{"type": "function", "function": {
        "name": "echo", "description": "Echo text.",
        "parameters": registry.schemas()[0]["parameters"]}}]
    assert first.body["messages"] == [{"role": "system", "content": DEFAULT_INSTRUCTIONS},
                                      {"role": "user", "content": "Echo hi"}]
    assert roles(second.body["messages"]) == ["system", "user", "assistant", "tool"]
    assert second.body["messages"][2]["tool_calls"][0]["id"] == "call_a"
    assert second.body["messages"][3] == {"role": "tool", "tool_call_id": "call_a",
                                          "content": "hi"}
    assert [dict(m) for m in result.messages] == [*second.body["messages"],
                                                  {"role": "assistant", "content": "done: hi"}]
    assert [e["kind"] for e in events] == [
        "agent/run-start", "agent/message", "agent/message",
        "agent/request", "agent/response", "agent/message", "tool/call", "tool/result",
        "agent/message",
        "agent/request", "agent/response", "agent/message", "agent/run-end"]
    assert [e["index"] for e in events if e["kind"] == "agent/message"] == [0, 1, 2, 3, 4]
    end = events[-1]
    assert end["stop"] == "answered" and end["steps"] == 2 and end["tool_calls"] == 1

    run = result.accounting
    assert (run.steps, run.tool_calls, run.sub_calls) == (2, 1, 0)
    assert run.prompt_tokens == 200 and run.completion_tokens == 20
    one, two = run.requests
    assert one.sections == (SectionSize(id="agent:instructions",
                                        bytes=len(DEFAULT_INSTRUCTIONS.encode())),)
    assert one.tool_schema_bytes == len(encode(first.body["tools"])) and one.sdk_bytes == 0
    assert one.request_bytes == len(encode({"messages": first.body["messages"],
                                            "tools": first.body["tools"]}))
    assert (one.tool_result_bytes, two.tool_result_bytes) == (0, 2)
    assert one.tool_calls == 1 and two.tool_calls == 0 and one.attempts == 1
    assert run.wall_seconds >= run.model_seconds > 0


async def test_code_mode_runs_programs_and_counts_sub_calls(
        server: ChatServer, model: OpenAIChatModel) -> None:
    registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())
    registry.register(echo())
    program = ("a = await tools.echo({'text': 'x'})\n"
               "b = await tools.echo({'text': 'y'})\nreturn a + b")
    server.answer(None, [("call_1", "run_code", {"code": program, "description": "twice"})])
    server.answer("xy")

    result = await run_agent(registry, model, "Echo x then y")

    assert result.stop == "answered" and result.answer == "xy"
    first, second = server.received
    assert [t["function"]["name"] for t in first.body["tools"]] == ["run_code"]
    system = first.body["messages"][0]["content"]
    assert system.startswith(DEFAULT_INSTRUCTIONS)
    assert "Only `run_code`" in system and "async def echo(self, args: EchoArgs)" in system
    assert second.body["messages"][-1] == {"role": "tool", "tool_call_id": "call_1",
                                           "content": "xy"}
    request = result.accounting.requests[0]
    sdk = registry.prompt().section("tools:sdk")
    assert sdk is not None
    assert [s.id for s in request.sections] == ["agent:instructions", "tools:code-only",
                                                "tools:sdk"]
    assert request.sdk_bytes == len(sdk.text.encode()) > 0
    assert request.tool_definition_bytes == request.tool_schema_bytes + request.sdk_bytes
    assert request.sub_calls == 2 and result.accounting.sub_calls == 2


async def test_both_mode_mixes_native_calls_and_programs(
        server: ChatServer, model: OpenAIChatModel) -> None:
    registry = ToolRegistry(mode="both", code_runtime=InProcessRuntime())
    registry.register(echo())
    server.answer(None, [("n1", "echo", {"text": "native"}),
                         ("c1", "run_code", {"code": "return await tools.echo({'text': 'sdk'})",
                                             "description": "via the sdk"})])
    server.answer("both worked")

    result = await run_agent(registry, model, "Try both")

    assert result.stop == "answered"
    first, second = server.received
    assert [t["function"]["name"] for t in first.body["tools"]] == ["echo", "run_code"]
    assert [(m.get("tool_call_id"), m["content"]) for m in second.body["messages"][3:]] == [
        ("n1", "native"), ("c1", "sdk")]
    sections = {s.id: s.bytes for s in result.accounting.requests[0].sections}
    assert sections["tools:code-only"] == 0 and sections["tools:sdk"] > 0
    assert result.accounting.sub_calls == 1 and result.accounting.tool_calls == 2


async def test_parallel_calls_overlap_in_a_bounded_pool_and_return_in_model_order(
        server: ChatServer, model: OpenAIChatModel) -> None:
    probe = Probe()
    registry = ToolRegistry()
    registry.register(probe.tool("safe", safe=True))

    def post(execution: ToolExecution, result: Any) -> Any:
        return Accept(contexts=[AdditionalContext(source="probe",
                                                  text=f"context {execution.call_id}")])

    registry.on_post_execute(post)
    events: list[dict[str, Any]] = []
    registry.on_event(lambda e: events.append(dict(e)))
    # later calls finish first
    server.answer(None, [(f"p{i}", "safe", {"delay": 0.06 - 0.015 * i}) for i in range(4)])
    server.answer("ok")

    result = await run_agent(registry, model, "go", max_parallel=2)

    assert result.stop == "answered"
    assert probe.peak == 2
    starts = [e for e in probe.events if e.startswith("start")]
    assert starts == [f"start p{i}" for i in range(4)]
    assert [e for e in probe.events if e.startswith("end")] != [f"end p{i}" for i in range(4)]
    response = next(e for e in events if e["kind"] == "agent/response")
    assert response["schedule"] == [["p0", "p1", "p2", "p3"]]
    sent = server.received[1].body["messages"][3:]
    assert [(m["role"], m.get("tool_call_id")) for m in sent[:4]] == [
        ("tool", f"p{i}") for i in range(4)]
    assert [(m["role"], m["content"]) for m in sent[4:]] == [
        ("user", f"context p{i}") for i in range(4)]
    request = result.accounting.requests[1]
    assert request.context_bytes == sum(len(f"context p{i}") for i in range(4))


async def test_exclusive_call_is_an_ordering_barrier(
        server: ChatServer, model: OpenAIChatModel) -> None:
    probe = Probe()
    registry = ToolRegistry()
    registry.register(probe.tool("safe", safe=True))
    registry.register(probe.tool("write", safe=False))
    events: list[dict[str, Any]] = []
    registry.on_event(lambda e: events.append(dict(e)))
    server.answer(None, [("s1", "safe", {}), ("s2", "safe", {}), ("w3", "write", {}),
                         ("s4", "safe", {}), ("s5", "safe", {})])
    server.answer("ok")

    result = await run_agent(registry, model, "go")

    assert result.stop == "answered"
    log = probe.events
    write_start, write_end = log.index("start w3"), log.index("end w3")
    assert {"end s1", "end s2"} <= set(log[:write_start])
    assert log[write_start + 1] == "end w3"
    assert {"start s4", "start s5"} <= set(log[write_end:])
    assert probe.peak == 2
    response = next(e for e in events if e["kind"] == "agent/response")
    assert response["schedule"] == [["s1", "s2"], ["w3"], ["s4", "s5"]]
    sent = server.received[1].body["messages"][3:]
    assert [m["tool_call_id"] for m in sent] == ["s1", "s2", "w3", "s4", "s5"]


async def test_step_limit_stops_a_model_that_never_answers(
        server: ChatServer, model: OpenAIChatModel) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    for i in range(5):
        server.answer(None, [(f"c{i}", "echo", {"text": str(i)})])

    result = await run_agent(registry, model, "loop forever", max_steps=3)

    assert result.stop == "step_limit" and result.answer is None
    assert len(server.received) == 3 and server.unexpected == []
    assert result.accounting.steps == 3 and result.accounting.tool_calls == 3
    assert result.messages[-1]["role"] == "tool"  # the transcript stays valid to continue


async def test_invalid_json_arguments_come_back_as_a_tool_error(
        server: ChatServer, model: OpenAIChatModel) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    kinds: list[str] = []
    registry.on_event(lambda e: kinds.append(e["kind"]))
    server.answer(None, [("bad", "echo", '{"text": "unterminated')])
    server.answer("sorry")

    result = await run_agent(registry, model, "go")

    assert result.stop == "answered"
    tool = server.received[1].body["messages"][-1]
    assert tool["tool_call_id"] == "bad"
    assert tool["content"].startswith("Error: invalid arguments for echo: not valid JSON (")
    assert '{"text": "unterminated' in tool["content"]
    assert "tool/call" not in kinds  # it never reached the registry


async def test_missing_and_repeated_call_ids_are_made_unique(
        server: ChatServer, model: OpenAIChatModel) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    server.answer(None, [("", "echo", {"text": "a"}), ("same", "echo", {"text": "b"}),
                         ("same", "echo", {"text": "c"})])
    server.answer("ok")

    result = await run_agent(registry, model, "go", run_id="r1")

    sent = server.received[1].body["messages"]
    ids = [c["id"] for c in sent[2]["tool_calls"]]
    assert ids == ["r1-1-1", "same", "r1-1-3"]
    assert [m["tool_call_id"] for m in sent[3:]] == ids
    assert result.stop == "answered"


async def test_scope_and_tools_registered_mid_run(
        server: ChatServer, model: OpenAIChatModel) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    scope = registry.scope("helper")
    agents: list[str | None] = []
    registry.on_event(lambda e: agents.append(e["agent"]) if e["kind"] == "tool/call" else None)

    async def learn(args: Any, ctx: ToolRunContext) -> str:
        scope.register(define_tool(name="late", parameters={"type": "object"},
                                   output={"schema": {"type": "string"},
                                           "render": lambda a, v: str(v)},
                                   execute=lambda a, c: "late"))
        return "learned"

    scope.register(define_tool(name="learn", parameters={"type": "object"},
                               output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                               execute=learn))
    server.answer(None, [("l1", "learn", {})])
    server.answer(None, [("l2", "late", {})])
    server.answer("done")

    result = await run_agent(registry, model, "go", scope=scope)

    assert result.stop == "answered"
    names = [[t["function"]["name"] for t in r.body["tools"]] for r in server.received]
    assert names == [["echo", "learn"], ["echo", "late", "learn"], ["echo", "late", "learn"]]
    assert agents == ["helper", "helper"]


async def test_abort_during_a_tool_call_ends_the_run(
        server: ChatServer, model: OpenAIChatModel) -> None:
    registry = ToolRegistry()
    controller = AbortController()

    async def wait(args: Any, ctx: ToolRunContext) -> str:
        asyncio.get_running_loop().call_soon(controller.abort, "user stop")  # once this waits
        await ctx.signal.wait()
        return "stopped"

    registry.register(define_tool(name="wait", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=wait))
    server.answer(None, [("w", "wait", {})])

    result = await run_agent(registry, model, "go", signal=controller.signal)

    assert result.stop == "aborted"
    assert len(server.received) == 1
    assert result.messages[-1]["content"] == "Error: tool call aborted: user stop"


async def test_abort_during_the_model_request(
        server: ChatServer, model: OpenAIChatModel) -> None:
    server.answer("too late", delay=10)
    controller = AbortController()
    loop = asyncio.get_running_loop()
    began = loop.time()

    run = asyncio.create_task(run_agent(ToolRegistry(), model, "go", signal=controller.signal))
    await server.until_received(1)
    controller.abort("user stop")
    result = await run

    assert result.stop == "aborted" and loop.time() - began < 5
    assert result.accounting.steps == 1 and result.responses == ()


async def test_cancelling_the_run_settles_tools_and_reports_it(
        server: ChatServer, model: OpenAIChatModel) -> None:
    registry = ToolRegistry()
    settled: list[str] = []
    started: list[str] = []
    both_started = asyncio.Event()

    async def wait(args: Any, ctx: ToolRunContext) -> str:
        started.append(ctx.call_id)
        if len(started) == 2:
            both_started.set()
        try:
            await asyncio.sleep(30)
        finally:
            settled.append(ctx.call_id)
        return "never"

    registry.register(define_tool(name="wait", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=wait, is_concurrency_safe=lambda a: True))
    events: list[dict[str, Any]] = []
    registry.on_event(lambda e: events.append(dict(e)))
    server.answer(None, [("a", "wait", {}), ("b", "wait", {})])
    task = asyncio.create_task(run_agent(registry, model, "go"))
    await both_started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(settled) == ["a", "b"]
    assert events[-1]["kind"] == "agent/run-end" and events[-1]["stop"] == "cancelled"
    assert sorted(e["call_id"] for e in events if e["kind"] == "tool/result") == ["a", "b"]
    json.dumps(events)  # every event is plain JSON
