"""Kernel runtime benchmark: start-up, run_code latency, binding round trips, throughput, memory;
confined (the default where Linux allows it) against unconfined (``sandbox=None``), side by side.

Run from the repository root::

    python bench/kernel.py            # full run (~1-2 minutes)
    python bench/kernel.py --quick    # fewer samples
    python bench/kernel.py --gateway  # plus kernels on a local Kernel Gateway
    python bench/kernel.py --breakdown  # where a warm run and a call's round trip go
                                        # (bench/breakdown.py)

Every figure is a median over the samples (p90 where shown). The machine is
shared and noisy: compare figures from the same run, not across runs. The same run measures
a stock ipykernel comm's round trip beside ours and, when it is installed, pydantic-monty
(bench/peers.py), and ends with issue [3/5]'s goals, each with its figure from this run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import zmq.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cold import close_launchers, cold_start
from floor import python_floor
from peers import MONTY_INSTALL, monty_figures, monty_version, stock_comm_figures

from dsh_jupyter.abort import AbortSignal
from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig, StatefulConfig
from dsh_jupyter.kernel.confine.caps import RuntimeCgroups
from dsh_jupyter.kernel.confine.sandbox import SandboxConfig, confinement_problem
from dsh_jupyter.kernel.gateway_config import GatewayConfig
from dsh_jupyter.kernel.launch.base import KernelLauncher
from dsh_jupyter.kernel.launch.forkserver import ForkLauncher
from dsh_jupyter.kernel.launch.stock import StockLauncher
from dsh_jupyter.kernel.run.pool import KernelPool
from dsh_jupyter.kernel.run.workspace import Workspace, create_runtime_directory, remove_tree
from dsh_jupyter.runtime import FunctionBindings, RunRequest

NEVER = AbortSignal.never()
TESTS = Path(__file__).resolve().parents[1] / "tests"


async def echo(args: JsonValue) -> JsonValue:
    return args


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f} ms"


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(label: str, value: str, note: str = "") -> None:
    print(f"  {label:<52} {value:>22}  {note}")


def modes() -> dict[str, SandboxConfig | None]:
    """The sandbox settings to compare: unconfined always, confined where it works here."""
    found: dict[str, SandboxConfig | None] = {"unconfined": None}
    if confinement_problem() is None:
        found["confined"] = SandboxConfig()
    return found


async def ready_time(launcher: KernelLauncher, config: KernelRuntimeConfig,
                     context: zmq.asyncio.Context, directory: Path) -> float:
    """Start -> ready of one kernel (:func:`cold_start`), in seconds."""
    started, ready = await cold_start(launcher, config, context, directory)
    return ready - started



async def cold_ready(samples: int) -> dict[str, list[float]]:
    """Each launcher confined and unconfined, sampled in alternation so that load on the
    machine falls on all of them alike."""
    context = zmq.asyncio.Context()
    directory = create_runtime_directory()
    launchers: dict[str, tuple[KernelLauncher, KernelRuntimeConfig]] = {}
    cgroups = RuntimeCgroups.open(None)
    for mode, sandbox in modes().items():
        config = KernelRuntimeConfig(sandbox=sandbox)
        mine = cgroups if sandbox is not None else None
        launchers[f"stock, {mode}"] = (StockLauncher(config, context, sandbox, mine), config)
        fork = ForkLauncher(config, directory, sandbox, mine)
        await fork.server()
        launchers[f"fork server, {mode}"] = (fork, config)
    times: dict[str, list[float]] = {name: [] for name in launchers}
    try:
        for sample in range(samples):
            for name, (launcher, config) in launchers.items():
                if name.startswith("stock") and sample % 3:
                    continue  # stock launches are slow: a third of the samples
                times[name].append(await ready_time(launcher, config, context, directory))
    finally:
        await close_launchers((launcher for launcher, _ in launchers.values()), context,
                              directory, cgroups)
    return times


@contextlib.contextmanager
def walls(kept: int, launcher: ForkLauncher) -> Iterator[None]:
    """Turn off the walls past the first ``kept`` of (syscall filter, Landlock, cgroups),
    for measuring what each costs (the plan is built in this process)."""
    from dsh_jupyter.kernel.confine import plan

    names = ((plan, "build_filter"), (plan, "landlock_abi"), (launcher, "_cgroups"))
    saved = [getattr(owner, name) for owner, name in names]
    off = (lambda: "off for the benchmark", lambda: 0, None)
    for (owner, name), replacement in list(zip(names, off, strict=True))[kept:]:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for (owner, name), value in zip(names, saved, strict=True):
            setattr(owner, name, value)


WALLS = ("namespaces, masked /proc, nobody", "+ syscall filter", "+ Landlock",
         "+ cgroups (every wall)")


async def walls_cost(samples: int) -> dict[str, list[float]]:
    """Cold confined fork starts with the walls added one by one, and unconfined, sampled
    in alternation."""
    context = zmq.asyncio.Context()
    directory = create_runtime_directory()
    confined = KernelRuntimeConfig()
    unconfined = KernelRuntimeConfig(sandbox=None)
    cgroups = RuntimeCgroups.open(None)
    fork = ForkLauncher(confined, directory, confined.confinement, cgroups)
    plain = ForkLauncher(unconfined, directory, None)
    await fork.server()
    await plain.server()
    times: dict[str, list[float]] = {name: [] for name in (*WALLS, "unconfined")}
    try:
        for _ in range(samples):
            for kept, name in enumerate(WALLS):
                with walls(kept, fork):
                    times[name].append(await ready_time(fork, confined, context, directory))
            times["unconfined"].append(await ready_time(plain, unconfined, context, directory))
    finally:
        await fork.close()
        await plain.close()
        context.destroy(linger=0)
        remove_tree(directory)
        if cgroups is not None:
            cgroups.remove()
    return times


async def timed_runs(runtime: KernelRuntime, program: str, samples: int,
                     before: Callable[[], Awaitable[None]] | None = None,
                     session: str | None = None) -> list[float]:
    times = []
    for _ in range(samples):
        if before is not None:
            await before()
        started = time.perf_counter()
        result = await runtime.run(
            RunRequest(program, FunctionBindings({"echo": echo}), session=session))
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
        result = await runtime.run(RunRequest(ROUND_TRIPS, FunctionBindings({"echo": echo})))
    assert result.failure is None and isinstance(result.value, dict), result.failure
    figures: dict[str, list[float]] = {}
    for key, values in result.value.items():
        assert isinstance(values, list)
        figures[key] = [float(x) for x in values if isinstance(x, int | float)]
    return figures


async def round_trips(rounds: int) -> dict[str, dict[str, list[float]]]:
    """Our carriers' round trips and a stock ipykernel comm's (bench/peers.py), measured in
    alternation so that load on the machine falls on all of them alike."""
    found: dict[str, dict[str, list[float]]] = {"comm": {}, "socket": {}, "stock comm": {}}
    for _ in range(rounds):
        for name, samples in found.items():
            figures = (await stock_comm_figures() if name == "stock comm"
                       else await carrier_figures(name))
            for key, values in figures.items():
                samples.setdefault(key, []).extend(values)
    return found


async def throughput(runs: int, concurrency: int, sandbox: SandboxConfig | None) -> float:
    config = KernelRuntimeConfig(pool_size=concurrency, sandbox=sandbox)
    async with KernelRuntime(config) as runtime:
        assert runtime._pool is not None
        await runtime._pool.wait_filled()
        queue = list(range(runs))

        async def worker() -> None:
            while queue:
                queue.pop()
                result = await runtime.run(RunRequest("return await tools.echo({'x': 1})",
                                           FunctionBindings({"echo": echo})))
                assert result.failure is None, result.failure

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return runs / (time.perf_counter() - started)


async def pooled_uss(sandbox: SandboxConfig | None) -> tuple[float, float]:
    """USS of one idle pooled kernel's whole tree (confined: the waiter outside, the
    namespace's init and the kernel), and of the fork server."""
    async with KernelRuntime(KernelRuntimeConfig(pool_size=1, sandbox=sandbox)) as runtime:
        assert runtime._pool is not None
        await runtime._pool.wait_filled()
        await asyncio.sleep(0.5)
        pid = runtime._pool._ready[0].process.root_pid
        assert pid is not None
        root = psutil.Process(pid)
        uss = sum(p.memory_full_info().uss for p in [root, *root.children(recursive=True)])
        server = root.parent()
        server_uss = server.memory_full_info().uss if server is not None else 0
    return uss / 2**20, server_uss / 2**20


