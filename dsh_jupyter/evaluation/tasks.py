"""Task sets: a world to work in, tasks with checks, and recorded model responses.

A task file is JSON (see ``data/tasks.json``, the shipped set)::

    {"format": "dsh-jupyter-tasks/1",
     "name": "shop", "description": "...",
     "world": {"files": {"README.md": "..."},              # default: the demo's files
               "database": {"customers": [...], "orders": [...]}},
     "tasks": [{"id": "open-order-total",
                "prompt": "What is the total value of Ada Lovelace's open orders?",
                "checks": [{"kind": "answer_contains", "text": ["559.73"]}],
                "recorded": {"native": "recorded/open-order-total.native.json",
                             "code": "recorded/open-order-total.code.json"}}]}

``recorded`` maps a mode to a script for :class:`~dsh_jupyter.agent.ScriptedModel`
(relative to the task file), what a model answered when it did the task in that
mode; ``dump_script`` writes one from a real run. Checks are described in
:mod:`.checks`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal, NotRequired, TypeAlias

import pydantic
from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from ..demo.tools import SAMPLE_FILES
from .checks import Check
from .world import Customer, Order, WorldData

Mode: TypeAlias = Literal["native", "code", "both"]
MODES: tuple[Mode, ...] = ("native", "code", "both")
TASKS_FORMAT = "dsh-jupyter-tasks/1"
DATA_DIR = Path(__file__).resolve().parent / "data"
SHIPPED_TASKS = DATA_DIR / "tasks.json"
_TASK_ID = re.compile(r"[a-z0-9][a-z0-9_-]*")


class TaskSetError(ValueError):
    """A task file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One task: the prompt a model gets, how to check the outcome, and where the
    recorded responses for each mode are."""

    id: str
    prompt: str
    checks: tuple[Check, ...]
    recorded: Mapping[Mode, Path] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSet:
    name: str
    description: str
    world: WorldData
    tasks: tuple[Task, ...]
    path: Path | None = None

    def task(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(f"no task {task_id!r} in {self.name!r}; tasks: "
                       + ", ".join(t.id for t in self.tasks))

    def select(self, task_ids: Iterable[str]) -> TaskSet:
        """The same set with only ``task_ids``, in the order given."""
        return replace(self, tasks=tuple(self.task(task_id) for task_id in task_ids))


@with_config(ConfigDict(extra="forbid"))
class _DatabaseJson(TypedDict):
    customers: NotRequired[list[Customer]]
    orders: NotRequired[list[Order]]


@with_config(ConfigDict(extra="forbid"))
class _WorldJson(TypedDict):
    files: NotRequired[dict[str, str]]
    database: NotRequired[_DatabaseJson]


@with_config(ConfigDict(extra="forbid"))
class _TaskJson(TypedDict):
    id: str
    prompt: str
    checks: list[Annotated[Check, pydantic.Field(discriminator="kind")]]
    recorded: NotRequired[dict[Mode, str]]


@with_config(ConfigDict(extra="forbid"))
class _TaskFileJson(TypedDict):
    format: Literal["dsh-jupyter-tasks/1"]
    name: str
    description: NotRequired[str]
    world: NotRequired[_WorldJson]
    tasks: list[_TaskJson]


@functools.cache
def _task_file_adapter() -> pydantic.TypeAdapter[_TaskFileJson]:
    return pydantic.TypeAdapter(_TaskFileJson)


def load_task_set(path: str | Path | None = None) -> TaskSet:
    """Load and validate a task file; ``None`` loads the shipped task set."""
    source = Path(path) if path is not None else SHIPPED_TASKS
    try:
        raw = json.loads(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TaskSetError(f"cannot read task file {source}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise TaskSetError(f"{source} is not JSON: {exc}") from None
    return parse_task_set(raw, base=source.parent, path=source)


def parse_task_set(raw: object, *, base: Path, path: Path | None = None) -> TaskSet:
    """A :class:`TaskSet` from parsed JSON; recorded scripts resolve against ``base``."""
    where = str(path) if path is not None else "task set"
    try:
        data = _task_file_adapter().validate_python(raw)
    except pydantic.ValidationError as exc:
        raise TaskSetError(f"{where}: {_describe(exc)}") from None
    world = data.get("world", {})
    database = world.get("database", {})
    customers, orders = database.get("customers", []), database.get("orders", [])
    for table, rows in (("customers", customers), ("orders", orders)):
        ids = [row["id"] for row in rows]
        if len(set(ids)) != len(ids):
            raise TaskSetError(f"{where}: {table} has duplicate ids")
    tasks: list[Task] = []
    for entry in data["tasks"]:
        task_id = entry["id"]
        if not _TASK_ID.fullmatch(task_id):
            raise TaskSetError(f"{where}: task id {task_id!r} must be lowercase letters, "
                               "digits, '-' or '_' (it names files)")
        if any(t.id == task_id for t in tasks):
            raise TaskSetError(f"{where}: task id {task_id!r} appears twice")
        if not entry["checks"]:
            raise TaskSetError(f"{where}: task {task_id!r} has no checks")
        for check in entry["checks"]:
            if check["kind"] == "answer_matches":
                try:
                    re.compile(check["pattern"])
                except re.error as exc:
                    raise TaskSetError(f"{where}: task {task_id!r}: bad pattern "
                                       f"{check['pattern']!r}: {exc}") from None
        recorded: dict[Mode, Path] = {}
        for mode, script in entry.get("recorded", {}).items():
            script_path = (base / script).resolve()
            if not script_path.is_file():
                raise TaskSetError(f"{where}: task {task_id!r}: recorded {mode} responses "
                                   f"{script!r} not found (looked for {script_path})")
            recorded[mode] = script_path
        tasks.append(Task(id=task_id, prompt=entry["prompt"], checks=tuple(entry["checks"]),
                          recorded=recorded))
    if not tasks:
        raise TaskSetError(f"{where}: no tasks")
    return TaskSet(name=data["name"], description=data.get("description", ""),
                   world=WorldData(files=world.get("files", dict(SAMPLE_FILES)),
                                   customers=tuple(customers), orders=tuple(orders)),
                   tasks=tuple(tasks), path=path)


def _describe(error: pydantic.ValidationError) -> str:
    problems = []
    for item in error.errors()[:5]:
        location = ".".join(str(part) for part in item["loc"]) or "(top level)"
        problems.append(f"{location}: {item['msg']}")
    more = error.error_count() - len(problems)
    return "; ".join(problems) + (f"; and {more} more" if more > 0 else "")
