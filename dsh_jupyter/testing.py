"""Test helpers. :class:`InProcessRuntime` runs programs in *this* process.

It is **not a sandbox**: the program shares the host's interpreter, memory and
permissions. It exists so Code Mode's rules (scheduling, events, rendering,
failures) can be unit-tested in milliseconds; real runs use
:class:`dsh_jupyter.kernel.KernelRuntime`.
"""

from __future__ import annotations

import ast
import asyncio
import json
import traceback
from collections.abc import Mapping
from typing import Any

from .abort import AbortSignal
from .json_value import JsonValue, NotJsonError, snapshot_json
from .runtime import Binding, BindingError, CodeRunFailure, CodeRunResult, FailureKind

PROGRAM_FILENAME = "<program>"


class ToolCallError(Exception):
    """Raised inside a program when a tool call fails."""

    def __init__(self, tool_name: str, message: str) -> None:
        super().__init__(message)
        self.add_note(f"tool: {tool_name}")
        self.tool_name = tool_name
        self.message = message


class _Tools:
    def __init__(self, bindings: Mapping[str, Binding]) -> None:
        self._bindings = dict(bindings)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self[name]

    def __getitem__(self, name: str) -> Any:
        binding = self._bindings.get(name)
        if binding is None:
            known = ", ".join(sorted(self._bindings)) or "(none)"
            raise AttributeError(f"no tool named {name!r}; available tools: {known}")

        async def call(args: Any = None) -> Any:
            try:
                return await binding({} if args is None else args)
            except BindingError as exc:
                raise ToolCallError(name, exc.message) from None

        return call


class _Output:
    """Print capture: one log entry per completed line, capped in bytes."""

    def __init__(self, limit: int) -> None:
        self.logs: list[str] = []
        self._partial = ""
        self._limit = limit
        self.used = 2  # the enclosing JSON array's brackets
        self.overflow = False

    def write(self, text: str) -> None:
        if self.overflow:
            raise _OutputLimit
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._add(line)

    def _add(self, line: str) -> None:
        size = _json_size(line) + (1 if self.logs else 0)  # and the comma before it
        if self.used + size > self._limit:
            self.overflow = True
            raise _OutputLimit
        self.used += size
        self.logs.append(line)

    def flush(self) -> None:
        if self._partial:
            partial, self._partial = self._partial, ""
            self._add(partial)

    def print(self, *values: object, sep: str | None = " ", end: str | None = "\n",
              **_: object) -> None:
        self.write((" " if sep is None else sep).join(map(str, values))
                   + ("\n" if end is None else end))


class _OutputLimit(Exception):
    pass


def _json_size(value: JsonValue) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def compile_program(program: str) -> Any:
    """Compile ``program`` as the body of ``async def __program__()``; line numbers
    are kept, so tracebacks point at the program's own lines."""
    module = ast.parse(program, filename=PROGRAM_FILENAME)
    function = ast.AsyncFunctionDef(
        name="__program__",
        args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=module.body or [ast.Pass()], decorator_list=[], returns=None)
    wrapper = ast.Module(body=[function], type_ignores=[])
    ast.fix_missing_locations(wrapper)
    return compile(wrapper, PROGRAM_FILENAME, "exec")


class InProcessRuntime:
    """A :class:`~dsh_jupyter.runtime.CodeRuntime` for unit tests (no isolation)."""

    language = "python"
    isolation = "in-process"

    def __init__(self, *, wall_seconds: float = 600.0,
                 max_output_bytes: int = 64 * 1024 * 1024) -> None:
        self.wall_seconds = wall_seconds
        self.max_output_bytes = max_output_bytes
        self.runs = 0

    async def run(self, program: str, bindings: Mapping[str, Binding],
                  signal: AbortSignal) -> CodeRunResult:
        self.runs += 1
        output = _Output(self.max_output_bytes)
        try:
            code = compile_program(program)
        except SyntaxError as exc:
            return _failed("exception", "".join(traceback.format_exception_only(exc)).strip(),
                           output)
        namespace: dict[str, Any] = {"tools": _Tools(bindings), "ToolCallError": ToolCallError,
                                     "asyncio": asyncio, "print": output.print,
                                     "__name__": "__program__"}
        exec(code, namespace)
        task = asyncio.ensure_future(namespace["__program__"]())
        why: list[FailureKind] = []

        def stop(kind: FailureKind) -> None:
            if not why:
                why.append(kind)
            task.cancel()

        undo = signal.add_listener(lambda _reason: stop("abort"))
        timer = asyncio.get_running_loop().call_later(self.wall_seconds, stop, "timeout")
        try:
            value = await task
        except asyncio.CancelledError:
            if not why:
                raise
            kind = why[0]
            message = (str(signal.reason) if kind == "abort"
                       else f"wall time budget of {self.wall_seconds:g} s exceeded")
            return _failed(kind, message, output)
        except _OutputLimit:
            return _failed("output-limit",
                           f"output exceeded {self.max_output_bytes} bytes", output)
        except Exception as exc:
            return _failed("exception", _format_exception(exc), output)
        finally:
            timer.cancel()
            undo()
        try:
            output.flush()
        except _OutputLimit:
            return _failed("output-limit", f"output exceeded {self.max_output_bytes} bytes",
                           output)
        try:
            result: JsonValue = snapshot_json(value, freeze=False)
        except NotJsonError as exc:
            return _failed("invalid-output", f"the return value is not lossless JSON: {exc}",
                           output)
        if result is not None and output.used + _json_size(result) > self.max_output_bytes:
            return _failed("output-limit", f"output exceeded {self.max_output_bytes} bytes",
                           output)
        return CodeRunResult(logs=tuple(output.logs), value=result)


def _failed(kind: FailureKind, message: str, output: _Output) -> CodeRunResult:
    return CodeRunResult(logs=tuple(output.logs),
                         failure=CodeRunFailure(kind=kind, message=message))


def _format_exception(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename == PROGRAM_FILENAME]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames),
             *traceback.format_exception_only(exc)]
    return "".join(lines).rstrip()
