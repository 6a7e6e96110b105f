"""Task sets: a world to work in, tasks with checks, and recorded model responses.

A task set comes from a *spec* (:func:`load_task_set`): a shipped set's name
(``"office"``, the default, or ``"shop"``), a task file's path, or
``"module:attribute"`` naming a :class:`TaskSet` (or a function returning one) in
your own code, which is how a task set brings its own tools.

A task file is JSON (see ``data/tasks.json``, the ``shop`` set)::

    {"format": "dsh-jupyter-tasks/1",
     "name": "shop", "description": "...",
     "tools": "package.module:function",                   # default: the shop's tools
     "world": {"files": {"README.md": "..."},              # default: the demo's files
               "database": {"customers": [...], "orders": [...], "events": [...]}},
     "tasks": [{"id": "open-order-total", "favours": "code",
                "prompt": "What is the total value of Ada Lovelace's open orders?",
                "checks": [{"kind": "answer_contains", "text": ["559.73"]}],
                "recorded": {"native": "recorded/open-order-total.native.json",
                             "code": ["recorded/open-order-total.code.json", "..."]}}]}

``tools`` names a :data:`~.world.ToolWorld`; every table in ``database`` is a list
of rows with an ``id`` (``customers`` and ``orders`` are checked against the shop's
row types). ``recorded`` maps a presentation mode to a script for
:class:`~dsh_jupyter.agent.ScriptedModel` (relative to the task file), or to a
list of them: samples of what a model answered when it did the task that way,
replayed in turn by repeated runs. ``dump_script`` writes one from a real run.
Checks are described in :mod:`.checks`.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired, TypeAlias, cast

import pydantic
from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from ..demo.tools import SAMPLE_FILES
from ..registry.scope import MODES as PRESENTATION_MODES
from ..registry.scope import PresentationMode
from .checks import Check
from .world import Customer, Order, ToolWorld, WorldData, world_registry

# A presentation is whatever the registry can present tools as; a new mode there is
# a new column of the evaluation matrix here, with nothing else to change.
Mode: TypeAlias = PresentationMode
MODES: tuple[Mode, ...] = PRESENTATION_MODES
TASKS_FORMAT = "dsh-jupyter-tasks/1"
DATA_DIR = Path(__file__).resolve().parent / "data"
SHIPPED_TASKS = DATA_DIR / "tasks.json"
SHIPPED_SETS: dict[str, Path] = {"office": DATA_DIR / "office" / "tasks.json",
                                 "shop": SHIPPED_TASKS}
DEFAULT_TASK_SET = "office"
_TASK_ID = re.compile(r"[a-z0-9][a-z0-9_-]*")


class TaskSetError(ValueError):
    """A task file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One task: the prompt a model gets, how to check the outcome, and where the
    recorded responses for each mode are. ``favours`` says which presentation the
    task's author expects to do it best (documentation; nothing depends on it)."""

    id: str
    prompt: str
    checks: tuple[Check, ...]
    recorded: Mapping[Mode, tuple[Path, ...]] = field(default_factory=dict)
    favours: Mode | None = None

    def recording(self, mode: Mode, repeat: int = 0) -> Path | None:
        """The script repeat number ``repeat`` replays: the samples in turn."""
        samples = self.recorded.get(mode, ())
        return samples[repeat % len(samples)] if samples else None


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSet:
    """Tasks over one world; ``tools`` builds each run's registry over its
    :class:`~.world.World` (default: the shop's file and order tools)."""

    name: str
    description: str
    world: WorldData
    tasks: tuple[Task, ...]
    path: Path | None = None
    tools: ToolWorld = world_registry

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
class _WorldJson(TypedDict):
    files: NotRequired[dict[str, str]]
    database: NotRequired[dict[str, list[dict[str, Any]]]]


@with_config(ConfigDict(extra="forbid"))
class _TaskJson(TypedDict):
    id: str
    prompt: str
    checks: list[Annotated[Check, pydantic.Field(discriminator="kind")]]
    recorded: NotRequired[dict[Mode, str | list[str]]]
    favours: NotRequired[Mode]


@with_config(ConfigDict(extra="forbid"))
class _TaskFileJson(TypedDict):
    format: Literal["dsh-jupyter-tasks/1"]
    name: str
    description: NotRequired[str]
    tools: NotRequired[str]
    world: NotRequired[_WorldJson]
    tasks: list[_TaskJson]


@functools.cache
def _task_file_adapter() -> pydantic.TypeAdapter[_TaskFileJson]:
    return pydantic.TypeAdapter(_TaskFileJson)


@functools.cache
def _shop_adapters() -> dict[str, pydantic.TypeAdapter[Any]]:
    return {"customers": pydantic.TypeAdapter(list[Customer]),
            "orders": pydantic.TypeAdapter(list[Order])}


