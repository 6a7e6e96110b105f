"""This checkout against an earlier commit, side by side: a cold kernel from the fork server
(confined where Linux allows it), a warm run_code and fresh-kernel runs/s, each tree measured
in turn (alternating, so load on the machine falls on both).

    python bench/compare.py --against 6ad1616 [--rounds 2] [--quick]

The earlier commit is checked out with ``git worktree`` into a temporary directory and
imported from there (``PYTHONPATH`` puts it before this venv's editable install); both
use this venv's packages. Each round also times the floor (``python -c pass``), which the
cold start is given against. Prints each round's figures and the medians (of the rounds'
medians). ``--quick``: fewer samples in each round. Needs a git checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from floor import python_floor

ROOT = Path(__file__).resolve().parents[1]

MEASURE = """\
import asyncio, json, statistics, sys, time
import zmq.asyncio
import dsh_jupyter
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.kernel.confine.caps import RuntimeCgroups
from dsh_jupyter.kernel.confine.sandbox import SandboxConfig, confinement_problem
from dsh_jupyter.kernel.launch.forkserver import ForkLauncher
from dsh_jupyter.kernel.run.workspace import Workspace, create_runtime_directory, remove_tree
from dsh_jupyter.kernel.transport.connection import KernelConnection
from dsh_jupyter.runtime import FunctionBindings, RunRequest

RUNS, WARM, COLD = (int(x) for x in sys.argv[1:4])

PROGRAM = "return await tools.echo({'x': 1})"

async def echo(args):
    return args

def request():
    return RunRequest(PROGRAM, FunctionBindings({"echo": echo}))

async def runs_per_second(runs):
    async with KernelRuntime(KernelRuntimeConfig(pool_size=2)) as runtime:
        await runtime._pool.wait_filled()
        queue = list(range(runs))
        async def worker():
            while queue:
                queue.pop()
                result = await runtime.run(request())
                assert result.failure is None, result.failure
        started = time.perf_counter()
        await asyncio.gather(worker(), worker())
        return runs / (time.perf_counter() - started)

async def warm_ms(samples):
    times = []
    async with KernelRuntime(KernelRuntimeConfig(pool_size=1)) as runtime:
        for _ in range(samples):
            while runtime._pool.ready_count < 1:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)  # the previous kernel's teardown is over
            started = time.perf_counter()
            result = await runtime.run(request())
            times.append(time.perf_counter() - started)
            assert result.failure is None, result.failure
    return statistics.median(times) * 1000

async def cold_ms(samples):
    # start -> kernel_info answered with iopub subscribed, as bench/kernel.py's ready_time
    sandbox = None if confinement_problem() else SandboxConfig()
    config = KernelRuntimeConfig(sandbox=sandbox)
    context = zmq.asyncio.Context()
    directory = create_runtime_directory()
    cgroups = RuntimeCgroups.open(None) if sandbox is not None else None
    launcher = ForkLauncher(config, directory, sandbox, cgroups)
    await launcher.server()
    times = []
    try:
        for _ in range(samples):
            workspace = Workspace.create(directory, confined=sandbox is not None)
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
    finally:
        await launcher.close()
        context.destroy(linger=0)
        remove_tree(directory)
        if cgroups is not None:
            cgroups.remove()
    return statistics.median(times) * 1000, sandbox is not None

async def main():
    cold, confined = await cold_ms(COLD)
    figures = {"cold_ms": cold, "confined": confined,
               "runs_per_s": await runs_per_second(RUNS), "warm_ms": await warm_ms(WARM)}
    print(json.dumps({"package": dsh_jupyter.__file__, **figures}))

asyncio.run(main())
"""


def floor_ms(samples: int) -> float:
    """``python -c pass``, the floor a cold start is measured against (median, ms)."""
    return python_floor(samples) * 1000


def measure(tree: Path, samples: tuple[int, int, int]) -> dict[str, float]:
    """One round's figures for the package in ``tree``: ``samples`` is (runs for runs/s,
    warm runs, cold starts)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", MEASURE, *map(str, samples)], env=env,
                          cwd=tree, capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures.pop("package").startswith(str(tree)), f"{tree} was not the one imported"
    return {key: float(value) for key, value in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="the earlier commit (any git rev)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="fewer samples in each round")
    options = parser.parse_args()
    samples = (30, 8, 8) if options.quick else (60, 15, 15)
    floors: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dsh-compare-") as directory:
        earlier = Path(directory) / "earlier"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach",
                        str(earlier), options.against], check=True)
        try:
            trees = {options.against: earlier, "this checkout": ROOT}
            results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            for round_ in range(options.rounds):
                floors.append(floor_ms(samples[2]))
                print(f"round {round_ + 1}: floor (python -c pass) {floors[-1]:6.2f} ms")
                for name, tree in trees.items():
                    figures = measure(tree, samples)
                    results[name].append(figures)
                    print(f"round {round_ + 1}, {name:>14}: {row(figures)}")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(earlier)], check=False)
    floor = statistics.median(floors)
    print(f"medians (floor {floor:.2f} ms):")
    for name, rounds in results.items():
        figures = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        print(f"  {name:>14}: {row(figures)} ({figures['cold_ms'] / floor:.2f}x floor)")


def row(figures: dict[str, float]) -> str:
    mode = "confined" if figures["confined"] else "unconfined"
    return (f"{figures['cold_ms']:6.2f} ms cold fork kernel ({mode}), {figures['warm_ms']:6.2f} "
            f"ms warm run_code, {figures['runs_per_s']:5.1f} fresh runs/s (pool 2)")


if __name__ == "__main__":
    main()
