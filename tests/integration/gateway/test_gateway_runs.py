"""Programs on kernels started by a real Kernel Gateway: calls, output, budgets, registry."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from gateway_support import GatewayRuntimeFactory, LocalGateway
from kernel_support import Recorder, run

from dsh_jupyter import ToolCall, ToolRegistry
from dsh_jupyter.abort import AbortController
from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.runtime import BindingError, FunctionBindings, RunRequest

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]


async def test_tool_calls_output_and_value(make_runtime: GatewayRuntimeFactory,
                                           recorder: Recorder) -> None:
    runtime = await make_runtime()
    program = """\
import os, sys
print("hello from", "the gateway")
first = await tools.lookup({"key": "a"})
second = await tools["lookup"](key="b")
sys.stderr.write("to stderr\\n")
module = sys.modules["_dsh_jupyter_inkernel"]
return {"first": first, "second": second, "pid": os.getpid(),
        "injected_as_source": getattr(module, "__file__", None) is None,
        "package_imported": "dsh_jupyter" in sys.modules}
"""
    result = await run(runtime, program, {"lookup": recorder.binding("lookup")})
    assert result.failure is None, result.failure
    assert result.logs == ("hello from the gateway", "to stderr")
    value = result.value
    assert isinstance(value, dict)
    assert value["first"] == {"tool": "lookup", "args": {"key": "a"}}
    assert value["second"] == {"tool": "lookup", "args": {"key": "b"}}
    assert value["injected_as_source"] is True and value["package_imported"] is False
    assert value["pid"] != os.getpid()


async def test_gathered_calls_overlap(make_runtime: GatewayRuntimeFactory,
                                      recorder: Recorder) -> None:
    runtime = await make_runtime()
    program = """\
import time
started = time.perf_counter()
results = await asyncio.gather(*(tools.slow({"n": n}) for n in range(5)))
return {"ns": [r["args"]["n"] for r in results], "seconds": time.perf_counter() - started}
"""
    result = await run(runtime, program, {"slow": recorder.binding("slow", delay=0.4)})
    assert result.failure is None, result.failure
    assert isinstance(result.value, dict)
    assert result.value["ns"] == [0, 1, 2, 3, 4]
    assert recorder.max_active == 5  # all five were in flight at once
    assert isinstance(result.value["seconds"], float)
    assert result.value["seconds"] < 5 * 0.4  # and the program saw the overlap


async def test_tool_errors_raise_in_the_program(make_runtime: GatewayRuntimeFactory) -> None:
    async def denied(args: JsonValue) -> JsonValue:
        raise BindingError("denied by policy")

    runtime = await make_runtime()
    program = """\
try:
    await tools.denied({})
except ToolCallError as error:
    return [error.tool_name, error.message]