async def gateway_ready_times(gateway: GatewayConfig, samples: int) -> tuple[list[float],
                                                                          list[float]]:
    """POST /api/kernels -> websocket open -> kernel_info answered; and the DELETE after."""
    from dsh_jupyter.kernel.launch.gateway import GatewayLauncher

    config = KernelRuntimeConfig(gateway=gateway)
    launcher = GatewayLauncher(config)
    ready, deleted = [], []
    directory = create_runtime_directory()
    try:
        for _ in range(samples):
            workspace = Workspace.create(directory)
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
        remove_tree(directory)
    return ready, deleted


async def gateway_figures(n: int) -> None:
    """The same measures on kernels started by a Jupyter Kernel Gateway on 127.0.0.1 (started
    here, rate limit off as docs/remote-kernels.md recommends)."""
    # gateway_support, and the runtime_support it imports
    sys.path[:0] = [str(TESTS / "integration" / "gateway"), str(TESTS / "support")]
    from gateway_support import start_gateway

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
                result = await runtime.run(
                    RunRequest(ROUND_TRIPS, FunctionBindings({"echo": echo})))
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


def goal(label: str, measured: float | None, limit: float, unit: str, detail: str,
         at_least: bool = False) -> None:
    """One of issue [3/5]'s goals: its figure from this run, the goal, met or not."""
    sign = ">=" if at_least else "<="
    if measured is None:
        row(label, "not measured", f"goal {sign} {limit} {unit}; {detail}")
        return
    met = measured >= limit if at_least else measured <= limit
    row(label, f"{measured:8.2f} {unit}",
        f"{'met' if met else 'NOT met'}: goal {sign} {limit} {unit}; {detail}")


