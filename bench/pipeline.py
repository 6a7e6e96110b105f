"""Per-call overhead of ``registry.execute`` for a no-op tool, and large values.

Prints the median µs per call over several rounds, for: no hooks; one hook per
stage (pre-execute, guard, execute wrapper, post-execute, observer); tracing on
(``registry.instrument``) with the API's no-op provider (the cost of our own seam), the
SDK's provider with no span processor, and with an in-memory exporter; and a plain
``await`` of the body as the floor, measured side by side in one run (the tracing lines
need ``opentelemetry-sdk``).

Then large values: a native tool with ``run_code``'s output declaration (its
schema, content renderer and presentation meta), or a typed tool (pydantic's dump,
``default_render``), returns a big value through ``registry.execute`` while a task
sleeping 5 ms at a time measures how late the event loop wakes it
(``tests/kernel/loop_lag.py``).
Prints the median total time and longest stall per value, and the longest garbage
collection meanwhile (a full collection holds the GIL throughout, on whichever thread
triggered it, so it bounds the stall a worker thread can promise).

Then the host's cost of one sub-call of a run_code program (``--sub-calls``), also with
tracing on (a span per sub-call, exported to memory).

    python bench/pipeline.py [--calls 20000] [--rounds 7] [--large-rounds 3] [--sub-calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "kernel"))

from loop_lag import LoopLag  # noqa: E402

from dsh_jupyter import ToolCall, ToolRegistry, define_tool  # noqa: E402


async def noop_body(args: Any, ctx: Any) -> str:
    return "ok"


def make_registry(hooks: bool) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(define_tool(
        name="noop", parameters={"type": "object", "properties": {"x": {"type": "integer"}}},
        output={"schema": {"type": "string"}, "render": lambda a, v: str(v)}, execute=noop_body))
    if hooks:
        async def pre(execution: Any, decision: Any) -> None:
            return None

        async def around(execution: Any, call_next: Any) -> Any:
            return await call_next()

        async def post(execution: Any, result: Any) -> None:
            return None

        registry.on_pre_execute(pre)
        registry.guard(lambda execution: None)
        registry.on_execute(around)
        registry.on_post_execute(post)
        registry.on_result(lambda execution, result: None)
    return registry


async def time_calls(fn: Callable[[int], Awaitable[Any]], calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        await fn(i)
    return (time.perf_counter() - start) / calls * 1e6


async def main(calls: int, rounds: int) -> None:
    plain = make_registry(hooks=False)
    hooked = make_registry(hooks=True)
    args = {"x": 1}

    async def floor(i: int) -> Any:
        return await noop_body(args, None)

    async def bare(i: int) -> Any:
        return await plain.execute(ToolCall(call_id="c", name="noop", arguments=args))

    async def with_hooks(i: int) -> Any:
        return await hooked.execute(ToolCall(call_id="c", name="noop", arguments=args))

    result = await bare(0)
    assert not result.is_error, result
    cases = {"await body (floor)": floor, "execute, no hooks": bare,
             "execute, one hook per stage": with_hooks, **traced_cases(args)}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():  # interleaved, so drift hits every case alike
            samples[name].append(await time_calls(fn, calls))
    print(f"python {sys.version.split()[0]}, {calls} calls x {rounds} rounds, median µs/call")
    base = statistics.median(samples["execute, no hooks"])
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"  {name:34s} {median:8.2f} µs   ({median / base:4.2f}x no-hooks)")
    print("goal: execute with no hooks <= 30 µs per call")


def traced_cases(args: dict[str, Any]) -> dict[str, Callable[[int], Awaitable[Any]]]:
    """``execute, no hooks`` with tracing on: the API's no-op provider (our seam alone), an
    SDK provider with no span processor (the spans are built and dropped) and one
    exporting to memory (cleared every call)."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
        from opentelemetry.trace import NoOpTracerProvider
    except ImportError:
        print("(no opentelemetry-sdk: the tracing lines are skipped)")
        return {}
    bare_provider = TracerProvider()
    exporter = InMemorySpanExporter()
    exporting = TracerProvider()
    exporting.add_span_processor(SimpleSpanProcessor(exporter))
    noop = make_registry(hooks=False)
    noop.instrument(NoOpTracerProvider())
    unprocessed = make_registry(hooks=False)
    unprocessed.instrument(bare_provider)
    exported = make_registry(hooks=False)
    exported.instrument(exporting)

    async def traced_noop(i: int) -> Any:
        return await noop.execute(ToolCall(call_id="c", name="noop", arguments=args))

    async def traced(i: int) -> Any:
        return await unprocessed.execute(ToolCall(call_id="c", name="noop", arguments=args))

    async def traced_exported(i: int) -> Any:
        result = await exported.execute(ToolCall(call_id="c", name="noop", arguments=args))
        exporter.clear()
        return result

    return {"execute, tracing, API no-op": traced_noop,
            "execute, tracing, no processor": traced,
            "execute, tracing, in-memory export": traced_exported}


