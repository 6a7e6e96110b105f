"""What the tracing tests share (the unit tests in tests/unit/registry/test_tracing.py, the
span trees on both runtimes in tests/kernel/test_tracing_runtimes.py): ``Traces``, a private
provider exporting to memory (the global provider is never touched), the ``echo`` tool, a
``run_code`` call, and readers of a span."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from dsh_jupyter import ToolCall, ToolRunContext, define_tool


class Traces:
    """A private provider exporting every ended span to memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def one(self) -> ReadableSpan:
        (span,) = self.spans
        return span

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]


def echo(*, delay: float = 0.0, safe: bool = False, timeout_ms: float | None = None,
         started: asyncio.Event | None = None) -> Any:
    async def body(args: Any, ctx: ToolRunContext) -> str:
        if started is not None:
            started.set()
        if delay:  # settles early when the call is stopped (a timeout, a cancellation)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctx.signal.wait(), delay)
        return str(args["text"])

    return define_tool(name="echo", description="Echo text.",
                       parameters={"type": "object", "properties": {"text": {"type": "string"}},
                                   "required": ["text"]},
                       output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                       execute=body, timeout_ms=timeout_ms,
                       is_concurrency_safe=(lambda a: True) if safe else None)


def run_code(code: str, call_id: str = "r1") -> ToolCall:
    return ToolCall(call_id=call_id, name="run_code",
                    arguments={"code": code, "description": "two echoes"})


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def error_of(span: ReadableSpan) -> tuple[StatusCode, str | None]:
    return span.status.status_code, span.status.description
