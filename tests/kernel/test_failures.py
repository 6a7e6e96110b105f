"""Every failure kind, produced for real on real kernels."""

from __future__ import annotations

import asyncio

import pytest
from kernel_support import RuntimeFactory, run

from dsh_jupyter.abort import AbortController
from dsh_jupyter.errors import CodeModeError
from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.runtime import FunctionBindings, RunRequest

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]


async def test_infinite_loop_hits_the_wall_budget(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(wall_seconds=1.0)
    result = await run(runtime, "print('before')\nwhile True:\n    pass\n")
    assert result.failure is not None and result.failure.kind == "timeout"
    assert "wall-clock" in result.failure.message
    assert result.logs == ("before",)  # output buffered in the kernel is drained


async def test_busy_program_hits_the_compute_budget(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(compute_seconds=0.5, wall_seconds=30.0)
    result = await run(runtime, "while True:\n    pass\n")
    assert result.failure is not None and result.failure.kind == "timeout"
    assert "compute budget" in result.failure.message


async def test_sleeping_program_spends_no_compute(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(compute_seconds=0.5, wall_seconds=30.0)
    result = await run(runtime, "import time\ntime.sleep(1.0)\nreturn 'rested'")
    assert result.value == "rested"


async def test_sigint_ignored_still_times_out(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(wall_seconds=1.0, interrupt_grace_seconds=0.2)
    program = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n"
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "timeout"


@pytest.mark.parametrize(("program", "expected"), [
    ("import os\nos._exit(3)", "exited with status 3"),
    ("import ctypes\nctypes.string_at(0)", "SIGSEGV"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"),
])
async def test_kernel_death(runtime: KernelRuntime, program: str, expected: str) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert expected in result.failure.message
    assert loop.time() - started < 20  # detected by polling, not by a budget


async def test_huge_print_hits_the_output_limit(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(max_output_bytes=1024 * 1024)
    program = """\
print("small line")
for _ in range(200):
    print("x" * 100_000)
return "unreachable"
"""
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "output-limit"
    assert result.logs[0] == "small line"
    kept = sum(len(line.encode()) + 2 for line in result.logs)
    assert kept <= 1024 * 1024
    assert len(result.logs) >= 2  # the lines that fit are kept


async def test_one_gigantic_line_hits_the_output_limit(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(max_output_bytes=1024 * 1024)
    result = await run(runtime, "print('before')\nprint('y' * 50_000_000)\n")
    assert result.failure is not None and result.failure.kind == "output-limit"
    assert result.logs in (("before",), ())


@pytest.mark.parametrize(("limit", "fits"), [(14, True), (13, False)])
async def test_the_output_cap_is_the_serialized_log_array_plus_the_value(
        make_runtime: RuntimeFactory, limit: int, fits: bool) -> None:
    # ["ab","cd"] is 11 bytes, "x" 3: a 14-byte cap holds them, 13 does not.
    runtime = await make_runtime(max_output_bytes=limit)
    result = await run(runtime, "print('ab')\nprint('cd')\nreturn 'x'")
    assert (result.failure is None) is fits, result
    assert result.logs == ("ab", "cd")


async def test_value_counts_against_the_output_limit(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(max_output_bytes=1000)
    fits = await run(runtime, "print('a' * 10)\nreturn 'b' * 900")
    assert fits.failure is None
    over = await run(runtime, "print('a' * 200)\nreturn 'b' * 900")
    assert over.failure is not None and over.failure.kind == "output-limit"
    assert over.logs == ("a" * 200,)
    alone = await run(runtime, "return 'c' * 5000")
    assert alone.failure is not None and alone.failure.kind == "output-limit"


async def test_abort_during_a_binding_call(runtime: KernelRuntime) -> None:
    controller = AbortController()
    started = asyncio.Event()
    finished: list[str] = []

    async def slow(args: JsonValue) -> JsonValue:
        started.set()
        try:
            await controller.signal.run(asyncio.sleep(30))
        finally:
            finished.append("binding")
        return None

    async def abort_when_started() -> None:
        await started.wait()
        controller.abort("user pressed stop")

    aborter = asyncio.create_task(abort_when_started())
    result = await runtime.run(RunRequest("print('calling')\nawait tools.slow({})\nreturn 1",
                               FunctionBindings({"slow": slow}), controller.signal))
    await aborter
    assert result.failure is not None
    assert (result.failure.kind, result.failure.message) == ("abort", "user pressed stop")
    assert result.logs == ("calling",)  # what it printed before the abort is kept
    assert finished == ["binding"]  # the run returned only after its binding call ended


async def test_bindings_in_flight_finish_before_run_returns(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(wall_seconds=0.5)
    finished: list[float] = []
    loop = asyncio.get_running_loop()

    async def stubborn(args: JsonValue) -> JsonValue:
        await asyncio.sleep(1.0)  # ignores the end of the run
        finished.append(loop.time())
        return None

    result = await run(runtime, "await tools.stubborn({})", {"stubborn": stubborn})
    returned = loop.time()
    assert result.failure is not None and result.failure.kind == "timeout"
    assert finished and finished[0] <= returned


async def test_dispose_aborts_runs_in_flight() -> None:
    runtime = KernelRuntime(KernelRuntimeConfig(pool_size=0))
    running = asyncio.Event()

    async def started(args: JsonValue) -> JsonValue:
        running.set()
        return None

    async with runtime:
        task = asyncio.create_task(run(runtime, "await tools.started({})\nimport time\n"
                                                "time.sleep(30)", {"started": started}))
        await running.wait()
    result = await task
    assert result.failure is not None
    assert (result.failure.kind, result.failure.message) == ("abort", "runtime disposed")
    with pytest.raises(CodeModeError):
        await run(runtime, "return 1")


async def test_run_before_enter_is_misuse() -> None:
    with pytest.raises(CodeModeError):
        await run(KernelRuntime(), "return 1")


async def test_memory_cap_gives_memory_error(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(memory_bytes=1024 * 1024 * 1024)
    program = """\
try:
    block = bytearray(2 * 1024 * 1024 * 1024)
except MemoryError:
    return "MemoryError"
"""
    result = await run(runtime, program)
    assert result.value == "MemoryError"


@pytest.mark.parametrize("launcher", ["fork", "stock"])
async def test_abort_while_the_kernel_starts(make_runtime: RuntimeFactory, launcher: str) -> None:
    runtime = await make_runtime(launcher=launcher)
    await run(runtime, "return 1")  # the fork server is up: its start is the fast part
    controller = AbortController()
    asyncio.get_running_loop().call_later(0.01, controller.abort, "changed my mind")
    result = await runtime.run(RunRequest("return 1", FunctionBindings({}), controller.signal))
    assert result.failure is not None
    assert (result.failure.kind, result.failure.message) == ("abort", "changed my mind")