SUB_CALL_ARGS = {"path": "notes/today.txt", "offset": 3, "limit": 40, "tags": ["a", "b"]}


async def sub_calls(calls: int, rounds: int) -> None:
    """The host's cost of one sub-call of a program: the wire's JSON, the host's call
    server, the dispatch bridge's scheduling and the whole pipeline, on the in-process
    runtime (the kernel's in-kernel core and run lifecycle, no kernel). The floor is the
    same program awaiting a local coroutine."""
    from dsh_jupyter.kernel import InProcessRuntime

    registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())

    @registry.tool(is_concurrency_safe=lambda args: True)
    async def read(path: str, offset: int = 0, limit: int = 10,
                   tags: list[str] | None = None) -> str:
        """Read lines."""
        return path

    switch_on = _tracing(registry)

    program = ("for _ in range({n}):\n"
               "    await {call}\n"
               "return 1")
    local = "async def read(args):\n    return args['path']\n" + program

    async def one(code: str, traced: bool) -> float:
        n = calls // 10 if "calls" in code.splitlines()[-1] else calls
        switch_off = switch_on() if traced and switch_on is not None else None
        # CPU time of this process: what a sub-call costs the host, whatever else the
        # machine is doing (wall time on a shared 2-core VM mostly measures the neighbours).
        started = time.process_time()
        result = await registry.execute(ToolCall(
            call_id="r", name="run_code", arguments={"code": code, "description": "bench"}))
        assert not result.is_error, result
        seconds = time.process_time() - started
        if switch_off is not None:
            switch_off()
        return seconds / n * 1e6

    rows = "{'path': 'rows', 'tags': [f'tag{i}' for i in range(2000)]}"
    cases = {"program awaiting a local coroutine (floor)":
             local.format(n=calls, call=f"read({SUB_CALL_ARGS!r})"),
             "sub-call through run_code (in-process runtime)":
             program.format(n=calls, call=f"tools.read({SUB_CALL_ARGS!r})"),
             "sub-call with 2,000 tags (in-process runtime)":
             program.format(n=calls // 10, call=f"tools.read({rows})").replace(
                 "return 1", f"return 1  # {calls // 10} calls")}
    traced = "sub-call, tracing on (in-memory export)"
    if switch_on is not None:
        cases[traced] = cases["sub-call through run_code (in-process runtime)"]
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, code in cases.items():
            samples[name].append(await one(code, name == traced))
    print(f"sub-calls: {calls} sequential calls x {rounds} rounds, median CPU µs/call")
    for name, values in samples.items():
        print(f"  {name:48s} {statistics.median(values):8.1f} µs")
    if switch_on is not None:
        added = (statistics.median(samples[traced])
                 - statistics.median(samples["sub-call through run_code (in-process runtime)"]))
        print(f"  tracing adds {added:.1f} µs per sub-call (a span each, exported to memory)")


