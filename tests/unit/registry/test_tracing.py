"""OpenTelemetry spans (``registry.instrument``), without a kernel: one span per call, what
the policy decided, errors as status, sub-call events carrying span ids, and no argument or
result value unless asked. Every test exports to memory from a private ``TracerProvider``
(tracing_support's ``Traces``); the global provider is never touched. The span tree of a
run_code program on both runtimes is in tests/kernel/test_tracing_runtimes.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import StatusCode
from tracing_support import Traces, attrs, echo, error_of, run_code

from dsh_jupyter import (
    Accept,
    Approval,
    Ask,
    Block,
    Deny,
    ToolCall,
    ToolExecution,
    ToolRegistry,
    ToolRunContext,
    enforce_timeouts,
)
from dsh_jupyter.errors import RegistrationError
from dsh_jupyter.kernel import InProcessRuntime
from dsh_jupyter.registry.tracing import CLIPPED

SECRET = "sk-live-5ecret-token"


@pytest.fixture
def traces() -> Traces:
    return Traces()


def call(text: str = "hi", call_id: str = "c1", **kw: Any) -> ToolCall:
    return ToolCall(call_id=call_id, name="echo", arguments={"text": text}, **kw)


class ScriptedApprovals:
    def __init__(self, *answers: Approval) -> None:
        self.answers = list(answers)

    async def request(self, execution: ToolExecution, reason: str | None) -> Approval:
        return self.answers.pop(0)


# --- one native call ------------------------------------------------------------------


async def test_a_native_call_is_one_span_with_the_genai_attributes(traces: Traces) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    registry.instrument(traces.provider)
    result = await registry.execute(call("héllo"))
    assert not result.is_error
    span = traces.one()
    assert span.name == "execute_tool echo"
    assert span.parent is None
    assert attrs(span) == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo",
        "gen_ai.tool.call.id": "c1", "dsh.pre_execute.decision": "allow",
        "dsh.result.bytes": len("héllo".encode())}
    assert span.status.status_code == StatusCode.UNSET
    assert span.end_time is not None and span.start_time is not None
    assert span.end_time >= span.start_time


async def test_spans_the_body_starts_are_children_and_the_scope_is_named(
        traces: Traces) -> None:
    registry = ToolRegistry()
    inner = traces.provider.get_tracer("test")

    @registry.tool
    async def fetch(url: str) -> str:
        """Fetch a page."""
        with inner.start_as_current_span("http GET"):
            return url

    scope = registry.scope("researcher")
    registry.instrument(traces.provider)
    await registry.execute(ToolCall(call_id="c1", name="fetch", arguments={"url": "x"},
                                    agent=scope))
    (http,) = traces.named("http GET")
    (tool,) = traces.named("execute_tool fetch")
    assert http.parent is not None and tool.context is not None
    assert http.parent.span_id == tool.context.span_id
    assert attrs(tool)["dsh.agent"] == "researcher"


async def test_unknown_tool_and_invalid_arguments_fail_the_span(traces: Traces) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    registry.instrument(traces.provider)
    await registry.execute(ToolCall(call_id="u", name="nope"))
    await registry.execute(ToolCall(call_id="i", name="echo", arguments={"text": 3}))
    unknown, invalid = traces.spans
    assert error_of(unknown) == (StatusCode.ERROR, "UNKNOWN_TOOL")
    assert attrs(unknown)["dsh.error.code"] == "UNKNOWN_TOOL"
    assert error_of(invalid) == (StatusCode.ERROR, "INVALID_ARGS")
    assert "dsh.pre_execute.decision" not in attrs(invalid)  # never reached the policy


# --- what a body records, sub-call events, a cancelled call ----------------------------


async def test_a_body_records_attributes_of_its_own(traces: Traces) -> None:
    registry = ToolRegistry()
    seen: list[bool] = []

    @registry.tool
    async def query(sql: str, ctx: ToolRunContext) -> int:
        """Run a query."""
        seen.append(ctx.traced)
        ctx.set_trace_attributes({"db.rows": 3, "db.system": "sqlite",
                                  "dsh.result.bytes": -1})  # the pipeline's own win
        return 3

    await registry.execute(ToolCall(call_id="off", name="query", arguments={"sql": "x"}))
    registry.instrument(traces.provider)
    await registry.execute(ToolCall(call_id="on", name="query", arguments={"sql": "x"}))
    assert seen == [False, True]
    recorded = attrs(traces.one())
    assert (recorded["db.rows"], recorded["db.system"]) == (3, "sqlite")
    assert recorded["dsh.result.bytes"] == 1


async def test_set_trace_attributes_rejects_other_types_traced_or_not(traces: Traces) -> None:
    registry = ToolRegistry()

    @registry.tool
    async def bad(ctx: ToolRunContext) -> str:
        """Records a list."""
        ctx.set_trace_attributes({"rows": [1, 2]})  # type: ignore[dict-item]
        return "unreachable"

    for traced in (False, True):
        if traced:
            registry.instrument(traces.provider)
        result = await registry.execute(ToolCall(call_id=f"b{traced}", name="bad"))
        assert result.error is not None
        assert result.error.message.startswith("TypeError: trace attribute 'rows'")


async def test_sub_call_events_carry_their_span_ids(traces: Traces) -> None:
    from opentelemetry.trace import format_span_id, format_trace_id

    from dsh_jupyter.widgets import LiveView
    from dsh_jupyter.widgets.render import html_header

    registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())
    registry.register(echo(safe=True))
    events: list[Any] = []
    registry.on_event(events.append)
    registry.instrument(traces.provider)
    with LiveView(registry) as view:
        await registry.execute(run_code(
            "await asyncio.gather(tools.echo({'text': 'a'}), tools.echo({'text': 'b'}))"))
    spans = {attrs(s)["gen_ai.tool.call.id"]: s for s in traces.spans}
    run_trace = format_trace_id(spans["r1"].context.trace_id)
    for kind in ("tool/code-dispatch-running", "tool/code-dispatch"):
        found = [e for e in events if e["kind"] == kind]
        assert len(found) == 2
        for event in found:
            span = spans[event["call_id"]]
            assert (event["trace_id"], event["span_id"]) == (
                run_trace, format_span_id(span.context.span_id))
    assert not any("trace_id" in e for e in events if e["kind"] == "tool/code-dispatch-start")
    sub = view.card("r1:code:1")
    assert sub is not None and sub.trace is not None
    header = html_header(sub.document(), timing=True)
    assert sub.trace[1] in header and f"trace {run_trace}" in header


async def test_a_native_call_cancelled_before_its_body_settles_ends_its_span(
        traces: Traces) -> None:
    registry = ToolRegistry()
    started = asyncio.Event()
    registry.register(echo(delay=10, started=started))
    registry.instrument(traces.provider)
    task = asyncio.create_task(registry.execute(call()))
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert error_of(traces.one()) == (StatusCode.ERROR, "ABORTED")


# --- policy -------------------------------------------------------------------------------


async def test_an_approval_is_recorded(traces: Traces) -> None:
    registry = ToolRegistry(approval=ScriptedApprovals(
        Approval(approved=True, answered_by="ci-policy"),
        Approval(approved=False, answered_by="alice")))
    registry.register(echo())
    registry.on_pre_execute(lambda e, d: Ask("writes files"))
    registry.instrument(traces.provider)
    await registry.execute(call(call_id="yes"))
    await registry.execute(call(call_id="no"))
    approved, rejected = traces.spans
    assert {k: v for k, v in attrs(approved).items() if k.startswith("dsh.")} == {
        "dsh.pre_execute.decision": "ask", "dsh.approval.approved": True,
        "dsh.approval.answered_by": "ci-policy", "dsh.result.bytes": 2}
    assert approved.status.status_code == StatusCode.UNSET
    assert attrs(rejected)["dsh.approval.approved"] is False
    assert attrs(rejected)["dsh.approval.answered_by"] == "alice"
    assert error_of(rejected) == (StatusCode.ERROR, "DENIED")


async def test_a_denial_is_an_error_span(traces: Traces) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    registry.on_pre_execute(lambda e, d: Deny("not today"))
    registry.instrument(traces.provider)
    await registry.execute(call())
    span = traces.one()
    assert attrs(span)["dsh.pre_execute.decision"] == "deny"
    assert attrs(span)["dsh.error.code"] == attrs(span)["error.type"] == "DENIED"
    assert error_of(span) == (StatusCode.ERROR, "DENIED")
    assert "not today" not in repr(attrs(span))  # messages are not recorded


async def test_guards_are_counted_and_the_one_that_denied_is_named(traces: Traces) -> None:
    registry = ToolRegistry()
    registry.register(echo())

    def no_secrets(execution: ToolExecution) -> str | None:
        return "no secrets" if "secret" in str(execution.arguments) else None

    def short(execution: ToolExecution) -> str | None:
        return None

    def broken(execution: ToolExecution) -> str | None:
        raise RuntimeError("oops")

    registry.guard(short)
    registry.guard(no_secrets)
    registry.instrument(traces.provider)
    await registry.execute(call("fine", call_id="ok"))
    await registry.execute(call("secret", call_id="no"))
    undo = registry.guard(broken)
    await registry.execute(call("fine", call_id="broken"))
    undo()
    passed, denied, failed = traces.spans
    assert attrs(passed)["dsh.guards"] == 2 and "dsh.guard.stopped_by" not in attrs(passed)
    assert (attrs(denied)["dsh.guards"], attrs(denied)["dsh.guard.stopped_by"]) == (
        2, "test_guards_are_counted_and_the_one_that_denied_is_named.<locals>.no_secrets")
    assert error_of(denied) == (StatusCode.ERROR, "DENIED")
    assert attrs(failed)["dsh.guards"] == 3
    assert str(attrs(failed)["dsh.guard.stopped_by"]).endswith("broken")
    assert error_of(failed) == (StatusCode.ERROR, "HOOK_FAILED")


async def test_post_execute_decisions(traces: Traces) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    decisions: list[Any] = [None, Accept(), Accept(value="other"), Block("no")]
    registry.on_post_execute(lambda e, r: decisions.pop(0))
    registry.instrument(traces.provider)
    for i in range(4):
        await registry.execute(call(call_id=f"c{i}"))
    kinds = [attrs(s).get("dsh.post_execute") for s in traces.spans]
    assert kinds == [None, "accept", "replace", "block"]
    assert error_of(traces.spans[3]) == (StatusCode.ERROR, "BLOCKED")


async def test_a_timeout_is_an_error_span(traces: Traces) -> None:
    registry = ToolRegistry()
    registry.register(echo(delay=5, timeout_ms=20))
    registry.on_execute(enforce_timeouts())
    registry.instrument(traces.provider)
    result = await registry.execute(call())
    assert result.error is not None and result.error.code == "TOOL_TIMEOUT"
    assert error_of(traces.one()) == (StatusCode.ERROR, "TOOL_TIMEOUT")
    assert attrs(traces.one())["dsh.error.code"] == "TOOL_TIMEOUT"


# --- values -------------------------------------------------------------------------------


def every_value(spans: tuple[ReadableSpan, ...]) -> str:
    return repr([(s.name, dict(s.attributes or {}), s.status.description,
                  [dict(e.attributes or {}) for e in s.events]) for s in spans])


async def test_no_argument_or_result_value_without_the_opt_in(traces: Traces) -> None:
    registry = ToolRegistry(mode="both", code_runtime=InProcessRuntime())
    registry.register(echo())

    @registry.tool
    async def leak(text: str) -> str:
        """Fail quoting the argument."""
        raise ValueError(f"bad token {text}")

    registry.instrument(traces.provider)
    assert (await registry.execute(call(SECRET))).value == SECRET
    await registry.execute(ToolCall(call_id="l", name="leak", arguments={"text": SECRET}))
    result = await registry.execute(run_code(f"return await tools.echo({{'text': {SECRET!r}}})"))
    assert not result.is_error and SECRET in str(result.value)
    assert len(traces.spans) == 4
    assert SECRET not in every_value(traces.spans)


async def test_values_are_recorded_clipped_with_the_opt_in(traces: Traces) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    registry.instrument(traces.provider, record_values=True, max_value_bytes=40)
    await registry.execute(call(SECRET))
    await registry.execute(call("é" * 100, call_id="long"))
    short, long = traces.spans
    assert attrs(short)["gen_ai.tool.call.arguments"] == f'{{"text":"{SECRET}"}}'
    assert attrs(short)["gen_ai.tool.call.result"] == f'"{SECRET}"'
    for key in ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result"):
        recorded = attrs(long)[key]
        assert recorded.endswith(CLIPPED)
        assert len(recorded.removesuffix(CLIPPED).encode()) <= 40


# --- switching it on and off ------------------------------------------------------------


async def test_the_undo_stops_emitting(traces: Traces) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    undo = registry.instrument(traces.provider)
    assert repr(undo) == "<undo: instrument (OpenTelemetry spans)>"
    with pytest.raises(RegistrationError, match="instrumented already"):
        registry.instrument(traces.provider)
    await registry.execute(call())
    undo()
    undo()  # again: nothing happens
    await registry.execute(call())
    assert len(traces.spans) == 1
    registry.instrument(traces.provider)  # on again after the undo
    await registry.execute(call())
    assert len(traces.spans) == 2


def test_max_value_bytes_must_be_positive() -> None:
    with pytest.raises(RegistrationError, match="max_value_bytes"):
        ToolRegistry().instrument(TracerProvider(), max_value_bytes=0)


async def test_events_and_cards_carry_the_trace_and_span_ids(traces: Traces) -> None:
    from opentelemetry.trace import format_span_id, format_trace_id

    from dsh_jupyter.widgets import LiveView
    from dsh_jupyter.widgets.render import html_header

    registry = ToolRegistry()
    registry.register(echo())
    events: list[Any] = []
    registry.on_event(events.append)
    untraced = await registry.execute(call(call_id="before"))
    assert not untraced.is_error and "trace_id" not in events[-1]
    undo = registry.instrument(traces.provider)
    with LiveView(registry) as view:
        await registry.execute(call(call_id="traced"))
    undo()
    span = traces.one()
    ids = (format_trace_id(span.context.trace_id), format_span_id(span.context.span_id))
    started, ended = events[-2:]
    assert (started["kind"], ended["kind"]) == ("tool/call", "tool/result")
    assert (started["trace_id"], started["span_id"]) == ids
    assert (ended["trace_id"], ended["span_id"]) == ids
    card = view.cards[-1]
    assert card.trace == ids
    header = html_header(card.document(), timing=True)
    assert ids[0] in header and ids[1] in header and "user-select:all" in header
    assert ids[0] not in str(view)  # text fallbacks stay deterministic
