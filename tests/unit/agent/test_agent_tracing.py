"""Agent runs over an instrumented registry: ``invoke_agent`` for the run, ``chat`` per
model request, the registry's ``execute_tool`` spans under the run; token usage from
the responses; failures as error status; no message text without the opt-in. Real HTTP
to the scripted chat server, spans exported to memory from a private provider."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agent_support import ChatServer, completion
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, format_span_id, format_trace_id

from dsh_jupyter import ToolRegistry, define_tool
from dsh_jupyter.agent import OpenAIChatModel, ScriptedModel, run_agent
from dsh_jupyter.testing import InProcessRuntime

pytestmark = pytest.mark.timeout(30)

SECRET = "sk-live-agent-5ecret"


def echo() -> Any:
    return define_tool(name="echo", description="Echo text.",
                       parameters={"type": "object", "properties": {"text": {"type": "string"}},
                                   "required": ["text"]},
                       output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                       execute=lambda args, ctx: args["text"],
                       is_concurrency_safe=lambda args: True)


class Traces:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return sorted((s for s in self.spans if s.name.startswith(prefix)),
                      key=lambda s: s.start_time or 0)


@pytest.fixture
def traces() -> Traces:
    return Traces()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


async def test_a_run_is_one_trace_with_chat_and_tool_spans_under_it(
        server: ChatServer, model: OpenAIChatModel, traces: Traces) -> None:
    registry = ToolRegistry(mode="both", code_runtime=InProcessRuntime())
    registry.register(echo())
    server.reply(completion(None, [("c1", "echo", {"text": "a"}),
                                   ("c2", "run_code", {"code": "return await tools.echo("
                                                               "{'text': 'b'})",
                                                       "description": "one echo"})],
                            usage=(120, 30)))
    server.reply(completion("done", usage=(200, 5)))
    events: list[Any] = []
    registry.on_event(events.append)
    registry.instrument(traces.provider)
    result = await run_agent(registry, model, "echo twice")
    assert result.stop == "answered" and result.answer == "done"

    (run,) = traces.named("invoke_agent")
    chats = traces.named("chat ")
    tools = {attrs(s)["gen_ai.tool.call.id"]: s for s in traces.named("execute_tool")}
    assert run.name == "invoke_agent agent" and run.parent is None
    assert run.status.status_code == StatusCode.UNSET
    assert attrs(run) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "agent",
        "gen_ai.request.model": "test-model", "gen_ai.provider.name": "openai",
        "server.address": "127.0.0.1", "server.port": int(server.base_url.split(":")[2]
                                                          .split("/")[0]),
        "dsh.agent.run_id": result.run_id, "dsh.agent.mode": "both",
        "dsh.agent.max_steps": 20, "dsh.agent.stop": "answered", "dsh.agent.steps": 2,
        "dsh.agent.tool_calls": 2, "dsh.agent.sub_calls": 1,
        "gen_ai.usage.input_tokens": 320, "gen_ai.usage.output_tokens": 35}

    assert [c.name for c in chats] == ["chat test-model", "chat test-model"]
    first, second = chats
    for chat in chats:
        assert chat.kind == SpanKind.CLIENT and parent_id(chat) == span_id(run)
    assert attrs(first)["gen_ai.usage.input_tokens"] == 120
    assert attrs(first)["gen_ai.usage.output_tokens"] == 30
    assert attrs(first)["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert attrs(first)["gen_ai.response.model"] == "test-model"
    assert attrs(first)["dsh.response.tool_calls"] == 2
    assert attrs(first)["dsh.agent.step"] == 1 and attrs(second)["dsh.agent.step"] == 2
    assert attrs(first)["dsh.request.bytes"] == result.accounting.requests[0].request_bytes
    assert attrs(second)["gen_ai.response.finish_reasons"] == ("stop",)

    # The tool calls are the run's children, siblings of the chats, between them in time.
    assert set(tools) == {"c1", "c2", "c2:code:1"}
    assert parent_id(tools["c1"]) == parent_id(tools["c2"]) == span_id(run)
    assert parent_id(tools["c2:code:1"]) == span_id(tools["c2"])
    assert first.end_time is not None and second.start_time is not None
    for tool in tools.values():
        assert tool.start_time is not None and tool.end_time is not None
        assert first.end_time <= tool.start_time and tool.end_time <= second.start_time
    assert len({s.context.trace_id for s in traces.spans if s.context}) == 1

    # The session events name the spans.
    assert run.context is not None
    trace_id = format_trace_id(run.context.trace_id)
    (start,) = (e for e in events if e["kind"] == "agent/run-start")
    assert (start["trace_id"], start["span_id"]) == (trace_id, format_span_id(span_id(run)))
    requests = [e for e in events if e["kind"] == "agent/request"]
    assert [(e["trace_id"], e["span_id"]) for e in requests] == [
        (trace_id, format_span_id(span_id(chat))) for chat in chats]


async def test_a_model_error_fails_the_chat_and_the_run(
        server: ChatServer, model: OpenAIChatModel, traces: Traces) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    server.reply({"error": {"message": "bad request"}}, status=400)
    registry.instrument(traces.provider)
    result = await run_agent(registry, model, "fail", scope=registry.scope("analyst"))
    assert result.stop == "model_error" and result.error is not None
    (run,) = traces.named("invoke_agent")
    (chat,) = traces.named("chat")
    assert run.name == "invoke_agent analyst"
    assert (chat.status.status_code, chat.status.description) == (StatusCode.ERROR,
                                                                  "MODEL_HTTP_ERROR")
    assert attrs(chat)["error.type"] == "MODEL_HTTP_ERROR"
    assert attrs(chat)["dsh.model.attempts"] == 1
    assert (run.status.status_code, run.status.description) == (StatusCode.ERROR,
                                                                "MODEL_HTTP_ERROR")
    assert attrs(run)["dsh.agent.stop"] == "model_error"
    assert "gen_ai.usage.input_tokens" not in attrs(run)  # nothing was reported


async def test_a_cancelled_run_ends_its_spans_aborted(
        server: ChatServer, model: OpenAIChatModel, traces: Traces) -> None:
    registry = ToolRegistry()
    server.reply(completion("late"), delay=5)
    registry.instrument(traces.provider)
    task = asyncio.create_task(run_agent(registry, model, "wait"))
    await server.until_received(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (run,) = traces.named("invoke_agent")
    (chat,) = traces.named("chat")
    for span in (run, chat):
        assert (span.status.status_code, span.status.description) == (StatusCode.ERROR,
                                                                      "ABORTED")
    assert attrs(run)["dsh.agent.stop"] == "cancelled"
    assert parent_id(chat) == span_id(run)


async def test_no_message_text_without_the_opt_in_and_clipped_with_it(
        traces: Traces) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "echo", "arguments": {"text": SECRET}}]},
        {"content": f"the secret is {SECRET}"}]
    registry = ToolRegistry()
    registry.register(echo())
    undo = registry.instrument(traces.provider)
    await run_agent(registry, ScriptedModel(script), f"repeat {SECRET}")
    undo()
    recorded = json.dumps([[attrs(s), s.status.description, [e.attributes for e in s.events]]
                           for s in traces.spans], default=str)
    assert len(traces.spans) == 4  # run, two chats, one tool call
    assert SECRET not in recorded
    assert "gen_ai.provider.name" not in attrs(traces.named("invoke_agent")[0])  # scripted

    traces.exporter.clear()
    undo = registry.instrument(traces.provider, record_values=True)
    model = ScriptedModel(script)
    await run_agent(registry, model, f"repeat {SECRET}")
    undo()
    first, second = traces.named("chat")
    for chat, request in zip((first, second), model.requests, strict=True):
        assert json.loads(attrs(chat)["gen_ai.input.messages"]) == list(request.messages)
    assert SECRET in attrs(first)["gen_ai.input.messages"]
    answered = json.loads(attrs(second)["gen_ai.output.messages"])
    assert answered == [{"role": "assistant", "content": f"the secret is {SECRET}",
                         "finish_reason": "stop"}]
    called = json.loads(attrs(first)["gen_ai.output.messages"])
    assert called[0]["tool_calls"][0]["function"] == {"name": "echo",
                                                      "arguments": json.dumps({"text": SECRET})}

    traces.exporter.clear()
    registry.instrument(traces.provider, record_values=True, max_value_bytes=64)
    await run_agent(registry, ScriptedModel(script), f"repeat {SECRET}")
    for chat in traces.named("chat"):
        for key in ("gen_ai.input.messages", "gen_ai.output.messages"):
            value = attrs(chat)[key]
            assert value.endswith("…[clipped]")
            assert len(value.encode()) <= 64 + len("…[clipped]".encode())


async def test_an_uninstrumented_registry_emits_no_agent_span(traces: Traces) -> None:
    registry = ToolRegistry()
    events: list[Any] = []
    registry.on_event(events.append)
    await run_agent(registry, ScriptedModel([{"content": "hi"}]), "hello")
    assert traces.spans == []
    assert not any("trace_id" in e for e in events)
