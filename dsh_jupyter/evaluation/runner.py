"""Run evaluation tasks through the agent loop, one task in one mode at a time.

::

    task_set = load_task_set()                       # the shipped set
    evaluation = await run_evaluation(task_set, modes=["native", "code"])
    write_results(evaluation, "evaluation-results")

Every run gets a fresh :class:`~.world.World` and registry, so runs are
independent; tasks run one after another (task by task, each in every mode) so
wall times are not skewed by each other. ``model="scripted"`` replays the
responses recorded with the task set; ``"openai"`` asks
:meth:`OpenAIChatModel.from_env <dsh_jupyter.agent.OpenAIChatModel.from_env>` and
``"anthropic"`` :meth:`AnthropicChatModel.from_env
<dsh_jupyter.agent.AnthropicChatModel.from_env>`; any :class:`ModelFactory` gives
each run its own model.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol, TypeAlias

from ..agent import (
    AnthropicChatModel,
    ChatModel,
    ModelResponse,
    OpenAIChatModel,
    ScriptedModel,
    dump_script,
    run_agent,
)
from ..events import SessionEvent
from ..json_value import JsonValue
from ..runtime import CodeRuntime
from .checks import run_checks
from .results import Evaluation, TaskRecord
from .tasks import MODES, Mode, Task, TaskSet
from .world import World, WorldData, world_registry

ModelChoice: TypeAlias = Literal["scripted", "openai", "anthropic"]
RuntimeChoice: TypeAlias = Literal["kernel", "in-process"]
DEFAULT_MAX_STEPS = 12


class ModelFactory(Protocol):
    """Makes the model for one run of ``task`` in ``mode``."""

    def __call__(self, task: Task, mode: Mode) -> ChatModel: ...


def scripted_model(task: Task, mode: Mode) -> ChatModel:
    """The responses recorded for ``task`` in ``mode``, replayed."""
    path = task.recorded.get(mode)
    if path is None:
        raise ValueError(f"task {task.id!r} has no recorded responses for mode {mode!r}")
    return ScriptedModel.from_file(path, name="scripted")


async def run_task(task: Task, mode: Mode, *, world: WorldData, model: ChatModel,
                   runtime: CodeRuntime | None = None, max_steps: int = DEFAULT_MAX_STEPS,
                   record_dir: Path | None = None) -> TaskRecord:
    """Run ``task`` once in ``mode`` against a fresh copy of ``world`` and check it.

    ``runtime`` runs the ``run_code`` programs (needed by ``code`` and ``both``);
    ``record_dir`` keeps the model's responses as ``<task>.<mode>.json``, a script
    :class:`~dsh_jupyter.agent.ScriptedModel` replays.
    """
    before = World.fresh(world)
    after = before.copy()
    registry = world_registry(after)
    registry.mode = mode
    registry.code_runtime = runtime
    errors = _ToolErrorCounter()
    undo = registry.on_event(errors)
    try:
        result = await run_agent(registry, model, task.prompt, max_steps=max_steps,
                                 run_id=f"{task.id}.{mode}")
    finally:
        undo()
    if record_dir is not None:
        await asyncio.to_thread(_record, result.responses, record_dir / f"{task.id}.{mode}.json")
    outcomes = run_checks(task.checks, answer=result.answer, before=before, after=after)
    accounting = result.accounting
    error = None
    if result.error is not None:
        error = f"{result.error.code}: {result.error.message}"
    elif result.stop != "answered":
        error = f"stopped: {result.stop}"
    first = accounting.requests[0] if accounting.requests else None
    return TaskRecord(
        task=task.id, mode=mode, model=model.name,
        runtime=runtime.isolation if runtime is not None and mode != "native" else None,
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


async def run_evaluation(task_set: TaskSet, *,
                         modes: Mode | Sequence[Mode] = ("native", "code"),
                         model: ModelChoice | ModelFactory = "scripted",
                         runtime: RuntimeChoice | CodeRuntime = "kernel", pool_size: int = 1,
                         max_steps: int = DEFAULT_MAX_STEPS, label: str = "",
                         record_dir: str | Path | None = None,
                         on_record: Callable[[TaskRecord], None] | None = None) -> Evaluation:
    """Run every task of ``task_set`` in every mode of ``modes``.

    ``runtime="kernel"`` opens one :class:`~dsh_jupyter.kernel.KernelRuntime`
    (``pool_size`` kernels started ahead) for the whole evaluation and closes it
    before returning; ``"in-process"`` runs programs in this process (no
    sandbox: for tests); a :class:`~dsh_jupyter.runtime.CodeRuntime` is used as
    given (the caller owns it). ``on_record`` sees each record as it is made.
    """
    chosen = _check_modes(modes)
    factory = _model_factory(model, task_set, chosen)
    parameters: dict[str, JsonValue] = {
        "modes": list(chosen), "task_file": str(task_set.path) if task_set.path else None,
        "tasks": [t.id for t in task_set.tasks],
        "model": model if isinstance(model, str) else getattr(model, "__name__", str(model)),
        "runtime": runtime if isinstance(runtime, str) else runtime.isolation,
        "pool_size": pool_size, "max_steps": max_steps, "label": label}
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    began = time.monotonic()
    records: list[TaskRecord] = []
    async with contextlib.AsyncExitStack() as stack:
        code_runtime: CodeRuntime | None = None
        if any(mode != "native" for mode in chosen):
            code_runtime = await _open_runtime(runtime, pool_size, stack)
        for task in task_set.tasks:
            for mode in chosen:
                record = await run_task(
                    task, mode, world=task_set.world, model=factory(task, mode),
                    runtime=code_runtime, max_steps=max_steps,
                    record_dir=Path(record_dir) if record_dir is not None else None)
                records.append(record)
                if on_record is not None:
                    on_record(record)
    return Evaluation(task_set=task_set.name, parameters=parameters, records=tuple(records),
                      started=started, wall_seconds=time.monotonic() - began)


def progress_line(record: TaskRecord) -> str:
    """One line per record, for progress output."""
    status = "ok" if record.success else "FAILED"
    line = (f"{record.task:<24} {record.mode:<6} {status:<6} steps={record.steps:<2} "
            f"calls={record.tool_calls:<2} sub-calls={record.sub_calls:<2} "
            f"result-bytes={record.tool_result_bytes:<6} {record.wall_seconds:6.2f}s")
    if not record.success:
        why = record.error or "; ".join(c.detail for c in record.checks if not c.passed)
        line += f"  ({why})"
    return line


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


def _model_factory(model: ModelChoice | ModelFactory, task_set: TaskSet,
                   modes: Sequence[Mode]) -> ModelFactory:
    if model == "scripted":
        missing = [f"{t.id} ({m})" for t in task_set.tasks for m in modes if m not in t.recorded]
        if missing:
            raise ValueError("model='scripted' replays recorded responses, and these have none: "
                             + ", ".join(missing) + "; use a real model (model='openai') "
                             "to run them, with record_dir= to record them")
        return scripted_model
    if model in ("openai", "anthropic"):
        shared: ChatModel = (OpenAIChatModel.from_env() if model == "openai"
                             else AnthropicChatModel.from_env())
        return lambda task, mode: shared
    if isinstance(model, str):
        raise ValueError(f"model must be 'scripted', 'openai', 'anthropic' or a factory, "
                         f"not {model!r}")
    return model


async def _open_runtime(runtime: RuntimeChoice | CodeRuntime, pool_size: int,
                        stack: contextlib.AsyncExitStack) -> CodeRuntime:
    if runtime == "kernel":
        from ..kernel import KernelRuntime, KernelRuntimeConfig

        return await stack.enter_async_context(
            KernelRuntime(KernelRuntimeConfig(pool_size=pool_size)))
    if runtime == "in-process":
        from ..testing import InProcessRuntime

        return InProcessRuntime()
    if isinstance(runtime, str):
        raise ValueError(f"runtime must be 'kernel', 'in-process' or a CodeRuntime, "
                         f"not {runtime!r}")
    return runtime


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