"""
    result = await run(runtime, program, {"denied": denied})
    assert result.value == ["denied", "denied by policy"]
    failing = await run(runtime, "return 1 / 0")
    assert failing.failure is not None and failing.failure.kind == "exception"
    assert failing.failure.message.endswith("ZeroDivisionError: division by zero")


async def test_wall_budget_interrupts_over_rest(make_runtime: GatewayRuntimeFactory) -> None:
    runtime = await make_runtime(wall_seconds=1.5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run(runtime, "print('before', flush=True)\nwhile True:\n    pass\n")
    assert result.failure is not None and result.failure.kind == "timeout"
    assert "wall-clock budget of 1.5 s" in result.failure.message
    assert result.logs == ("before",)
    assert loop.time() - started < 10


async def test_output_budget(make_runtime: GatewayRuntimeFactory) -> None:
    runtime = await make_runtime(max_output_bytes=200_000)
    program = "print('small')\nfor _ in range(40):\n    print('x' * 10_000)\nreturn 'unreachable'"
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "output-limit"
    assert result.logs[0] == "small"


async def test_gateway_rate_limit_is_reported(make_runtime: GatewayRuntimeFactory) -> None:
    # A stock gateway drops iopub output above 1 MB/s (over a 3 s window) and says so on
    # stderr; output is then lost, so the run ends instead of hanging until its wall budget.
    runtime = await make_runtime(wall_seconds=50)
    program = "for _ in range(200):\n    print('y' * 50_000)\nawait asyncio.sleep(30)"
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "output-limit"
    assert "rate limit" in result.failure.message
    assert "limit_rate=False" in result.failure.message


async def test_abort_during_a_call(make_runtime: GatewayRuntimeFactory) -> None:
    runtime = await make_runtime()
    controller = AbortController()

    async def slow(args: JsonValue) -> JsonValue:
        controller.abort("user pressed stop")
        await asyncio.sleep(0.2)
        return None

    result = await runtime.run(RunRequest("await tools.slow({})\nreturn 1",
                                          FunctionBindings({"slow": slow}), controller.signal))
    assert result.failure is not None
    assert (result.failure.kind, result.failure.message) == ("abort", "user pressed stop")


async def test_each_run_gets_a_fresh_kernel_deleted_afterwards(
        make_runtime: GatewayRuntimeFactory, gateway: LocalGateway) -> None:
    runtime = await make_runtime(pool_size=1)
    program = "import os\nglobal marker\ntry:\n    marker\nexcept NameError:\n    marker = 1\n" \
              "    return os.getpid()\nreturn 'reused'"
    first, second = await run(runtime, program), await run(runtime, program)
    assert isinstance(first.value, int) and isinstance(second.value, int)
    assert first.value != second.value
    await runtime.aclose()
    assert await asyncio.to_thread(gateway.kernel_ids) == []  # the pooled one too


async def test_run_code_through_the_registry(make_runtime: GatewayRuntimeFactory) -> None:
    runtime = await make_runtime()
    registry = ToolRegistry(mode="code", code_runtime=runtime)

    @registry.tool
    async def square(x: int) -> int:
        """Square a number."""
        await asyncio.sleep(0.2)
        return x * x

    events: list[str] = []
    registry.on_event(lambda event: events.append(event["kind"]))
    code = ("values = await asyncio.gather(*(tools.square({'x': i}) for i in range(4)))\n"
            "print('values:', values)\nreturn sum(values)")
    result = await registry.execute(ToolCall(call_id="g1", name="run_code", arguments={
        "description": "Sum of squares on a remote kernel", "code": code}))
    assert not result.is_error, result
    assert result.value == {"logs": ["values: [0, 1, 4, 9]"], "result": 14}
    assert events.count("tool/code-dispatch") == 4


async def test_kernel_killed_by_pid(make_runtime: GatewayRuntimeFactory) -> None:
    runtime = await make_runtime()
    loop = asyncio.get_running_loop()
    started: list[float] = []

    async def report(args: JsonValue) -> JsonValue:
        assert isinstance(args, dict) and isinstance(args["pid"], int)
        os.kill(args["pid"], signal.SIGKILL)  # the remote kernel's process, on this machine
        started.append(loop.time())
        return None

    program = "import os\nawait tools.report({'pid': os.getpid()})\n" \
              "await asyncio.sleep(60)\nreturn 'unreachable'"
    result = await run(runtime, program, {"report": report})
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert "the remote kernel died" in result.failure.message
    assert loop.time() - started[0] < 15  # the gateway's restarter noticed (every ~3 s)


async def test_kernel_deleted_on_the_gateway(make_runtime: GatewayRuntimeFactory,
                                             gateway: LocalGateway) -> None:
    import httpx

    runtime = await make_runtime()

    async def delete_me(args: JsonValue) -> JsonValue:
        assert isinstance(args, str)
        kernel_id = os.path.basename(args).removeprefix("kernel-").removesuffix(".json")
        async with httpx.AsyncClient(headers=gateway.headers) as client:
            response = await client.delete(f"{gateway.url}/api/kernels/{kernel_id}")
        assert response.status_code == 204
        return None

    program = "from ipykernel import get_connection_file\n" \
              "await tools.delete_me(get_connection_file())\nawait asyncio.sleep(60)"
    result = await run(runtime, program, {"delete_me": delete_me})
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert "shut down on the gateway" in result.failure.message or \
        "no longer exists on the gateway" in result.failure.message


async def test_oversized_message_hits_the_output_limit(
        make_runtime: GatewayRuntimeFactory) -> None:
    # The websocket caps frames at the same size as local kernels' zmq sockets.
    runtime = await make_runtime(max_output_bytes=2**20, max_call_bytes=2**20)
    program = """\
import sys
bridge = sys.modules["_dsh_jupyter_inkernel"].runtime.client
bridge.done({"kind": "junk", "blob": "z" * 5_000_000})
await asyncio.sleep(30)
"""
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "output-limit"
    assert result.failure.message == "the kernel sent a message larger than the 2 MiB message limit"