def goals(measured: dict[str, float], floor: float) -> None:
    print(f"Goals (issue [3/5]), figures from this run (floor: python -c pass, "
          f"{ms(floor).strip()})")
    warm = measured.get("warm comm confined")
    goal("warm run_code, one tool call, confined, comm", warm and warm / floor, 0.15,
         "x floor", f"{ms(warm).strip()}" if warm else "confinement unavailable")
    ours, stock = measured.get("round trip comm"), measured.get("round trip stock comm")
    goal("binding round trip over comms / stock comm", ours and stock and ours / stock, 0.5,
         "x", f"{ours * 1000:.3f} / {stock * 1000:.3f} ms" if ours and stock else "")
    hundred = measured["100 sequential comm"]
    goal("100 sequential calls in one program, comm", hundred / floor, 1.8, "x floor",
         ms(hundred).strip())
    cold = measured.get("cold fork confined")
    goal("cold confined kernel, fork server", cold and cold / floor, 1.5, "x floor",
         f"{ms(cold).strip()}" if cold else "confinement unavailable")
    rate = measured.get("runs/s pool 2 confined")
    goal("fresh-kernel runs/s, pool 2, confined", rate, 80, "/s",
         "2 at once" if rate else "confinement unavailable", at_least=True)


def stock_comm_rows(stock: dict[str, list[float]], measured: dict[str, float],
                    floor: float) -> None:
    """The stock comm's round trip, and our carriers' beside it."""
    print("Stock ipykernel comm, same run (a plain python3 kernel, timed inside its cell)")
    seq, hundreds = stock["sequential"], stock["hundreds"]
    measured["round trip stock comm"] = statistics.median(seq)
    row("stock ipykernel comm: sequential p50 / p90",
        f"{statistics.median(seq) * 1000:.3f} / {p(seq, 0.9) * 1000:.3f} ms",
        f"{1 / statistics.median(seq):,.0f} calls/s")
    row("stock ipykernel comm: 100 sequential calls", ms(statistics.median(hundreds)),
        f"{statistics.median(hundreds) / floor:5.2f} x floor")
    for carrier in ("comm", "socket"):
        ratio = measured[f"round trip {carrier}"] / measured["round trip stock comm"]
        row(f"{carrier} round trip p50 / stock comm's", f"{ratio:8.2f} x",
            "(goal for comms: <= 0.5 x)" if carrier == "comm" else "")
        ratio = measured[f"100 sequential {carrier}"] / floor
        row(f"{carrier}: 100 sequential calls / floor", f"{ratio:8.2f} x",
            "(goal for comms: <= 1.8 x)" if carrier == "comm" else "")


