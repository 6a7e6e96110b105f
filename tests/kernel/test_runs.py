"""Programs on real kernels: tool calls, results, logs and program failures."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kernel_support import Recorder, run

from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel import KernelRuntime
from dsh_jupyter.runtime import BindingError, CodeRuntime, FunctionBindings, RunRequest

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]


def test_is_a_code_runtime() -> None:
    runtime = KernelRuntime()
    assert isinstance(runtime, CodeRuntime)
    assert (runtime.language, runtime.isolation) == ("python", "kernel")


async def test_sequential_calls_and_value(runtime: KernelRuntime, recorder: Recorder) -> None:
    program = """\
first = await tools.lookup({"key": "a"})
second = await tools.lookup(key="b")
empty = await tools.lookup()
return {"first": first, "second": second, "empty": empty}
"""
    result = await run(runtime, program, {"lookup": recorder.binding("lookup")})
    assert result.failure is None
    assert result.value == {
        "first": {"tool": "lookup", "args": {"key": "a"}},
        "second": {"tool": "lookup", "args": {"key": "b"}},
        "empty": {"tool": "lookup", "args": {}},
    }
    assert [args for _, args in recorder.calls] == [{"key": "a"}, {"key": "b"}, {}]


async def test_gathered_calls_overlap(runtime: KernelRuntime, recorder: Recorder) -> None:
    program = """\
results = await asyncio.gather(*(tools.slow({"n": n}) for n in range(5)))
return [r["args"]["n"] for r in results]
"""
    result = await run(runtime, program, {"slow": recorder.binding("slow", delay=0.3)})
    assert result.failure is None
    assert result.value == [0, 1, 2, 3, 4]
    assert recorder.max_active == 5  # the host does not serialize calls


async def test_exotic_names_and_unknown_names(runtime: KernelRuntime, recorder: Recorder) -> None:
    program = """\
value = await tools["my-tool"]({"x": 1})
try:
    tools.missing
except AttributeError as error:
    missing = str(error)
try:
    tools["also missing"]
except KeyError as error:
    missing_item = error.args[0]
return {"value": value, "missing": missing, "missing_item": missing_item,
        "names": dir(tools), "has": "my-tool" in tools}
"""
    result = await run(runtime, program, {"my-tool": recorder.binding("my-tool"),
                                          "plain": recorder.binding("plain")})
    assert result.failure is None, result.failure
    value: Any = result.value
    assert isinstance(value, dict)
    assert value["value"] == {"tool": "my-tool", "args": {"x": 1}}
    assert "no tool named 'missing'" in value["missing"]
    assert "'my-tool', 'plain'" in value["missing"]
    assert "also missing" in value["missing_item"]
    assert value["names"] == ["my-tool", "plain"]
    assert value["has"] is True


async def test_tool_call_error(runtime: KernelRuntime) -> None:
    async def denied(args: JsonValue) -> JsonValue:
        raise BindingError("denied by policy")

    async def broken(args: JsonValue) -> JsonValue:
        raise RuntimeError("database is down")

    async def not_json(args: JsonValue) -> JsonValue:
        return {1, 2}  # type: ignore[return-value]

    program = """\
out = []
for name in ["denied", "broken", "not_json"]:
    try:
        await tools[name]({})
    except ToolCallError as error:
        out.append([error.tool_name, error.message])
return out
"""
    result = await run(runtime, program, {"denied": denied, "broken": broken,
                                          "not_json": not_json})
    assert result.failure is None, result.failure
    assert isinstance(result.value, list)
    assert result.value[0] == ["denied", "denied by policy"]
    assert result.value[1] == ["broken", "database is down"]
    third: Any = result.value[2]
    assert third[0] == "not_json" and "not lossless JSON" in third[1]


async def test_arguments_must_be_json(runtime: KernelRuntime, recorder: Recorder) -> None:
    program = """\
try:
    await tools.echo({"when": {1, 2}})
except ToolCallError as error:
    return str(error)
