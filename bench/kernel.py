"""Kernel runtime benchmark: start-up, run_code latency, binding round trips, throughput, memory.

Run from the repository root::

    python bench/kernel.py            # full run (~1-2 minutes)
    python bench/kernel.py --quick    # fewer samples
    python bench/kernel.py --gateway  # plus kernels on a local Kernel Gateway

Every figure is a median over the samples (p90 where shown). The machine is
shared and noisy: compare figures from the same run, not across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import zmq.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsh_jupyter.abort import AbortSignal
from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.kernel.connection import KernelConnection
from dsh_jupyter.kernel.forkserver import ForkLauncher
from dsh_jupyter.kernel.gateway_config import GatewayConfig
from dsh_jupyter.kernel.launch import KernelLauncher, StockLauncher
from dsh_jupyter.kernel.pool import KernelPool
from dsh_jupyter.kernel.workspace import Workspace

NEVER = AbortSignal.never()
GATEWAY_TESTS = Path(__file__).resolve().parents[1] / "tests" / "gateway"


async def echo(args: JsonValue) -> JsonValue:
    return args


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f} ms"


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(label: str, value: str, note: str = "") -> None:
    print(f"  {label:<52} {value:>22}  {note}")


def python_floor(samples: int) -> float:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def ready_times(launcher: KernelLauncher, config: KernelRuntimeConfig,
                      context: zmq.asyncio.Context, samples: int) -> list[float]:
    """Start -> kernel_info answered with iopub subscribed (the kernel can take a cell)."""
    times = []
    for _ in range(samples):
        workspace = Workspace.create()
        try:
            started = time.perf_counter()
            process = await launcher.start(workspace, workspace.environment(config))
            connection = KernelConnection(context, process.connection_info,
                                          max_message_bytes=1 << 24)
            await connection.wait_ready(30)
            times.append(time.perf_counter() - started)
            connection.close()
            await process.kill()
            await process.wait_gone()
        finally:
            workspace.remove()
        await asyncio.sleep(0.05)
    return times


async def timed_runs(runtime: KernelRuntime, program: str, samples: int,
                     before: Callable[[], Awaitable[None]] | None = None) -> list[float]:
    times = []
    for _ in range(samples):
        if before is not None:
            await before()
        started = time.perf_counter()
        result = await runtime.run(program, {"echo": echo}, NEVER)
        times.append(time.perf_counter() - started)
        assert result.failure is None, result.failure
    return times


ROUND_TRIPS = """\
import time
sequential = []
for i in range(200):
    started = time.perf_counter()
    await tools.echo({"i": i})
    sequential.append(time.perf_counter() - started)
gathers = []
for _ in range(20):
    started = time.perf_counter()
    await asyncio.gather(*(tools.echo({"i": i}) for i in range(10)))
    gathers.append(time.perf_counter() - started)
hundreds = []
for _ in range(5):
    started = time.perf_counter()
    for i in range(100):
        await tools.echo({"i": i})
    hundreds.append(time.perf_counter() - started)