async def monty_rows(n: int, measured: dict[str, float]) -> None:
    """pydantic-monty's warm run and calls (bench/peers.py), and ours beside them."""
    version = monty_version()
    if version is None:
        print(f"pydantic-monty: not installed, not measured (install it: {MONTY_INSTALL})")
        return
    print(f"pydantic-monty {version} (AsyncMonty, one warm worker reused across checkouts; "
          "an async echo)")
    monty = await monty_figures(n * 4)
    warm, hundreds = monty["warm"], monty["hundreds"]
    row("monty warm run: checkout + one external call", ms(statistics.median(warm)),
        f"p90 {ms(p(warm, 0.9)).strip()}")
    row("monty: 100 sequential external calls", ms(statistics.median(hundreds)),
        f"{statistics.median(hundreds) / 100 * 1000:.3f} ms a call")
    mode = list(modes())[-1]  # confined where it works: the default
    for carrier in ("comm", "socket"):
        ours = measured[f"warm {carrier} {mode}"]
        row(f"our warm run_code ({carrier}, {mode}) / monty's",
            f"{ours / statistics.median(warm):8.1f} x", f"ours {ms(ours).strip()}")
        ours = measured[f"100 sequential {carrier}"]
        row(f"our 100 sequential calls ({carrier}) / monty's",
            f"{ours / statistics.median(hundreds):8.1f} x")