def load_task_set(spec: str | Path | TaskSet | None = None) -> TaskSet:
    """The task set ``spec`` names: ``None`` the default (``"office"``), a shipped
    set's name (:data:`SHIPPED_SETS`), ``"module:attribute"`` (a :class:`TaskSet`, or
    a function of no arguments returning one), or a task file's path."""
    if isinstance(spec, TaskSet):
        return spec
    if spec is None:
        spec = DEFAULT_TASK_SET
    if isinstance(spec, str):
        if spec in SHIPPED_SETS:
            return load_task_file(SHIPPED_SETS[spec])
        if _is_import_spec(spec):
            found = _import_attribute(spec, "task set")
            task_set = found() if callable(found) and not isinstance(found, TaskSet) else found
            if not isinstance(task_set, TaskSet):
                raise TaskSetError(f"{spec} is a {type(task_set).__name__}, not a TaskSet")
            return task_set
    return load_task_file(spec)


def load_task_file(path: str | Path) -> TaskSet:
    """Load and validate a task file."""
    source = Path(path)
    if not source.is_file() and not source.suffix and str(path) not in SHIPPED_SETS:
        raise TaskSetError(f"no task set {str(path)!r}: give a shipped set's name ("
                           + ", ".join(SHIPPED_SETS) + "), a task file, or module:attribute")
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
    database = dict(world.get("database", {}))
    for table, rows in database.items():
        if table in _shop_adapters():
            try:
                _shop_adapters()[table].validate_python(rows)
            except pydantic.ValidationError as exc:
                raise TaskSetError(f"{where}: world.database.{table}: {_describe(exc)}"
                                   ) from None
        if any(not isinstance(row.get("id"), str) for row in rows):
            raise TaskSetError(f"{where}: every row of {table} needs a string id")
        ids = [row["id"] for row in rows]
        if len(set(ids)) != len(ids):
            raise TaskSetError(f"{where}: {table} has duplicate ids")
    known_tables = {"customers", "orders", *database}
    customers = database.pop("customers", [])
    orders = database.pop("orders", [])
    tools: ToolWorld = world_registry
    if "tools" in data:
        found = _import_attribute(data["tools"], "tool world", where=where)
        if not callable(found):
            raise TaskSetError(f"{where}: tools {data['tools']!r} is not callable")
        tools = found
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
            checked = check.get("table")
            if checked is not None and checked not in known_tables:
                raise TaskSetError(f"{where}: task {task_id!r}: no table {checked!r} in the "
                                   f"world; tables: {', '.join(sorted(known_tables))}")
            if check["kind"] == "answer_matches":
                try:
                    re.compile(check["pattern"])
                except re.error as exc:
                    raise TaskSetError(f"{where}: task {task_id!r}: bad pattern "
                                       f"{check['pattern']!r}: {exc}") from None
        recorded: dict[Mode, tuple[Path, ...]] = {}
        for mode, scripts in entry.get("recorded", {}).items():
            samples = [scripts] if isinstance(scripts, str) else scripts
            if not samples:
                raise TaskSetError(f"{where}: task {task_id!r}: no {mode} recordings listed")
            paths = []
            for script in samples:
                script_path = (base / script).resolve()
                if not script_path.is_file():
                    raise TaskSetError(f"{where}: task {task_id!r}: recorded {mode} responses "
                                       f"{script!r} not found (looked for {script_path})")
                paths.append(script_path)
            recorded[mode] = tuple(paths)
        tasks.append(Task(id=task_id, prompt=entry["prompt"], checks=tuple(entry["checks"]),
                          recorded=recorded, favours=entry.get("favours")))
    if not tasks:
        raise TaskSetError(f"{where}: no tasks")
    return TaskSet(name=data["name"], description=data.get("description", ""),
                   world=WorldData(files=world.get("files", dict(SAMPLE_FILES)),
                                   customers=tuple(cast(list[Customer], customers)),
                                   orders=tuple(cast(list[Order], orders)),
                                   tables={name: tuple(rows) for name, rows in database.items()}),
                   tasks=tuple(tasks), path=path, tools=tools)


def _is_import_spec(spec: str) -> bool:
    module, colon, attribute = spec.partition(":")
    return bool(colon) and all(part.isidentifier() for part in module.split(".")) \
        and all(part.isidentifier() for part in attribute.split("."))


def _import_attribute(spec: str, what: str, *, where: str = "") -> Any:
    prefix = f"{where}: " if where else ""
    if not _is_import_spec(spec):
        raise TaskSetError(f"{prefix}{what} {spec!r} is not module:attribute")
    module_name, _, attribute = spec.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise TaskSetError(f"{prefix}cannot import {module_name} for the {what}: {exc}"
                           ) from None
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise TaskSetError(f"{prefix}{module_name} has no {attribute}") from None
    return found


def _describe(error: pydantic.ValidationError) -> str:
    problems = []
    for item in error.errors()[:5]:
        location = ".".join(str(part) for part in item["loc"]) or "(top level)"
        problems.append(f"{location}: {item['msg']}")
    more = error.error_count() - len(problems)
    return "; ".join(problems) + (f"; and {more} more" if more > 0 else "")
