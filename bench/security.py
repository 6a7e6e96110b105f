"""Hostile programs against the host: event-loop stalls and memory, with figures.

Run from the repository root::

    python bench/security.py            # every scenario, 3 samples each (~2 minutes)
    python bench/security.py --quick    # 1 sample each

Each scenario runs real programs through ``registry.execute(run_code)`` on a real
``KernelRuntime`` in its default configuration, while a task sleeping 5 ms at a time
measures how late the host's event loop wakes it (the longest such stall is what an
innocent run or a notebook's widgets would feel) and a thread samples the host's RSS
every 10 ms (growth is the peak over the RSS before the scenario). Figures are medians
over the samples. Goals (issue [1/7]): longest stall <= 50 ms in every scenario; RSS
growth <= 64 MiB with four 100 MB floods at once.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "kernel"))

from loop_lag import LoopLag  # noqa: E402

from dsh_jupyter import ToolCall, ToolRegistry, ToolResult  # noqa: E402
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig  # noqa: E402

REPLY_FLOOD = """\
import sys
bridge = sys.modules["_dsh_jupyter_inkernel"].runtime.client
for _ in range(100_000):
    asyncio.ensure_future(bridge.call("nope", {}))
await asyncio.sleep(30)
"""
LINE_FLOOD = "line = 'x' * 10_000\nfor _ in range(10_000):\n    print(line)"  # 100 MB
ONE_LINE_FLOOD = "print('x' * 100_000_000)"
BIG_VALUE = "return [0] * 5_000_000"  # 10 MB of JSON, 5 million elements
INNOCENT = """\
for i in range(20):
    assert await tools.echo({"i": i}) == {"i": i}
    await asyncio.sleep(0.05)
return "answered"
"""


class PeakRss:
    """The peak RSS of this process while the ``with`` block runs (a thread samples it)."""

    def __init__(self) -> None:
        self.before = self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakRss:
        gc.collect()
        self.before = self.peak = rss()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss())

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.before) / 2**20


def rss() -> int:
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def registry(runtime: KernelRuntime) -> ToolRegistry:
    created = ToolRegistry(mode="code", code_runtime=runtime)

    @created.tool
    async def echo(i: int) -> dict[str, int]:
        """Echo a number."""
        return {"i": i}

    return created


async def run_code(tools: ToolRegistry, code: str, call_id: str) -> ToolResult:
    return await tools.execute(ToolCall(call_id=call_id, name="run_code",
                                        arguments={"code": code, "description": "bench"}))


def outcome(result: ToolResult) -> str:
    if result.error is None:
        return "ok"
    message = result.error.message
    return message[message.find("(") + 1:message.find(")")] if "(" in message else message


@dataclass
class Sample:
    stall_ms: float
    rss_mib: float
    seconds: float
    outcomes: list[str]


async def measure(work: Callable[[], Awaitable[list[str]]]) -> Sample:
    with PeakRss() as memory:
        async with LoopLag() as lag:
            started = time.perf_counter()
            outcomes = await work()
            seconds = time.perf_counter() - started
    return Sample(lag.worst * 1000, memory.growth_mib, seconds, outcomes)


async def scenarios(runtime: KernelRuntime, bystander: KernelRuntime
                    ) -> dict[str, Callable[[], Awaitable[list[str]]]]:
    tools, innocent = registry(runtime), registry(bystander)

    async def reply_flood() -> list[str]:
        flood = asyncio.ensure_future(run_code(tools, REPLY_FLOOD, "flood"))
        await asyncio.sleep(0.2)
        calm = await run_code(innocent, INNOCENT, "innocent")
        return [outcome(await flood), f"innocent {outcome(calm)}"]

    def floods(code: str) -> Callable[[], Awaitable[list[str]]]:
        async def four() -> list[str]:
            results = await asyncio.gather(*(run_code(tools, code, f"flood{n}")
                                             for n in range(4)))
            return sorted({outcome(result) for result in results})
        return four

    async def big_value() -> list[str]:
        return [outcome(await run_code(tools, BIG_VALUE, "value"))]

    return {
        "100,000 failing calls (+ an innocent run)": reply_flood,
        "four 100 MB floods at once (10 kB lines)": floods(LINE_FLOOD),
        "four 100 MB floods at once (one line)": floods(ONE_LINE_FLOOD),
        "a 10 MB value of 5 million elements": big_value,
    }


async def main(samples: int) -> None:
    print(f"dsh-jupyter security benchmark ({samples} sample(s) per scenario)")
    print(f"  command: {sys.executable} {' '.join(sys.argv)}")
    print(f"  python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    config = KernelRuntimeConfig(pool_size=4, wall_seconds=60)
    async with KernelRuntime(config) as runtime, KernelRuntime(config) as bystander:
        print(f"  kernels confined: {runtime.confined}; max_output_bytes "
              f"{config.max_output_bytes // 2**20} MiB per run\n")
        await run_code(registry(runtime), "return 1", "warm")
        await run_code(registry(bystander), "return 1", "warm")
        print(f"  {'scenario':<46} {'longest stall':>14} {'RSS growth':>11} {'time':>7}  "
              "outcome")
        for name, work in (await scenarios(runtime, bystander)).items():
            taken: list[Sample] = []
            for _ in range(samples):
                await asyncio.sleep(1)  # the pool refills; background cleanups end
                taken.append(await measure(work))
            stall = statistics.median(s.stall_ms for s in taken)
            growth = statistics.median(s.rss_mib for s in taken)
            seconds = statistics.median(s.seconds for s in taken)
            results: Any = sorted({o for s in taken for o in s.outcomes})
            print(f"  {name:<46} {stall:>11.1f} ms {growth:>7.1f} MiB {seconds:>6.1f}s  "
                  f"{', '.join(results)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one sample per scenario")
    arguments = parser.parse_args()
    asyncio.run(main(1 if arguments.quick else 3))
