"""``registry.execute`` of a no-op tool on another git revision and on this checkout,
side by side: did a change make the plain call path slower?

Checks the base revision out into a temporary worktree, then alternates child
processes (base, this checkout, base, ...) that each time ``--calls`` executes per round
and print the median CPU µs per call of ``--rounds`` rounds; prints both medians over
``--pairs`` pairs and their ratio. CPU time of the child, not wall time: on a shared
machine the neighbours inflate wall time far more. Tracing is off on both sides (this
is the "costs nothing when off" check for ``registry.instrument``).

    python bench/revisions.py --base 3fc6385 [--pairs 7] [--calls 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import asyncio, statistics, time
from dsh_jupyter import ToolCall, ToolRegistry

async def main(calls, rounds):
    registry = ToolRegistry()

    @registry.tool
    async def noop(x: int = 0) -> str:
        '''Does nothing.'''
        return "ok"

    args = {"x": 1}
    for _ in range(200):  # warm up
        await registry.execute(ToolCall(call_id="c", name="noop", arguments=args))
    samples = []
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(calls):
            await registry.execute(ToolCall(call_id="c", name="noop", arguments=args))
        samples.append((time.process_time() - started) / calls * 1e6)
    print(statistics.median(samples))

asyncio.run(main(CALLS, ROUNDS))
"""


def measure(tree: Path, calls: int, rounds: int) -> float:
    code = CHILD.replace("CALLS", str(calls)).replace("ROUNDS", str(rounds))
    done = subprocess.run([sys.executable, "-c", code],
                          cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=True)
    return float(done.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare with")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base),
                        options.base], check=True)
        try:
            samples: dict[str, list[float]] = {"base": [], "this": []}
            for _ in range(options.pairs):
                samples["base"].append(measure(base, options.calls, options.rounds))
                samples["this"].append(measure(ROOT, options.calls, options.rounds))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(base)], check=False)
    before, now = (statistics.median(samples[side]) for side in ("base", "this"))
    print(f"execute, no hooks, tracing off: {options.pairs} pairs of {options.rounds} x "
          f"{options.calls} calls, median CPU µs/call")
    print(f"  {options.base:>12s} {before:7.2f} µs   "
          f"({' '.join(f'{v:.1f}' for v in samples['base'])})")
    print(f"  {'this':>12s} {now:7.2f} µs   "
          f"({' '.join(f'{v:.1f}' for v in samples['this'])})")
    print(f"  ratio {now / before:.3f} (goal: within 5%, <= 1.05)")


if __name__ == "__main__":
    main()
