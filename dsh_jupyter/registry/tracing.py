"""OpenTelemetry spans for tool calls, on when ``registry.instrument()`` switched them on.

The only module that imports ``opentelemetry``; :meth:`ToolRegistry.instrument
<dsh_jupyter.registry.core.RegistryCore.instrument>` imports it when called, so nothing
is imported or emitted otherwise. :class:`CallTracer` is a
:class:`~dsh_jupyter.registry.lifecycle.CallListener`, registered first (its span ids are
in ``run.trace_ids`` before other listeners, the session events among them, are told a
call started): it starts a :class:`CallSpan` for each call, records what the stages
decided into it, and ends it with the call.

One span per call through the pipeline, following the OpenTelemetry GenAI semantic
conventions: ``execute_tool {tool}`` with ``gen_ai.operation.name``, ``gen_ai.tool.name``,
``gen_ai.tool.call.id`` and, on a failure, ``error.type``; what the pipeline decided is
under ``dsh.``. A sub-call of a ``run_code`` program is a child of the run's span,
parented explicitly through the run's :class:`~.lifecycle.CallRun` (sub-calls run in
tasks the scheduler starts, possibly in parallel, so the ambient context is not relied
on). While a call runs its span is the current one, so spans the tool's body starts are
its children.

No argument or result value is recorded unless ``record_values=True``: then
``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result`` (a failure's message)
carry them as JSON, clipped to ``max_value_bytes``. Without it a failure's message is
not recorded either (it may quote values); its ``code`` always is.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import Token
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from ..json_dump import dump_json
from ..json_value import JsonValue
from .lifecycle import CallListener, CallRun
from .policy import Allow, Approval, Ask, Deny, PreDecision
from .results import ToolResult
from .scope import RESERVED_NAME

if TYPE_CHECKING:
    from .execution import TraceValue

TRACER_NAME = "dsh_jupyter"
CLIPPED = "…[clipped]"
"""Ends a recorded value cut to ``max_value_bytes``."""

_DECISIONS: dict[type, str] = {Allow: "allow", Deny: "deny", Ask: "ask"}


class CallTracer(CallListener):
    """The tracing listener: one :class:`CallSpan` per call, kept in ``run.state``, a
    sub-call's parented to its run's."""

    __slots__ = ("max_value_bytes", "record_values", "tracer")

    def __init__(self, provider: TracerProvider | None, *, record_values: bool,
                 max_value_bytes: int) -> None:
        self.tracer: Tracer = trace.get_tracer(TRACER_NAME, tracer_provider=provider)
        self.record_values = record_values
        self.max_value_bytes = max_value_bytes

    def on_call_start(self, run: CallRun) -> None:
        parent = run.parent.state.get(self) if run.parent is not None else None
        ctx = trace.set_span_in_context(parent._span) if isinstance(parent, CallSpan) else None
        execution = run.execution
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": execution.name,
            "gen_ai.tool.call.id": execution.call_id}
        if execution.agent is not None:
            attributes["dsh.agent"] = execution.agent.name
        if execution.name == RESERVED_NAME:
            description = execution.arguments.get("description")
            if isinstance(description, str):
                attributes["dsh.run_code.description"] = clip(description,
                                                               self.max_value_bytes)
        if self.record_values:
            attributes["gen_ai.tool.call.arguments"] = self._value(execution.arguments)
        span = CallSpan(self, self.tracer.start_span(
            f"execute_tool {execution.name}", context=ctx, kind=SpanKind.INTERNAL,
            attributes=attributes))
        run.state[self] = span
        span.activate()
        run.trace_ids = span.ids()

    def on_decision(self, run: CallRun, decision: PreDecision) -> None:
        self._span(run).decision(_DECISIONS[type(decision)])

    def on_approval(self, run: CallRun, approval: Approval) -> None:
        self._span(run).approval(approval)

    def on_guards(self, run: CallRun, checked: int, stopped_by: str | None) -> None:
        self._span(run).guards(checked, stopped_by=stopped_by)

    def on_trace_attributes(self, run: CallRun, attributes: Mapping[str, TraceValue]) -> None:
        self._span(run).annotate(attributes)

    def on_post_decision(self, run: CallRun, kind: str) -> None:
        self._span(run).post(kind)

    def on_call_end(self, run: CallRun) -> None:
        span = run.state.get(self)
        if isinstance(span, CallSpan):
            span.end(run.result)

    def _span(self, run: CallRun) -> CallSpan:
        span: CallSpan = run.state[self]
        return span

    def _value(self, value: JsonValue) -> str:
        return clip(dump_json(value), self.max_value_bytes)


class CallSpan:
    """The span of one call, as the stages record into it. Every method is cheap and
    runs on the event loop; :meth:`end` ends the span once, later calls do nothing."""

    __slots__ = ("_activation", "_attributes", "_ended", "_span", "_tracer")

    def __init__(self, tracer: CallTracer, span: Span) -> None:
        self._tracer = tracer
        self._ended = False
        self._span = span
        self._activation: Token[otel_context.Context] | None = None
        # Set on the span in one go when it ends: each set_attribute takes the span's lock.
        self._attributes: dict[str, AttributeValue] = {}

    def ids(self) -> tuple[str, str]:
        """The trace id and span id as hex (what a backend shows and searches for)."""
        context = self._span.get_span_context()
        return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)

    def activate(self) -> None:
        """Make this span the current one (for spans the body starts) until :meth:`end`."""
        self._activation = otel_context.attach(trace.set_span_in_context(self._span))

    def decision(self, kind: str) -> None:
        """What the pre-execute waterfall decided: ``allow``, ``deny`` or ``ask``."""
        self._attributes["dsh.pre_execute.decision"] = kind

    def approval(self, approval: Approval) -> None:
        self._attributes["dsh.approval.approved"] = approval.approved
        self._attributes["dsh.approval.answered_by"] = approval.answered_by

    def annotate(self, attributes: Mapping[str, TraceValue]) -> None:
        """Attributes the tool's body recorded (``ctx.set_trace_attributes``); the
        pipeline's own are set after them, so they win on a clash."""
        self._attributes.update(attributes)

    def guards(self, checked: int, *, stopped_by: str | None = None) -> None:
        """How many guards ran; the one that denied the call (or failed), if one did."""
        self._attributes["dsh.guards"] = checked
        if stopped_by is not None:
            self._attributes["dsh.guard.stopped_by"] = stopped_by

    def post(self, kind: str) -> None:
        """The last decision a post-execute hook returned: accept, block or replace."""
        self._attributes["dsh.post_execute"] = kind

    def end(self, result: ToolResult | None) -> None:
        """End the span with ``result`` (``None``: the pipeline failed unexpectedly)."""
        if self._ended:
            return
        self._ended = True
        span = self._span
        attributes = self._attributes
        if result is None:
            span.set_status(Status(StatusCode.ERROR, "INTERNAL"))
            attributes["error.type"] = "INTERNAL"
        else:
            if result.error is not None:
                attributes["dsh.error.code"] = result.error.code
                attributes["error.type"] = result.error.code  # the semconv's own name
                span.set_status(Status(StatusCode.ERROR, result.error.code))
            attributes["dsh.result.bytes"] = content_bytes(result)
            if self._tracer.record_values:
                recorded = (result.error.message if result.error is not None
                            else self._tracer._value(result.value))
                attributes["gen_ai.tool.call.result"] = clip(recorded,
                                                              self._tracer.max_value_bytes)
        span.set_attributes(attributes)
        span.end()
        if self._activation is not None:
            otel_context.detach(self._activation)
            self._activation = None


def content_bytes(result: ToolResult) -> int:
    """The size of a result's content: UTF-8 bytes of its text, characters of its
    base64 image data."""
    size = 0
    for block in result.content:
        if block["type"] == "text":
            size += len(block["text"].encode())
        else:
            size += len(block["data"])
    return size


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` UTF-8 bytes and marked :data:`CLIPPED`, if longer."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode(errors="ignore") + CLIPPED
