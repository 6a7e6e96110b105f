"""Tracing's setup in a fresh interpreter: the global provider, and OpenTelemetry missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_without_a_provider_the_global_one_is_used() -> None:
    # In a fresh interpreter: this process's global provider is never set.
    run_python("""
        import asyncio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter)
        from dsh_jupyter import ToolCall, ToolRegistry

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        registry = ToolRegistry()

        @registry.tool
        def ok() -> str:
            "OK."
            return "ok"

        registry.instrument()
        asyncio.run(registry.execute(ToolCall(call_id="c", name="ok")))
        assert [s.name for s in exporter.get_finished_spans()] == ["execute_tool ok"]
    """)


def test_without_opentelemetry_instrument_says_what_to_install() -> None:
    run_python("""
        import sys
        sys.modules["opentelemetry"] = None  # as if it were not installed
        from dsh_jupyter import ToolRegistry
        from dsh_jupyter.errors import RegistrationError
        try:
            ToolRegistry().instrument()
        except RegistrationError as exc:
            assert "dsh-jupyter[otel]" in str(exc), exc
        else:
            raise AssertionError("instrument() worked without opentelemetry")
    """)


def run_python(code: str) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, timeout=60)