return {"sequential": sequential, "gathers": gathers, "hundreds": hundreds}
"""


async def carrier_figures(carrier: str) -> dict[str, list[float]]:
    config = KernelRuntimeConfig(pool_size=0, carrier=carrier)  # type: ignore[arg-type]
    async with KernelRuntime(config) as runtime:
        result = await runtime.run(ROUND_TRIPS, {"echo": echo}, NEVER)
    assert result.failure is None and isinstance(result.value, dict), result.failure
    figures: dict[str, list[float]] = {}
    for key, values in result.value.items():
        assert isinstance(values, list)
        figures[key] = [float(x) for x in values if isinstance(x, int | float)]
    return figures


async def throughput(runs: int, concurrency: int) -> float:
    config = KernelRuntimeConfig(pool_size=concurrency)
    async with KernelRuntime(config) as runtime:
        assert runtime._pool is not None
        await runtime._pool.wait_filled()
        queue = list(range(runs))

        async def worker() -> None:
            while queue:
                queue.pop()
                result = await runtime.run("return await tools.echo({'x': 1})", {"echo": echo},
                                           NEVER)
                assert result.failure is None, result.failure

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return runs / (time.perf_counter() - started)


async def pooled_uss() -> tuple[float, float]:
    async with KernelRuntime(KernelRuntimeConfig(pool_size=1)) as runtime:
        assert runtime._pool is not None
        await runtime._pool.wait_filled()
        await asyncio.sleep(0.5)
        pid = runtime._pool._ready[0].process.root_pid
        assert pid is not None
        uss = psutil.Process(pid).memory_full_info().uss
        server = psutil.Process(pid).parent()
        server_uss = server.memory_full_info().uss if server is not None else 0
    return uss / 2**20, server_uss / 2**20


async def gateway_ready_times(gateway: GatewayConfig, samples: int) -> tuple[list[float],
                                                                          list[float]]:
    """POST /api/kernels -> websocket open -> kernel_info answered; and the DELETE after."""
    from dsh_jupyter.kernel.gateway import GatewayLauncher

    config = KernelRuntimeConfig(gateway=gateway)
    launcher = GatewayLauncher(config)
    ready, deleted = [], []
    try:
        for _ in range(samples):
            workspace = Workspace.create()
            try:
                started = time.perf_counter()
                kernel = await launcher.start(workspace, {})
                await kernel.channels.wait_ready(30)
                ready.append(time.perf_counter() - started)
                started = time.perf_counter()
                await kernel.kill()
                await kernel.wait_gone()
                deleted.append(time.perf_counter() - started)
            finally:
                workspace.remove()
    finally:
        await launcher.close()
    return ready, deleted


async def gateway_figures(n: int) -> None:
    """The same measures on kernels started by a Jupyter Kernel Gateway on 127.0.0.1 (started
    here, rate limit off as docs/remote-kernels.md recommends)."""
    sys.path.insert(0, str(GATEWAY_TESTS))
    from gateway_support import start_gateway  # type: ignore[import-not-found]

    with tempfile.TemporaryDirectory(prefix="dsh-bench-gateway-") as directory:
        local = await asyncio.to_thread(start_gateway, Path(directory), extra_args=(
            "--ZMQChannelsWebsocketConnection.limit_rate=False",))
        try:
            gateway = local.config(liveness_seconds=2.0)
            print("Kernel Gateway on 127.0.0.1 (jupyter-kernelgateway, v1 websocket framing)")
            ready, deleted = await gateway_ready_times(gateway, max(3, n // 3))
            row("cold kernel: POST + websocket + kernel_info", ms(statistics.median(ready)),
                f"p90 {ms(p(ready, 0.9)).strip()}")
            row("kernel delete (background, after the result)", ms(statistics.median(deleted)))
            program = "return await tools.echo({'x': 1})"
            config = KernelRuntimeConfig(pool_size=0, gateway=gateway)
            async with KernelRuntime(config) as runtime:
                cold = await timed_runs(runtime, program, max(3, n // 3))
            row("run_code, fresh kernel, no pool", ms(statistics.median(cold)),
                f"p90 {ms(p(cold, 0.9)).strip()}")
            config = KernelRuntimeConfig(pool_size=1, gateway=gateway)
            async with KernelRuntime(config) as runtime:
                pool = runtime._pool
                assert pool is not None

                async def settle(pool: KernelPool = pool) -> None:
                    while pool.ready_count < 1:  # noqa: ASYNC110  # refills start as runs end
                        await asyncio.sleep(0.01)
                    await asyncio.sleep(0.1)

                warm = await timed_runs(runtime, program, n, settle)
                row("run_code, warm pool (client-side, size 1)", ms(statistics.median(warm)),
                    f"p90 {ms(p(warm, 0.9)).strip()}")
                await settle()
                result = await runtime.run(ROUND_TRIPS, {"echo": echo}, NEVER)
            assert result.failure is None and isinstance(result.value, dict), result.failure
            figures = {key: [float(x) for x in values if isinstance(x, int | float)]
                       for key, values in result.value.items() if isinstance(values, list)}
            seq, gathers, hundreds = (figures["sequential"], figures["gathers"],
                                      figures["hundreds"])
            row("binding round trip p50 / p90",
                f"{statistics.median(seq) * 1000:.3f} / {p(seq, 0.9) * 1000:.3f} ms",
                f"{1 / statistics.median(seq):,.0f} calls/s")
            row("gather of 10 p50 / p90",
                f"{statistics.median(gathers) * 1000:.2f} / {p(gathers, 0.9) * 1000:.2f} ms")
            row("100 sequential calls in one program", ms(statistics.median(hundreds)))
        finally:
            await asyncio.to_thread(local.stop)


async def main(quick: bool, gateway: bool = False) -> None:
    n = 5 if quick else 15
    print(f"dsh-jupyter kernel runtime benchmark ({'quick' if quick else 'full'}: n={n})")
    print(f"  command: {sys.executable} {' '.join(sys.argv)}")
    print(f"  python {sys.version.split()[0]}, {psutil.cpu_count()} CPUs, load "
          f"{', '.join(f'{x:.2f}' for x in psutil.getloadavg())}\n")

    print("Floor")
    row("python -c pass", ms(python_floor(n)))

    print("Cold fresh kernel: start -> ready (kernel_info + iopub)")
    config = KernelRuntimeConfig()
    context = zmq.asyncio.Context()
    stock = await ready_times(StockLauncher(config, context), config, context, max(3, n // 3))
    fork = ForkLauncher(config)
    await fork.server()
    forked = await ready_times(fork, config, context, n)
    await fork.close()
    context.destroy(linger=0)
    row("stock jupyter-client launch", ms(statistics.median(stock)))
    row("fork server", ms(statistics.median(forked)), f"p90 {ms(p(forked, 0.9)).strip()}")

    print("run_code end to end: trivial program, one tool call")
    program = "return await tools.echo({'x': 1})"
    async with KernelRuntime(KernelRuntimeConfig(pool_size=0)) as runtime:
        await runtime.run("return 1", {}, NEVER)  # starts the fork server
        cold = await timed_runs(runtime, program, n)
    row("fresh kernel, no pool (fork server)", ms(statistics.median(cold)),
        f"p90 {ms(p(cold, 0.9)).strip()}")
    for carrier in ("comm", "socket"):
        config = KernelRuntimeConfig(pool_size=1, carrier=carrier)
        async with KernelRuntime(config) as runtime:
            pool = runtime._pool
            assert pool is not None

            async def settle(pool: KernelPool = pool) -> None:
                while pool.ready_count < 1:  # noqa: ASYNC110  # refills start as runs end
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.1)

            warm = await timed_runs(runtime, program, n * 2, settle)
        row(f"warm pool ({carrier})", ms(statistics.median(warm)),
            f"p90 {ms(p(warm, 0.9)).strip()}")

    print("Binding round trip (measured inside the program)")
    for carrier in ("comm", "socket"):
        figures = await carrier_figures(carrier)
        seq, gathers, hundreds = figures["sequential"], figures["gathers"], figures["hundreds"]
        row(f"{carrier}: sequential p50 / p90",
            f"{statistics.median(seq) * 1000:.3f} / {p(seq, 0.9) * 1000:.3f} ms",
            f"{1 / statistics.median(seq):,.0f} calls/s")
        row(f"{carrier}: gather of 10 p50 / p90",
            f"{statistics.median(gathers) * 1000:.2f} / {p(gathers, 0.9) * 1000:.2f} ms")
        row(f"{carrier}: 100 sequential calls in one program", ms(statistics.median(hundreds)))

    print("Throughput and memory")
    for concurrency in (2, 4):
        rate = await throughput(n * 4, concurrency)
        row(f"sustained fresh-kernel runs/s (pool {concurrency}, {concurrency} at once)",
            f"{rate:8.1f} /s")
    uss, server_uss = await pooled_uss()
    row("USS of one idle pooled kernel", f"{uss:8.1f} MiB", f"(fork server: {server_uss:.1f} MiB)")

    if gateway:
        await gateway_figures(n)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--gateway", action="store_true",
                        help="also measure kernels on a local Jupyter Kernel Gateway")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.quick, arguments.gateway))
