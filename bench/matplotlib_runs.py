"""matplotlib in fresh kernels: ``import matplotlib.pyplot`` and a whole plotting run, with
matplotlib's font list seeded into each kernel's HOME (what the runtime does) against
without it (every kernel scans the fonts again, as it did before).

Run from the repository root::

    python bench/matplotlib_runs.py          # 9 rounds (~3 minutes)
    python bench/matplotlib_runs.py --quick  # 3 rounds

Each round enters a fresh runtime per variant (alternating), waits for its pooled
kernel, then times a trivial run and a run that imports pyplot and plots without
``show()`` (the figure is shown when the program ends). Medians; the machine is
shared and noisy, so compare the two variants of the same run, not across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.kernel.run import fontcache
from dsh_jupyter.runtime import FunctionBindings, RunRequest

PLOT = """\
import time
started = time.perf_counter()
import matplotlib.pyplot as plt
imported = time.perf_counter()
plt.plot([1, 2, 3])
return imported - started
"""
SEED = fontcache.seed_font_cache


def _no_seed(_seed_home: Path, *, build: bool = True, source: Path | None = None) -> list[Path]:
    return []


async def _round(seeded: bool) -> tuple[float, float, float]:
    """Seconds: the import inside the kernel, the plotting run, a trivial run."""
    fontcache.seed_font_cache = SEED if seeded else _no_seed  # type: ignore[assignment]
    try:
        async with KernelRuntime(KernelRuntimeConfig(pool_size=1)) as runtime:
            await asyncio.sleep(1.5)  # the pooled kernel is ready
            started = time.perf_counter()
            trivial = await runtime.run(RunRequest("return 1", FunctionBindings({})))
            trivial_seconds = time.perf_counter() - started
            await asyncio.sleep(1.5)  # refilled
            started = time.perf_counter()
            plot = await runtime.run(RunRequest(PLOT, FunctionBindings({})))
            plot_seconds = time.perf_counter() - started
    finally:
        fontcache.seed_font_cache = SEED
    if trivial.failure is not None or plot.failure is not None or len(plot.displays) != 1:
        raise SystemExit(f"a run failed: {trivial.failure or plot.failure or plot.displays}")
    assert isinstance(plot.value, float)
    return plot.value, plot_seconds, trivial_seconds


async def main(rounds: int) -> None:
    found: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    for _ in range(rounds):
        for seeded in (False, True):
            found[seeded].append(await _round(seeded))
    for seeded, rows in found.items():
        imports, plots, trivials = zip(*rows, strict=True)
        print(f"font list {'seeded    ' if seeded else 'not seeded'}: "
              f"import matplotlib.pyplot {statistics.median(imports) * 1000:.0f} ms; "
              f"plotting run {statistics.median(plots) * 1000:.0f} ms; "
              f"trivial run {statistics.median(trivials) * 1000:.0f} ms (n={len(rows)})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 9")
    asyncio.run(main(3 if parser.parse_args().quick else 9))
