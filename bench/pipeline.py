"""Per-call overhead of ``registry.execute`` for a no-op tool.

Prints the median µs per call over several rounds, for: no hooks; one hook per
stage (pre-execute, guard, execute wrapper, post-execute, observer); and a
plain ``await`` of the body as the floor, measured side by side in one run.

    python bench/pipeline.py [--calls 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from dsh_jupyter import ToolCall, ToolRegistry, define_tool


async def noop_body(args: Any, ctx: Any) -> str:
    return "ok"


def make_registry(hooks: bool) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(define_tool(
        name="noop", parameters={"type": "object", "properties": {"x": {"type": "integer"}}},
        output={"schema": {"type": "string"}, "render": lambda a, v: v}, execute=noop_body))
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
             "execute, one hook per stage": with_hooks}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():  # interleaved, so drift hits every case alike
            samples[name].append(await time_calls(fn, calls))
    print(f"python {sys.version.split()[0]}, {calls} calls x {rounds} rounds, median µs/call")
    base = statistics.median(samples["execute, no hooks"])
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"  {name:30s} {median:8.2f} µs   ({median / base:4.2f}x no-hooks)")
    print("goal: execute with no hooks <= 30 µs per call")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    asyncio.run(main(options.calls, options.rounds))
