"""Configuration of opt-in stateful runs (see ``stateful``): a separate module because
:class:`~.config.KernelRuntimeConfig` holds one and ``stateful`` needs the kernel modules."""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StatefulConfig:
    """Opt-in stateful runs: one kept kernel per conversation (``docs/stateful-runs.md``).

    - ``idle_seconds``: a session whose last run ended this long ago is closed.
    - ``max_sessions``: sessions open at once (each holds a kernel).
    - ``max_runs``: runs one session's kernel may serve (``None``: no limit).
    - ``total_compute_seconds``: CPU one session's kernel may use in all (``None``: no
      limit; local kernels only, as the per-run compute budget).
    """

    idle_seconds: float = 900.0
    max_sessions: int = 4
    max_runs: int | None = None
    total_compute_seconds: float | None = None

    def __post_init__(self) -> None:
        _positive("idle_seconds", self.idle_seconds)
        _count("max_sessions", self.max_sessions)
        if self.max_runs is not None:
            _count("max_runs", self.max_runs)
        if self.total_compute_seconds is not None:
            _positive("total_compute_seconds", self.total_compute_seconds)


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, not {value!r}")


def _count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, not {value!r}")
