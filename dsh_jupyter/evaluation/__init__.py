"""Evaluation: run a task set through a model x presentation matrix and measure
correctness and cost.

::

    from dsh_jupyter.evaluation import load_task_set, run_evaluation, write_results

    evaluation = await run_evaluation(load_task_set(), modes=["native", "code", "both"],
                                      models=["scripted"], repeats=3)
    write_results(evaluation, "evaluation-results")   # results.jsonl, summary.json

``notebooks/evaluation.ipynb`` wraps this for papermill, and ``dsh-jupyter eval``
runs that notebook; see ``docs/evaluation.md``. Importing this package starts
nothing and imports neither papermill nor matplotlib.
"""

from .checks import Check, CheckOutcome, run_checks
from .results import (
    CellSummary,
    Evaluation,
    ResultFiles,
    TaskRecord,
    read_records,
    read_summary,
    summarise,
    write_results,
)
from .runner import ModelFactory, progress_line, run_evaluation, run_task, scripted_model
from .stats import pass_at_k, wilson_interval
from .tasks import SHIPPED_SETS, SHIPPED_TASKS, Task, TaskSet, TaskSetError, load_task_set
from .world import ToolWorld, World, WorldData, world_registry

__all__ = [
    "CellSummary",
    "Check",
    "CheckOutcome",
    "Evaluation",
    "ModelFactory",
    "ResultFiles",
    "SHIPPED_SETS",
    "SHIPPED_TASKS",
    "Task",
    "TaskRecord",
    "TaskSet",
    "TaskSetError",
    "ToolWorld",
    "World",
    "WorldData",
    "load_task_set",
    "pass_at_k",
    "progress_line",
    "read_records",
    "read_summary",
    "run_checks",
    "run_evaluation",
    "run_task",
    "scripted_model",
    "summarise",
    "wilson_interval",
    "world_registry",
    "write_results",
]
