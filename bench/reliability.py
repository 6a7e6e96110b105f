"""Reliability suite: faults, a hostile-kernel fuzzer, soak runs and the sandbox, with figures.

Run from the repository root::

    python bench/reliability.py            # long run: the figures in docs/reliability.md
    python bench/reliability.py --short    # the CI run (a few minutes)

It runs ``pytest tests/reliability`` at the chosen scale (``DSH_RELIABILITY_SCALE``),
collects the figures the tests record, and prints them with a summary table. Extra
arguments after ``--`` go to pytest (``-- -k soak``). The exit status is pytest's, or 1
when pytest passed but a leak was counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path
from typing import Any

from dsh_jupyter.runtime import RunRequest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GROUPS = {
    "test_faults.py": "faults (kernel deaths, floods, daemons, never ready)",
    "test_cancellation.py": "host-side cancellation at each point",
    "test_fuzz.py": "hostile-kernel fuzzing",
    "test_soak.py": "soak (sequential, 4 at a time)",
    "test_sandbox.py": "resource limits; confined kernels under faults",
}
FIGURES = ("faults survived", "fuzz programs", "messages fuzzed", "runs soaked", "leaks found")


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def outcomes(junit: Path) -> dict[str, Counter[str]]:
    """Per test file: passed / failed / skipped counts and seconds, from pytest's junit XML."""
    by_file: dict[str, Counter[str]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        name = Path(case.get("file") or case.get("classname", "").replace(".", "/")).name
        name = name if name.endswith(".py") else name + ".py"
        counts = by_file.setdefault(name, Counter())
        if case.find("skipped") is not None:
            counts["skipped"] += 1
        elif case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
        else:
            counts["passed"] += 1
        counts["ms"] += int(float(case.get("time", "0")) * 1000)
    return by_file


def sandbox_rows() -> list[tuple[str, str]]:
    from dsh_jupyter.kernel.confine.sandbox import confinement_problem

    problem = confinement_problem()
    confined = "yes" if problem is None else f"no ({problem})"
    return [("cpu_seconds (RLIMIT_CPU)", "yes"), ("memory_bytes / open_files (rlimits)", "yes"),
            ("confinement, the default (user, mount, IPC, PID, network namespaces)", confined)]


STARTUP_SAMPLES = 5


async def startup_costs(samples: int = STARTUP_SAMPLES) -> list[tuple[str, float]]:
    """Median seconds of a trivial run on a fresh kernel (no pool) per launch and sandbox."""
    from bench.kernel import timed_runs
    from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
    from dsh_jupyter.kernel.confine.sandbox import SandboxConfig
    from dsh_jupyter.runtime import FunctionBindings

    configs: list[tuple[str, dict[str, Any]]] = [
        ("fork server, confined (the default)", {"launcher": "fork"}),
        ("fork server, confined + cpu_seconds", {"sandbox": SandboxConfig(cpu_seconds=60)}),
        ("fork server, unconfined", {"launcher": "fork", "sandbox": None}),
        ("stock, confined", {"launcher": "stock"}),
        ("stock, unconfined", {"launcher": "stock", "sandbox": None})]
    rows = []
    for label, options in configs:
        async with KernelRuntime(KernelRuntimeConfig(pool_size=0, **options)) as runtime:
            await runtime.run(RunRequest("return 1", FunctionBindings({})))  # warm (fork server up)
            rows.append((label, statistics.median(await timed_runs(runtime, "return 1", samples))))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--short", action="store_true", help="the CI size (default: long)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    options = parser.parse_args()
    scale = "short" if options.short else "long"
    print(f"dsh-jupyter reliability suite ({scale})")
    print(f"  command: {sys.executable} {' '.join(sys.argv)}")
    print(f"  python {platform.python_version()}, {os.cpu_count()} CPUs, load {load()}")
    with tempfile.TemporaryDirectory(prefix="dsh-reliability-") as scratch:
        figures_path, junit = Path(scratch) / "figures.json", Path(scratch) / "junit.xml"
        env = {**os.environ, "DSH_RELIABILITY_SCALE": scale,
               "DSH_RELIABILITY_FIGURES": str(figures_path)}
        command = [sys.executable, "-m", "pytest", str(ROOT / "tests" / "reliability"), "-q",
                   "-p", "no:cacheprovider", f"--junitxml={junit}", *options.pytest_args]
        started = time.perf_counter()
        status = subprocess.run(command, env=env, cwd=ROOT, check=False).returncode
        seconds = time.perf_counter() - started
        data = json.loads(figures_path.read_text()) if figures_path.exists() else {}
        by_file = outcomes(junit) if junit.exists() else {}

    counts, notes = data.get("counts", {}), data.get("notes", {})
    print(f"\nSummary ({scale}, {seconds:.0f} s, load now {load()})")
    print(f"  {'group':<56} {'passed':>7} {'failed':>7} {'skipped':>8} {'seconds':>8}")
    for name, label in GROUPS.items():
        row = by_file.get(name, Counter())
        print(f"  {label:<56} {row['passed']:>7} {row['failed']:>7} {row['skipped']:>8} "
              f"{row['ms'] / 1000:>8.1f}")
    print("\nFigures")
    for name in FIGURES:
        print(f"  {name:<64} {counts.get(name, 0):>8,}")
    for name, value in sorted(notes.items()):
        print(f"  {name:<64} {value:>8}")
    print("\nLimits and confinement on this machine")
    for option, available in sandbox_rows():
        print(f"  {option:<56} {available}")
    print(f"\nA trivial run on a fresh kernel, no pool (median of {STARTUP_SAMPLES})")
    for label, seconds_taken in asyncio.run(startup_costs()):
        print(f"  {label:<56} {seconds_taken * 1000:>9.0f} ms")
    leaks = counts.get("leaks found", 0)
    print(f"\n{'FAIL' if status or leaks else 'PASS'}: pytest exit status {status}, "
          f"{leaks} leaks found")
    return status or int(leaks > 0)


if __name__ == "__main__":
    sys.exit(main())