"""
    result = await run(runtime, program, {"echo": recorder.binding("echo")})
    assert isinstance(result.value, str)
    assert "set" in result.value and "'echo'" in result.value
    assert recorder.calls == []


async def test_logs_one_entry_per_line(runtime: KernelRuntime) -> None:
    program = """\
import sys
print("one")
print("two\\nthree")
sys.stdout.write("par")
sys.stdout.write("tial\\n")
sys.stderr.write("to stderr\\n")
sys.stdout.write("no newline at the end")
return None
"""
    result = await run(runtime, program)
    assert result.failure is None
    assert result.value is None
    assert result.logs == ("one", "two", "three", "partial", "to stderr", "no newline at the end")


async def test_exception_traceback_has_program_lines_only(runtime: KernelRuntime) -> None:
    program = """\
def helper(x):
    return 1 / x

value = 3
return helper(value - 3)
"""
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "exception"
    message = result.failure.message
    assert 'File "<program>", line 5' in message
    assert 'File "<program>", line 2, in helper' in message
    assert "return 1 / x" in message
    assert message.endswith("ZeroDivisionError: division by zero")
    assert "inkernel" not in message


async def test_syntax_error(runtime: KernelRuntime) -> None:
    result = await run(runtime, "x = 1\nreturn (x +\n")
    assert result.failure is not None and result.failure.kind == "exception"
    assert "SyntaxError" in result.failure.message
    assert "<program>" in result.failure.message


async def test_tool_call_error_traceback(runtime: KernelRuntime) -> None:
    async def denied(args: JsonValue) -> JsonValue:
        raise BindingError("no")

    result = await run(runtime, "x = 1\nawait tools.denied({})\n", {"denied": denied})
    assert result.failure is not None
    assert 'File "<program>", line 2' in result.failure.message
    assert result.failure.message.endswith("ToolCallError: no\ntool: denied")


async def test_invalid_output(runtime: KernelRuntime) -> None:
    result = await run(runtime, "return {'ids': {1, 2}}")
    assert result.failure is not None and result.failure.kind == "invalid-output"
    assert "set" in result.failure.message and "ids" in result.failure.message
    result_nan = await run(runtime, "return float('nan')")
    assert result_nan.failure is not None and result_nan.failure.kind == "invalid-output"


async def test_the_runtime_closes_the_bindings_once_when_the_program_ends(
        runtime: KernelRuntime) -> None:
    """The end of a run is part of the seam: ``close`` comes once, after the program's
    own calls returned, with the reason; a call left running sees it and stops."""
    closes: list[str] = []
    seen: list[bool] = []

    class Recording(FunctionBindings):
        def close(self, reason: str) -> None:
            closes.append(reason)
            super().close(reason)

    async def observe(args: JsonValue) -> JsonValue:
        seen.append(bindings.signal.aborted)
        return None

    async def linger(args: JsonValue) -> JsonValue:
        await bindings.signal.wait()  # stops only when the run closes the bindings
        return None

    bindings = Recording({"observe": observe, "linger": linger})
    program = ("await tools.observe({})\nasyncio.ensure_future(tools.linger({}))\n"
               "await asyncio.sleep(0.05)\nreturn 1")
    result = await runtime.run(RunRequest(program, bindings))
    assert result.value == 1
    assert seen == [False]
    assert closes == ["the run ended"]


async def test_top_level_await_and_asyncio(runtime: KernelRuntime) -> None:
    result = await run(runtime, "await asyncio.sleep(0.01)\nreturn [1, 'a', None, True, 2.5]")
    assert result.value == [1, "a", None, True, 2.5]


async def test_abort_signal_already_fired(runtime: KernelRuntime) -> None:
    from dsh_jupyter.abort import AbortController

    controller = AbortController()
    controller.abort("not now")
    result = await runtime.run(RunRequest("return 1", FunctionBindings({}), controller.signal))
    assert result.failure is not None
    assert (result.failure.kind, result.failure.message) == ("abort", "not now")


async def test_never_signal_type(runtime: KernelRuntime) -> None:
    result = await runtime.run(RunRequest("return 'ok'", FunctionBindings({})))
    assert result.value == "ok"
    await asyncio.sleep(0)
