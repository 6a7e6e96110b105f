"""The shipped task sets' tools over a fresh world, as ``MODULE:ATTR`` for the CLI.

An evaluation run's session log (``run_evaluation(session_dir=...)``, ``dsh-jupyter
eval`` writes them to ``<output>/sessions/``) exported to a notebook re-runs its
programs against the same tools, in a fresh copy of the same starting world::

    dsh-jupyter export sessions/busiest-day.code.0.jsonl -o busiest-day.ipynb \\
        --tools dsh_jupyter.evaluation.fresh:office

A world is built per call, so each notebook (each run of it) starts from the task
set's starting state; the registry is native, and the notebook's setup gives it the
session's mode and a kernel runtime.
"""

from __future__ import annotations

from ..registry import ToolRegistry
from .tasks import load_task_set
from .world import World

__all__ = ["office", "shop", "task_set_tools"]


def task_set_tools(spec: str) -> ToolRegistry:
    """The tools of task set ``spec`` (as :func:`~.tasks.load_task_set` names it) over a
    fresh copy of its world."""
    task_set = load_task_set(spec)
    return task_set.tools(World.fresh(task_set.world))


def office() -> ToolRegistry:
    """The ``office`` set's 31 tools over a fresh office world."""
    return task_set_tools("office")


def shop() -> ToolRegistry:
    """The ``shop`` set's six tools over a fresh shop world."""
    return task_set_tools("shop")
