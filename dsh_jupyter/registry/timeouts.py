"""The opt-in wrapper that enforces a definition's ``timeout_ms``.

``timeout_ms`` on a definition is declarative; nothing enforces it until this
wrapper is installed::

    registry.on_execute(enforce_timeouts())            # every tool with timeout_ms
    registry.on_execute(enforce_timeouts(default_ms=30_000))   # and a default for the rest

At the deadline the wrapper aborts the body's signal (reason "timeout") and, once
the body has settled, reports ``TOOL_TIMEOUT``. Bodies stop cooperatively: one
that ignores its signal still runs to completion before the call returns.
"""

from __future__ import annotations

import asyncio

from ..abort import AbortController
from .execution import ToolExecution
from .policy import CallNext, ExecuteWrapper
from .results import ToolResult, failure


def enforce_timeouts(*, default_ms: float | None = None) -> ExecuteWrapper:
    """An execute wrapper turning an expired ``timeout_ms`` into ``TOOL_TIMEOUT``."""

    async def timeout_wrapper(execution: ToolExecution, call_next: CallNext) -> ToolResult:
        definition = execution.definition
        own = definition.timeout_ms if definition is not None else None
        limit_ms = own if own is not None else default_ms
        if limit_ms is None:
            return await call_next()
        controller = AbortController()
        handle = asyncio.get_running_loop().call_later(
            limit_ms / 1000, controller.abort, f"timeout after {limit_ms:g} ms")
        try:
            result = await call_next(signal=controller.signal)
        finally:
            handle.cancel()
        if controller.signal.aborted and not execution.signal.aborted:
            return failure(f"{execution.name} timed out after {limit_ms:g} ms", "TOOL_TIMEOUT",
                           contexts=result.additional_contexts)
        return result

    return timeout_wrapper