def _tracing(registry: ToolRegistry) -> Callable[[], Callable[[], None]] | None:
    """What switches tracing on for ``registry`` (an SDK provider exporting to memory) and
    returns the switch off, which also empties the exporter; ``None`` without the SDK."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
    except ImportError:
        return None
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def switch_on() -> Callable[[], None]:
        undo = registry.instrument(provider)

        def switch_off() -> None:
            undo()
            exporter.clear()

        return switch_off

    return switch_on


def deep_list(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


def small_dicts() -> list[dict[str, Any]]:
    return [{"id": i, "name": f"row {i}", "ok": i % 2 == 0} for i in range(500_000)]


def run_code_output(value: Any) -> ToolRegistry:
    """A tool with run_code's output declaration: its schema, content and meta."""
    registry = ToolRegistry()

    async def body(args: Any, ctx: Any) -> Any:
        return {"logs": [], "result": value}

    run_code = ToolRegistry(mode="code").get("run_code")
    assert run_code is not None
    registry.register(dataclasses.replace(
        run_code, name="big", execute=body, validator=None, parse_args=None))
    return registry


def typed_tool(value: Any, returns: Any) -> ToolRegistry:
    """A typed tool: pydantic dumps the value, ``default_render`` renders it."""
    registry = ToolRegistry()

    async def big() -> Any:
        """Return the big value."""
        return value

    big.__annotations__["return"] = returns
    registry.register(define_tool(big))
    return registry


LARGE_VALUES: dict[str, Callable[[], ToolRegistry]] = {
    "[0] * 5_000_000": lambda: run_code_output([0] * 5_000_000),
    "500,000 small dicts": lambda: run_code_output(small_dicts()),
    "200,000-level nested list": lambda: run_code_output(deep_list(200_000)),
    "typed -> list[int], 5,000,000": lambda: typed_tool([0] * 5_000_000, list[int]),
    "typed -> list[dict], 500,000": lambda: typed_tool(small_dicts(), list[dict[str, Any]]),
}


class GcPauses:
    """The longest garbage collection while the ``with`` block runs, on any thread: a
    full collection holds the GIL for as long as it takes, which no chunking can split."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._started: dict[int, float] = {}

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._note)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._note)

    def _note(self, phase: str, info: dict[str, int]) -> None:
        now, thread = time.perf_counter(), threading.get_ident()
        if phase == "start":
            self._started[thread] = now
        elif thread in self._started:
            self.worst = max(self.worst, now - self._started.pop(thread))


async def large_values(rounds: int) -> None:
    print(f"large values through execute (run_code's output declaration, or a typed "
          f"tool), median of {rounds} rounds")
    for name, build in LARGE_VALUES.items():
        registry = build()  # the value is built before the clock starts
        totals: list[float] = []
        stalls: list[float] = []
        pauses: list[float] = []
        for _ in range(rounds):
            with GcPauses() as gc_pauses:
                async with LoopLag() as lag:
                    start = time.perf_counter()
                    result = await registry.execute(ToolCall(call_id="c", name="big",
                                                             arguments={}))
                    totals.append(time.perf_counter() - start)
                    await asyncio.sleep(0.02)  # the sampler notes a stall once it wakes
            assert not result.is_error, result.text[:500]
            stalls.append(lag.worst)
            pauses.append(gc_pauses.worst)
            del result  # freed outside the measurement
        print(f"  {name:30s} {statistics.median(totals):8.2f} s total   "
              f"{statistics.median(stalls) * 1000:8.1f} ms longest stall   "
              f"({statistics.median(pauses) * 1000:.0f} ms longest GC pause)")
    print("goal: longest event-loop stall <= 50 ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--large-rounds", type=int, default=3,
                        help="rounds per large value (0 skips them)")
    parser.add_argument("--sub-calls", type=int, default=2000,
                        help="sequential sub-calls per program (0 skips them)")
    options = parser.parse_args()
    asyncio.run(main(options.calls, options.rounds))
    if options.sub_calls:
        asyncio.run(sub_calls(options.sub_calls, options.rounds))
    if options.large_rounds:
        asyncio.run(large_values(options.large_rounds))
