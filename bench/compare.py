"""This checkout against an earlier commit, side by side: a warm run_code and fresh-kernel
runs/s, each tree measured in turn (alternating, so load on the machine falls on both).

    python bench/compare.py --against 6ad1616 [--rounds 2]

The earlier commit is checked out with ``git worktree`` into a temporary directory and
imported from there (``PYTHONPATH`` puts it before this venv's editable install); both
use this venv's packages. Prints each round's figures and the medians. Needs a git
checkout.
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

ROOT = Path(__file__).resolve().parents[1]

MEASURE = """\
import asyncio, json, statistics, time
import dsh_jupyter
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.runtime import FunctionBindings, RunRequest

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

async def main():
    figures = {"runs_per_s": await runs_per_second(60), "warm_ms": await warm_ms(15)}
    print(json.dumps({"package": dsh_jupyter.__file__, **figures}))

asyncio.run(main())
"""


def measure(tree: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", MEASURE], env=env, cwd=tree, capture_output=True,
                          text=True, check=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures.pop("package").startswith(str(tree)), f"{tree} was not the one imported"
    return {key: float(value) for key, value in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="the earlier commit (any git rev)")
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dsh-compare-") as directory:
        earlier = Path(directory) / "earlier"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach",
                        str(earlier), options.against], check=True)
        try:
            trees = {options.against: earlier, "this checkout": ROOT}
            results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            for round_ in range(options.rounds):
                for name, tree in trees.items():
                    figures = measure(tree)
                    results[name].append(figures)
                    print(f"round {round_ + 1}, {name:>14}: {figures['warm_ms']:6.2f} ms warm "
                          f"run_code, {figures['runs_per_s']:5.1f} fresh runs/s (pool 2)")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(earlier)], check=False)
    print("medians:")
    for name, rounds in results.items():
        warm = statistics.median(r["warm_ms"] for r in rounds)
        rate = statistics.median(r["runs_per_s"] for r in rounds)
        print(f"  {name:>14}: {warm:6.2f} ms warm run_code, {rate:5.1f} runs/s")


if __name__ == "__main__":
    main()