async def main(quick: bool, gateway: bool = False) -> None:
    n = 5 if quick else 15
    print(f"dsh-jupyter kernel runtime benchmark ({'quick' if quick else 'full'}: n={n})")
    print(f"  command: {sys.executable} {' '.join(sys.argv)}")
    print(f"  python {sys.version.split()[0]}, {psutil.cpu_count()} CPUs, load "
          f"{', '.join(f'{x:.2f}' for x in psutil.getloadavg())}\n")

    print("Floor")
    floor = python_floor(n * 3)
    row("python -c pass", ms(floor))
    # medians (seconds, or runs/s) that the peers' comparisons and the goals read
    measured: dict[str, float] = {}

    problem = confinement_problem()
    print("Cold fresh kernel: start -> ready (kernel_info + iopub)"
          + (f"  [confinement unavailable: {problem}]" if problem else ""))
    ready = await cold_ready(n * 2)
    for name, times in ready.items():
        row(name, ms(statistics.median(times)), f"p90 {ms(p(times, 0.9)).strip()}")
    if "fork server, confined" in ready:
        measured["cold fork confined"] = statistics.median(ready["fork server, confined"])
    for launcher in ("fork server", "stock"):
        if f"{launcher}, confined" in ready:
            ratio = (statistics.median(ready[f"{launcher}, confined"])
                     / statistics.median(ready[f"{launcher}, unconfined"]))
            row(f"{launcher}: confined / unconfined", f"{ratio:8.2f} x",
                "(goal for the fork server: <= 1.5 x)" if launcher == "fork server" else "")

    if not problem:
        print("What each wall costs: cold confined fork start, walls added one by one")
        costs = await walls_cost(n)
        unconfined = statistics.median(costs["unconfined"])
        for name, times in costs.items():
            row(name, ms(statistics.median(times)),
                f"{statistics.median(times) / unconfined:5.2f} x unconfined")

    print("run_code end to end: trivial program, one tool call")
    program = "return await tools.echo({'x': 1})"
    for mode, sandbox in modes().items():
        async with KernelRuntime(KernelRuntimeConfig(pool_size=0, sandbox=sandbox)) as runtime:
            # starts the fork server
            await runtime.run(RunRequest("return 1", FunctionBindings({})))
            cold = await timed_runs(runtime, program, n)
        row(f"fresh kernel, no pool, {mode}", ms(statistics.median(cold)),
            f"p90 {ms(p(cold, 0.9)).strip()}")
    for mode, sandbox in modes().items():
        for carrier in ("comm", "socket"):
            config = KernelRuntimeConfig(pool_size=1, carrier=carrier, sandbox=sandbox)
            async with KernelRuntime(config) as runtime:
                pool = runtime._pool
                assert pool is not None

                async def settle(pool: KernelPool = pool) -> None:
                    while pool.ready_count < 1:  # noqa: ASYNC110  # refills start as runs end
                        await asyncio.sleep(0.01)
                    await asyncio.sleep(0.1)

                warm = await timed_runs(runtime, program, n * 2, settle)
            row(f"warm pool ({carrier}), {mode}", ms(statistics.median(warm)),
                f"p90 {ms(p(warm, 0.9)).strip()}")
            measured[f"warm {carrier} {mode}"] = statistics.median(warm)

    for mode, sandbox in modes().items():
        # A stateful session's later runs reuse its kept kernel (no start, no injection).
        config = KernelRuntimeConfig(pool_size=0, sandbox=sandbox, stateful=StatefulConfig())
        async with KernelRuntime(config) as runtime:
            # starts the fork server
            await runtime.run(RunRequest("return 1", FunctionBindings({})))
            first = await timed_runs(runtime, program, 1, session="bench")
            kept = await timed_runs(runtime, program, n * 2, session="bench")
        row(f"stateful session: next run (kept kernel), {mode}", ms(statistics.median(kept)),
            f"p90 {ms(p(kept, 0.9)).strip()}; its first run {ms(first[0]).strip()}")

    rounds = 2 if quick else 3
    print(f"Binding round trip (measured inside the program; {rounds} kernels each, in "
          "alternation with the stock comm's)")
    found = await round_trips(rounds)
    for carrier in ("comm", "socket"):
        figures = found[carrier]
        seq, gathers, hundreds = figures["sequential"], figures["gathers"], figures["hundreds"]
        row(f"{carrier}: sequential p50 / p90",
            f"{statistics.median(seq) * 1000:.3f} / {p(seq, 0.9) * 1000:.3f} ms",
            f"{1 / statistics.median(seq):,.0f} calls/s")
        row(f"{carrier}: gather of 10 p50 / p90",
            f"{statistics.median(gathers) * 1000:.2f} / {p(gathers, 0.9) * 1000:.2f} ms")
        row(f"{carrier}: 100 sequential calls in one program", ms(statistics.median(hundreds)))
        measured[f"round trip {carrier}"] = statistics.median(seq)
        measured[f"100 sequential {carrier}"] = statistics.median(hundreds)
    stock_comm_rows(found["stock comm"], measured, floor)
    await monty_rows(n, measured)

    print("Throughput and memory")
    for mode, sandbox in modes().items():
        for concurrency in (2, 4):
            rate = await throughput(n * 4, concurrency, sandbox)
            row(f"runs/s, pool {concurrency}, {concurrency} at once, {mode}", f"{rate:8.1f} /s")
            measured[f"runs/s pool {concurrency} {mode}"] = rate
    for mode, sandbox in modes().items():
        uss, server_uss = await pooled_uss(sandbox)
        row(f"USS of one idle pooled kernel, {mode}", f"{uss:8.1f} MiB",
            f"(fork server: {server_uss:.1f} MiB)")

    if gateway:
        await gateway_figures(n)
    goals(measured, floor)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--gateway", action="store_true",
                        help="also measure kernels on a local Jupyter Kernel Gateway")
    parser.add_argument("--breakdown", action="store_true",
                        help="only where a warm run's and a call's time goes (bench/breakdown.py)")
    arguments = parser.parse_args()
    if arguments.breakdown:
        from breakdown import breakdown

        asyncio.run(breakdown(10 if arguments.quick else 30, modes()))
    else:
        asyncio.run(main(arguments.quick, arguments.gateway))
