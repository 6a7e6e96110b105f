"""OpenTelemetry spans for agent runs, on when the run's registry is instrumented.

``registry.instrument()`` switches tracing on for the registry's calls and for every
:func:`~dsh_jupyter.agent.loop.run_agent` over that registry: one switch, one provider,
one trace per run. The loop imports this module only then, so nothing is imported
otherwise. Spans follow the OpenTelemetry GenAI semantic conventions::

    invoke_agent {agent}            the whole run (gen_ai.operation.name=invoke_agent)
    ├── chat {model}                one per model request (kind CLIENT)
    ├── execute_tool run_code       the registry's spans, children of the run
    │   └── execute_tool lookup
    └── chat {model}

Token usage is the response's when the endpoint reports it (``gen_ai.usage.*``), and
the run's span sums what was reported. Like the registry's spans, no message text is
recorded unless ``record_values=True`` (then ``gen_ai.input.messages`` and
``gen_ai.output.messages`` as JSON, clipped to ``max_value_bytes``).
"""

from __future__ import annotations

from contextvars import Token
from typing import Any, cast
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from ..json_dump import dump_json
from ..json_value import JsonValue
from ..registry.tracing import CallTracer, clip
from .accounting import RequestAccounting
from .errors import ModelError
from .model import ChatModel, ChatRequest, ModelResponse

DEFAULT_AGENT_NAME = "agent"
"""``gen_ai.agent.name`` of a run without an agent scope."""


def _ids(span: Span) -> tuple[str, str]:
    context = span.get_span_context()
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)


def _model_attributes(model: ChatModel) -> dict[str, AttributeValue]:
    """The request model, and the provider and server where the adapter says (an adapter
    may have ``provider`` and ``base_url`` attributes; scripted models have neither)."""
    attributes: dict[str, AttributeValue] = {"gen_ai.request.model": model.name}
    provider = getattr(model, "provider", None)
    if isinstance(provider, str) and provider:
        attributes["gen_ai.provider.name"] = provider
    base_url = getattr(model, "base_url", None)
    if isinstance(base_url, str):
        parts = urlsplit(base_url)
        if parts.hostname:
            attributes["server.address"] = parts.hostname
            attributes["server.port"] = parts.port or (443 if parts.scheme == "https" else 80)
    return attributes


class RunSpan:
    """The ``invoke_agent`` span of one run; current (so tool calls are its children)
    from :meth:`start` until :meth:`end`, which ends it once."""

    __slots__ = ("_activation", "_calls", "_input_tokens", "_model", "_model_name",
                 "_output_tokens", "_span")

    def __init__(self, calls: CallTracer, model: ChatModel, *, agent: str | None, run_id: str,
                 mode: str, max_steps: int) -> None:
        self._calls = calls
        self._model = _model_attributes(model)
        self._model_name = model.name
        name = agent or DEFAULT_AGENT_NAME
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
            **self._model, "dsh.agent.run_id": run_id, "dsh.agent.mode": mode,
            "dsh.agent.max_steps": max_steps}
        self._span = calls.tracer.start_span(f"invoke_agent {name}", kind=SpanKind.INTERNAL,
                                             attributes=attributes)
        self._activation: Token[otel_context.Context] | None = otel_context.attach(
            trace.set_span_in_context(self._span))
        self._input_tokens: int | None = None
        self._output_tokens: int | None = None

    def ids(self) -> tuple[str, str]:
        return _ids(self._span)

    def chat(self, request: ChatRequest, sizes: RequestAccounting) -> ChatSpan:
        """Start the span of one model request (a child of the run's)."""
        return ChatSpan(self, request, sizes)

    def _counted(self, response: ModelResponse) -> None:
        if response.prompt_tokens is not None:
            self._input_tokens = (self._input_tokens or 0) + response.prompt_tokens
        if response.completion_tokens is not None:
            self._output_tokens = (self._output_tokens or 0) + response.completion_tokens

    def end(self, stop: str, *, steps: int, tool_calls: int, sub_calls: int,
            error_code: str | None) -> None:
        """End the run's span: how it stopped, its totals, ``error_code`` as its status
        when it failed (``model_error``, ``raised``, ``cancelled``)."""
        if self._activation is None:
            return
        span = self._span
        attributes: dict[str, AttributeValue] = {
            "dsh.agent.stop": stop, "dsh.agent.steps": steps, "dsh.agent.tool_calls": tool_calls,
            "dsh.agent.sub_calls": sub_calls}
        if self._input_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = self._input_tokens
        if self._output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = self._output_tokens
        if error_code is not None:
            attributes["error.type"] = error_code
            span.set_status(Status(StatusCode.ERROR, error_code))
        span.set_attributes(attributes)
        span.end()
        # The loop attached it in the same task (run_agent's), so the token is ours.
        otel_context.detach(self._activation)
        self._activation = None


class ChatSpan:
    """The ``chat {model}`` span of one request; :meth:`end` ends it once."""

    __slots__ = ("_run", "_span")

    def __init__(self, run: RunSpan, request: ChatRequest, sizes: RequestAccounting) -> None:
        self._run = run
        calls = run._calls
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat", **run._model, "dsh.agent.step": sizes.step,
            "dsh.request.messages": len(request.messages),
            "dsh.request.tools": len(request.tools),
            "dsh.request.bytes": sizes.request_bytes}
        if calls.record_values:
            messages = cast(JsonValue, list(request.messages))
            attributes["gen_ai.input.messages"] = clip(dump_json(messages),
                                                       calls.max_value_bytes)
        self._span: Span | None = calls.tracer.start_span(
            f"chat {run._model_name}", context=trace.set_span_in_context(run._span),
            kind=SpanKind.CLIENT, attributes=attributes)

    def ids(self) -> tuple[str, str]:
        assert self._span is not None
        return _ids(self._span)

    def end(self, response: ModelResponse | None = None, *,
            error: ModelError | None = None) -> None:
        """End with ``response``, or failed with ``error``; with neither, the request
        was aborted (``error.type=ABORTED``)."""
        span, self._span = self._span, None
        if span is None:
            return
        attributes: dict[str, AttributeValue] = {}
        if response is not None:
            self._run._counted(response)
            attributes["dsh.model.attempts"] = response.attempts
            attributes["dsh.response.tool_calls"] = len(response.tool_calls)
            if response.finish_reason is not None:
                attributes["gen_ai.response.finish_reasons"] = (response.finish_reason,)
            if response.model is not None:
                attributes["gen_ai.response.model"] = response.model
            if response.prompt_tokens is not None:
                attributes["gen_ai.usage.input_tokens"] = response.prompt_tokens
            if response.completion_tokens is not None:
                attributes["gen_ai.usage.output_tokens"] = response.completion_tokens
            calls = self._run._calls
            if calls.record_values:
                attributes["gen_ai.output.messages"] = clip(
                    dump_json([_output_message(response)]), calls.max_value_bytes)
        else:
            code = error.code if error is not None else "ABORTED"
            attributes["error.type"] = code
            if error is not None:
                attributes["dsh.model.attempts"] = error.attempts
            span.set_status(Status(StatusCode.ERROR, code))
        span.set_attributes(attributes)
        span.end()


def _output_message(response: ModelResponse) -> dict[str, Any]:
    message: dict[str, Any] = dict(response.message())
    if response.finish_reason is not None:
        message["finish_reason"] = response.finish_reason
    return message
