"""The floor every cold figure is given against: ``python -c pass`` (standard library
only, so that ``compare.py`` can time it without importing the package it compares)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def python_floor(samples: int) -> float:
    """The median of ``samples`` runs of ``python -c pass``, in seconds."""
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)
