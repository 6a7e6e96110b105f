"""The code runtime seam: run a program with named async bindings.

A runtime knows nothing about tools. It receives a program (the body of an
async function), a mapping of binding names to async callables, and a signal.
Inside the program each binding is reachable as ``tools.<name>(args)`` and
``tools["<name>"](args)``; a binding that raises :class:`BindingError` makes
the program's call raise ``ToolCallError`` (carrying the binding name and the
message). ``run`` reports every outcome as data: it raises only for misuse.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from .abort import AbortSignal
from .json_value import JsonValue

__all__ = ["BindingError", "CodeRunFailure", "CodeRunResult", "CodeRuntime"]

FailureKind = Literal[
    "exception", "timeout", "abort", "kernel-exit", "invalid-output", "output-limit",
    "call-limit",
]
FAILURE_KINDS: tuple[FailureKind, ...] = (
    "exception", "timeout", "abort", "kernel-exit", "invalid-output", "output-limit",
    "call-limit",
)

Binding = Callable[[JsonValue], Awaitable[JsonValue]]
"""An async callable taking lossless JSON arguments and resolving to a JSON value."""


RUN_SIGNAL: ContextVar[AbortSignal] = ContextVar("dsh_jupyter_run_signal")
"""Set by a runtime in the context its bindings run in; fires when that run ends. A runtime
that waits for the bindings in flight before it returns (the kernel runtime does) must set
it: a binding may wait for work that only stops when the run is over."""


def run_signal() -> AbortSignal:
    """Inside a binding called by a run: a signal that fires when that run ends (result,
    failure, abort or disposal). Outside one, or under a runtime that does not set it:
    a signal that never fires."""
    signal = RUN_SIGNAL.get(None)
    return signal if signal is not None else AbortSignal.never()


class BindingError(Exception):
    """Raised by a binding to fail the program's call with ``message``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeRunFailure:
    kind: FailureKind
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeRunResult:
    """What a run produced. ``value`` is ``None`` when the program returned nothing
    (or ``None``); ``logs`` holds one entry per completed output line."""

    logs: tuple[str, ...] = ()
    value: JsonValue = None
    failure: CodeRunFailure | None = None


@runtime_checkable
class CodeRuntime(Protocol):
    """Runs model-written programs. ``language`` selects the SDK renderer
    (``"python"``); ``isolation`` tells deployments how contained a run is
    (``"kernel"``, ``"in-process"``)."""

    @property
    def language(self) -> str: ...

    @property
    def isolation(self) -> str: ...

    async def run(
        self, program: str, bindings: Mapping[str, Binding], signal: AbortSignal
    ) -> CodeRunResult: ...
