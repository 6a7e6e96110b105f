"""Run evaluation tasks through the agent loop: a model x presentation matrix.

::

    task_set = load_task_set()                       # the shipped "office" set
    evaluation = await run_evaluation(task_set, modes=["native", "code"],
                                      models=["scripted"], repeats=3)
    write_results(evaluation, "evaluation-results")

Every run gets a fresh :class:`~.world.World` and registry, so runs are
independent; runs go one after another (task by task; per task every model, mode
and repeat) so wall times are not skewed by each other. A model is named by a
spec: ``"scripted"`` replays the responses recorded with the task set (repeat
``r`` replays sample ``r`` of several); ``"openai"`` asks
:meth:`OpenAIChatModel.from_env <dsh_jupyter.agent.OpenAIChatModel.from_env>` and
``"anthropic"`` :meth:`AnthropicChatModel.from_env
<dsh_jupyter.agent.AnthropicChatModel.from_env>`, and ``"openai:NAME"`` /
``"anthropic:NAME"`` do the same with ``DSH_MODEL=NAME``, so one run can compare
several models of one endpoint; any :class:`ModelFactory` gives each run its own
model.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, Protocol, TypeAlias

from ..agent import (
    AnthropicChatModel,
    ChatModel,
    ModelResponse,
    OpenAIChatModel,
    RunAccounting,
    ScriptedModel,
    dump_script,
    run_agent,
)
from ..agent.accounting import estimate_tokens
from ..events import JsonlSessionWriter, SessionEvent
from ..json_value import JsonValue
from ..runtime import CodeRuntime, as_code_runtime
from .checks import run_checks
from .results import Evaluation, TaskRecord, TokenSource
from .tasks import MODES, Mode, Task, TaskSet
from .world import ToolWorld, World, WorldData, world_registry

ModelChoice: TypeAlias = Literal["scripted", "openai", "anthropic"]
ModelSpec: TypeAlias = "str | ModelFactory"
ENDPOINTS = ("openai", "anthropic")
RuntimeChoice: TypeAlias = Literal["kernel", "in-process"]
DEFAULT_MAX_STEPS = 12


class ModelFactory(Protocol):
    """Makes the model for one run of ``task`` in ``mode``."""

    def __call__(self, task: Task, mode: Mode) -> ChatModel: ...


def scripted_model(task: Task, mode: Mode, repeat: int = 0) -> ChatModel:
    """The responses recorded for ``task`` in ``mode``, replayed (sample ``repeat``
    of several, in turn)."""
    path = task.recording(mode, repeat)
    if path is None:
        raise ValueError(f"task {task.id!r} has no recorded responses for mode {mode!r}")
    return ScriptedModel.from_file(path, name="scripted")


async def run_task(task: Task, mode: Mode, *, world: WorldData, model: ChatModel,
                   runtime: CodeRuntime | None = None, max_steps: int = DEFAULT_MAX_STEPS,
                   record_dir: Path | None = None, tools: ToolWorld = world_registry,
                   repeat: int = 0, model_label: str | None = None,
                   session_file: Path | None = None) -> TaskRecord:
    """Run ``task`` once in ``mode`` against a fresh copy of ``world`` and check it.

    ``tools`` builds the registry over that copy (the task set's tool world);
    ``runtime`` runs the ``run_code`` programs (needed by ``code`` and ``both``);
    ``record_dir`` keeps the model's responses as ``<task>.<mode>.json`` (with
    ``.<repeat>`` from the second repeat on), a script
    :class:`~dsh_jupyter.agent.ScriptedModel` replays. ``model_label`` names the
    model in the record (default: ``model.name``). ``session_file`` keeps the run's
    events as a JSON Lines session log (replaced if it exists), which ``dsh-jupyter
    export`` turns into a notebook.
    """
    before = World.fresh(world)
    after = before.copy()
    registry = tools(after)
    registry.mode = mode
    if runtime is not None:
        runtime = as_code_runtime(runtime)
    registry.code_runtime = runtime
    errors = _ToolErrorCounter()
    with contextlib.ExitStack() as stack:
        stack.callback(registry.on_event(errors))
        if session_file is not None:
            log = stack.enter_context(await asyncio.to_thread(_open_log, session_file))
            stack.callback(registry.on_event(JsonlSessionWriter(log)))
        result = await run_agent(registry, model, task.prompt, max_steps=max_steps,
                                 run_id=f"{task.id}.{mode}.{repeat}")
    if record_dir is not None:
        suffix = f".{repeat}" if repeat else ""
        await asyncio.to_thread(_record, result.responses,
                                record_dir / f"{task.id}.{mode}{suffix}.json")
    outcomes = run_checks(task.checks, answer=result.answer, before=before, after=after)
    accounting = result.accounting
    error = None
    if result.error is not None:
        error = f"{result.error.code}: {result.error.message}"
    elif result.stop != "answered":
        error = f"stopped: {result.stop}"
    first = accounting.requests[0] if accounting.requests else None
    tokens, source = run_tokens(accounting, result.responses)
    return TaskRecord(
        task=task.id, mode=mode, model=model_label or model.name, repeat=repeat,
        tokens=tokens, token_source=source,
        step_seconds=tuple(r.model_seconds for r in accounting.requests),
        runtime=runtime.info.isolation if runtime is not None and mode != "native" else None,
        success=result.stop == "answered" and all(o.passed for o in outcomes),
        stop=result.stop, answer=result.answer, error=error, checks=outcomes,
        steps=accounting.steps, tool_calls=accounting.tool_calls,
        sub_calls=accounting.sub_calls, tool_errors=errors.count,
        tool_result_bytes=accounting.tool_result_bytes,
        context_bytes=sum(r.context_bytes for r in accounting.requests),
        tool_definition_bytes=first.tool_definition_bytes if first is not None else 0,
        request_bytes=accounting.request_bytes, wall_seconds=accounting.wall_seconds,
        model_seconds=accounting.model_seconds, prompt_tokens=accounting.prompt_tokens,
        completion_tokens=accounting.completion_tokens)


def run_tokens(accounting: RunAccounting,
               responses: Sequence[ModelResponse]) -> tuple[int, TokenSource]:
    """Prompt plus completion tokens of a run: the server's counts when every
    request has them, else estimated from bytes sent and bytes received."""
    if accounting.prompt_tokens is not None and accounting.completion_tokens is not None:
        return accounting.prompt_tokens + accounting.completion_tokens, "server"
    received = sum(len((r.content or "").encode())
                   + sum(len(c.name.encode()) + len(c.arguments.encode()) for c in r.tool_calls)
                   for r in responses)
    return (sum(estimate_tokens(r.request_bytes) for r in accounting.requests)
            + estimate_tokens(received)), "estimate"


@dataclass(frozen=True, slots=True)
class _Model:
    """One row of the matrix: its label and how to make its model for a run."""

    label: str
    make: Callable[[Task, Mode, int], ChatModel]


async def run_evaluation(task_set: TaskSet, *,
                         modes: Mode | Sequence[Mode] = ("native", "code"),
                         models: ModelSpec | Sequence[ModelSpec] = "scripted",
                         repeats: int = 1,
                         runtime: RuntimeChoice | CodeRuntime = "kernel", pool_size: int = 1,
                         max_steps: int = DEFAULT_MAX_STEPS, label: str = "",
                         record_dir: str | Path | None = None,
                         session_dir: str | Path | None = None,
                         on_record: Callable[[TaskRecord], None] | None = None,
                         model: ModelSpec | None = None) -> Evaluation:
    """Run every task of ``task_set`` ``repeats`` times for every model of
    ``models`` in every presentation mode of ``modes``.

    ``models`` are specs (``"scripted"``, ``"openai"``, ``"openai:NAME"``,
    ``"anthropic"``, ``"anthropic:NAME"``) or :class:`ModelFactory` functions;
    ``model`` is the older spelling of one. ``runtime="kernel"`` opens one
    :class:`~dsh_jupyter.kernel.KernelRuntime` (``pool_size`` kernels started
    ahead) for the whole evaluation and closes it before returning;
    ``"in-process"`` runs programs in this process (no sandbox: for tests); a
    :class:`~dsh_jupyter.runtime.CodeRuntime` is used as given (the caller owns
    it). ``on_record`` sees each record as it is made. ``session_dir`` keeps each run's
    events as ``<task>.<mode>.<repeat>.jsonl`` there (in a folder per model when there
    are several, as ``record_dir``): ``dsh-jupyter export`` makes one a notebook, with
    ``--tools dsh_jupyter.evaluation.fresh:office`` (or ``:shop``) to re-run it.
    """
    chosen = _check_modes(modes)
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    specs = _model_specs(models if model is None else model)
    rows = [_model_row(spec, task_set, chosen) for spec in specs]
    if len({row.label for row in rows}) != len(rows):
        raise ValueError(f"models repeat: {[row.label for row in rows]}")
    parameters: dict[str, JsonValue] = {
        "modes": list(chosen), "task_file": str(task_set.path) if task_set.path else None,
        "task_set": task_set.name, "tasks": [t.id for t in task_set.tasks],
        "models": [row.label for row in rows], "repeats": repeats,
        "runtime": runtime if isinstance(runtime, str) else as_code_runtime(runtime).info.isolation,
        "pool_size": pool_size, "max_steps": max_steps, "label": label}
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    began = time.monotonic()
    records: list[TaskRecord] = []
    async with contextlib.AsyncExitStack() as stack:
        code_runtime: CodeRuntime | None = None
        if any(mode != "native" for mode in chosen):
            code_runtime = await _open_runtime(runtime, pool_size, stack)
        for task in task_set.tasks:
            for row in rows:
                for mode in chosen:
                    for repeat in range(repeats):
                        folder = _model_folder(record_dir, row, several=len(rows) > 1)
                        sessions = _model_folder(session_dir, row, several=len(rows) > 1)
                        record = await run_task(
                            task, mode, world=task_set.world,
                            model=row.make(task, mode, repeat), runtime=code_runtime,
                            max_steps=max_steps, record_dir=folder, tools=task_set.tools,
                            repeat=repeat, model_label=row.label,
                            session_file=None if sessions is None
                            else sessions / f"{task.id}.{mode}.{repeat}.jsonl")
                        records.append(record)
                        if on_record is not None:
                            on_record(record)
    return Evaluation(task_set=task_set.name, parameters=parameters, records=tuple(records),
                      started=started, wall_seconds=time.monotonic() - began)


def progress_line(record: TaskRecord) -> str:
    """One line per record, for progress output."""
    status = "ok" if record.success else "FAILED"
    repeat = f"#{record.repeat + 1}" if record.repeat else ""
    line = (f"{record.task:<24} {record.model:<12} {record.mode:<9} {repeat:<3} "
            f"{status:<6} steps={record.steps:<2} "
            f"calls={record.tool_calls:<2} sub-calls={record.sub_calls:<2} "
            f"result-bytes={record.tool_result_bytes:<6} tokens={record.tokens:<6} "
            f"{record.wall_seconds:6.2f}s")
    if not record.success:
        why = record.error or "; ".join(c.detail for c in record.checks if not c.passed)
        line += f"  ({why})"
    return line


def _model_folder(root: str | Path | None, row: _Model, *, several: bool) -> Path | None:
    """``root``, or with several models its folder for ``row`` (``openai_gpt-4o``)."""
    if root is None:
        return None
    return Path(root) / re.sub(r"[^\w.-]", "_", row.label) if several else Path(root)


def _check_modes(modes: Mode | Sequence[Mode]) -> tuple[Mode, ...]:
    chosen: tuple[Mode, ...] = (modes,) if isinstance(modes, str) else tuple(modes)
    if not chosen:
        raise ValueError("modes is empty: choose from " + ", ".join(MODES))
    unknown = [m for m in chosen if m not in MODES]
    if unknown:
        raise ValueError(f"unknown modes {unknown}: choose from " + ", ".join(MODES))
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"modes repeat: {list(chosen)}")
    return chosen


def _model_specs(models: ModelSpec | Sequence[ModelSpec]) -> list[ModelSpec]:
    if isinstance(models, str) or callable(models):
        return [models]
    chosen = list(models)
    if not chosen:
        raise ValueError("models is empty: name at least one ('scripted', 'openai', ...)")
    return chosen


def _model_row(spec: ModelSpec, task_set: TaskSet, modes: Sequence[Mode]) -> _Model:
    if spec == "scripted":
        missing = [f"{t.id} ({m})" for t in task_set.tasks for m in modes if m not in t.recorded]
        if missing:
            raise ValueError("model='scripted' replays recorded responses, and these have none: "
                             + ", ".join(missing) + "; use a real model (model='openai') "
                             "to run them, with record_dir= to record them")
        return _Model("scripted", scripted_model)
    if isinstance(spec, str):
        endpoint, colon, name = spec.partition(":")
        if endpoint not in ENDPOINTS or (colon and not name):
            raise ValueError(f"model must be 'scripted', 'openai', 'anthropic' (optionally "
                             f"'openai:NAME'...) or a factory, not {spec!r}")
        environ = {**os.environ, "DSH_MODEL": name} if name else None
        shared: ChatModel = (OpenAIChatModel.from_env(environ) if endpoint == "openai"
                             else AnthropicChatModel.from_env(environ))
        return _Model(spec if name else f"{endpoint}:{shared.name}",
                      lambda task, mode, repeat: shared)
    factory = spec
    return _Model(getattr(factory, "__name__", str(factory)),
                  lambda task, mode, repeat: factory(task, mode))


async def _open_runtime(runtime: RuntimeChoice | CodeRuntime, pool_size: int,
                        stack: contextlib.AsyncExitStack) -> CodeRuntime:
    if runtime == "kernel":
        from ..kernel import KernelRuntime, KernelRuntimeConfig

        return await stack.enter_async_context(
            KernelRuntime(KernelRuntimeConfig(pool_size=pool_size)))
    if runtime == "in-process":
        from ..kernel import InProcessRuntime

        return InProcessRuntime()
    if isinstance(runtime, str):
        raise ValueError(f"runtime must be 'kernel', 'in-process' or a CodeRuntime, "
                         f"not {runtime!r}")
    return as_code_runtime(runtime)


def _open_log(path: Path) -> IO[str]:
    """A session log to write from the start (a rerun replaces, never appends)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "w", encoding="utf-8")  # the caller closes it


def _record(responses: Sequence[ModelResponse], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    dump_script(responses, path)


class _ToolErrorCounter:
    """Counts failed calls (``tool/result``) and sub-calls (``tool/code-dispatch``)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, event: SessionEvent) -> None:
        if event["kind"] in ("tool/result", "tool/code-dispatch") and event.get("is_error"):
            self.count += 1
