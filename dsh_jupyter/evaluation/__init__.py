"""Evaluation: run a task set through native and code mode and measure the difference.

::

    from dsh_jupyter.evaluation import load_task_set, run_evaluation, write_results

    evaluation = await run_evaluation(load_task_set(), modes=["native", "code"])
    write_results(evaluation, "evaluation-results")   # results.jsonl, summary.json

``notebooks/evaluation.ipynb`` wraps this for papermill, and ``dsh-jupyter eval``
runs that notebook; see ``docs/evaluation.md``. Importing this package starts
nothing and imports neither papermill nor matplotlib.
"""

from .checks import Check, CheckOutcome, run_checks
from .results import (
    Evaluation,
    ModeSummary,
    ResultFiles,
    TaskRecord,
    read_records,
    read_summary,
    summarise,
    write_results,
)
from .runner import ModelFactory, progress_line, run_evaluation, run_task, scripted_model
from .tasks import SHIPPED_TASKS, Task, TaskSet, TaskSetError, load_task_set
from .world import World, WorldData, world_registry

__all__ = [
    "Check",
    "CheckOutcome",
    "Evaluation",
    "ModeSummary",
    "ModelFactory",
    "ResultFiles",
    "SHIPPED_TASKS",
    "Task",
    "TaskRecord",
    "TaskSet",
    "TaskSetError",
    "World",
    "WorldData",
    "load_task_set",
    "progress_line",
    "read_records",
    "read_summary",
    "run_checks",
    "run_evaluation",
    "run_task",
    "scripted_model",
    "summarise",
    "world_registry",
    "write_results",
]
