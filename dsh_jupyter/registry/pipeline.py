"""One tool call, start to finish, in the order the spec fixes:

    snapshot arguments → resolve → (pre-aborted? stop) → validate arguments
    → pre-execute waterfall (allow | deny | ask → approval) → guards
    → execute wrappers around the body → post-execute waterfall
    → presentation_meta (top-level only) → finalize_content → result observers

:func:`prepare_call` does the first three once (a ``run_code`` program's scheduler
classifies the prepared call, then runs it); :func:`run_call` does the rest and tells
the call's listeners each stage (:mod:`~dsh_jupyter.registry.lifecycle`: session events,
tracing and Code Mode's ordering are listeners; the pipeline reports to nothing else).

Every outcome is a :class:`ToolResult`. Cancellation: a signal aborted before the
body starts yields ``ABORTED_BEFORE_DISPATCH``; after it, only a success becomes
``ABORTED``; a started body is always awaited to settlement. If the awaiting
task itself is cancelled, the call's result is still published (as aborted)
before ``CancelledError`` propagates. A body may turn that cancellation into an
orderly stop instead (run_code does: the program is aborted and its logs are kept)
by returning or raising its own failure: the pipeline sees the task's cancellation
request, publishes that failure (a success becomes ``ABORTED``) and re-raises.
Either way the ``CancelledError`` that propagates carries the call as
:class:`CancelledCall` in ``error.cancelled_call``, for a front end to show.

Threads: every hook runs on the event loop, except for a large value
(:func:`~dsh_jupyter.registry.offload.is_large`: more than a couple of thousand
elements, or a very long string). Then turning the body's value into a result
(``dump_output``, the snapshot, output validation, ``output.render``) and
``presentation_meta`` run in a worker thread, so the loop stays responsive; those
three hooks must not touch the event loop. The call awaits the thread even when
cancelled, and the time counts toward ``timeout_ms`` like the body's own.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from .._waiting import wait_quietly, wait_uncancelled
from ..abort import AbortSignal
from ..errors import DshError, ToolArgsError
from ..json_value import FrozenDict, JsonObject, NotJsonError, snapshot_json
from .definition import ToolDefinition
from .execution import ExecutionToken, ToolCall, ToolExecution, ToolRunContext, new_execution
from .lifecycle import CallRun, Section
from .offload import in_worker_thread, is_large
from .policy import (
    ANSWERED_BY_ABORT,
    NO_VALUE,
    Accept,
    Allow,
    Approval,
    Ask,
    Block,
    Deny,
    HookChain,
    PreDecision,
)
from .results import (
    AdditionalContext,
    Content,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    failure,
    text_content,
)

if TYPE_CHECKING:
    from ._view import RegistryView

_log = logging.getLogger(__name__)
_NEVER = AbortSignal()  # shared: nobody holds its controller, so it never aborts
_T = TypeVar("_T")
CANCELLED_REASON = "the call was cancelled"
"""Why a call stopped when the task awaiting it was cancelled (Kernel > Interrupt)."""


@dataclass(frozen=True, slots=True)
class CancelledCall:
    """What a cancelled top-level or nested call published (on ``CancelledError``)."""

    call_id: str
    name: str
    arguments: JsonObject
    result: ToolResult
    seconds: float


def cancelled_call(error: BaseException) -> CancelledCall | None:
    """The call a ``CancelledError`` from ``registry.execute`` was cancelled in, if any."""
    found = getattr(error, "cancelled_call", None)
    return found if isinstance(found, CancelledCall) else None


def prepare_call(registry: RegistryView, call: ToolCall) -> CallRun:
    """Snapshot the arguments, resolve the name and validate the arguments, once: what
    the stages need, and what scheduling classifies (``run.execution_mode``). Tells no
    listener and decides nothing. Raises
    :class:`~dsh_jupyter.errors.RegistrationError` for a scope that is not live."""
    signal = call.signal if call.signal is not None else _NEVER
    resolved = registry._resolve(call)
    definition = resolved if isinstance(resolved, ToolDefinition) else None
    malformed: ToolFailure | None = None
    arguments: JsonObject
    try:
        snapshot = snapshot_json(call.arguments)
        if not isinstance(snapshot, dict):
            raise NotJsonError("", f"must be a JSON object, not {type(snapshot).__name__}")
        arguments = snapshot
    except NotJsonError as exc:
        malformed = failure(f"invalid arguments: {exc}", "INVALID_ARGS")
        arguments = FrozenDict()
    execution = new_execution(ExecutionToken(), call.call_id, call.name, arguments, signal,
                              call.agent, call.parent, definition)
    parent = registry._running.get(call.parent) if call.parent is not None else None
    run = CallRun(call, execution, definition, parent,
                  None if isinstance(resolved, ToolDefinition) else resolved, malformed)
    if definition is not None and malformed is None:
        _validate(run, definition, arguments, parse=not signal.aborted)
    return run


def _validate(run: CallRun, definition: ToolDefinition, args: JsonObject, *,
              parse: bool) -> None:
    """Check ``args`` against the parameters schema, then parse them for the body (not
    for a call aborted already: the parser may be the tool's own code)."""
    if definition.validator is not None:
        violations = definition.validator.validate(args)
        if violations:
            run._invalid = failure(f"invalid arguments for {definition.name}: "
                                   + "; ".join(violations), "INVALID_ARGS")
            return
    if definition.parse_args is None:
        run.parsed = args
    elif parse:
        try:
            run.parsed = definition.parse_args(args)
        except ToolArgsError as exc:
            run._invalid = failure(f"invalid arguments for {definition.name}: "
                                   + ("; ".join(exc.violations) or exc.message), "INVALID_ARGS")
        except Exception as exc:  # a parser that broke, rather than rejected the arguments
            run._invalid = failure(f"invalid arguments for {definition.name}: "
                                   f"{_describe(exc)}", "INVALID_ARGS")


async def run_call(registry: RegistryView, run: CallRun) -> ToolResult:
    """Run a prepared call's stages, then publish its result: ``finalize_content``, the
    result observers, and ``on_call_end`` to its listeners."""
    execution = run.execution
    listeners = registry._listeners
    lifecycle = run._lifecycle = (listeners.sub_calls if execution.parent is not None
                                  else listeners.top_level)
    hooks = registry._hooks(execution.agent)
    run.started = time.time()
    running = registry._running
    running[execution.token] = run
    lifecycle.call_start(run)
    task = asyncio.current_task()
    requests = task.cancelling() if task is not None else 0
    try:
        try:
            result = await _stages(registry, run, hooks)
            definition = run.definition
            if run.attachments and isinstance(result, ToolSuccess):
                result = replace(result, attachments=tuple(run.attachments))
            if definition is not None and definition.output.presentation_meta is not None:
                result = await _with_meta(run, definition, result)
        except asyncio.CancelledError as error:
            if run._body_done is not None:
                await wait_uncancelled((run._body_done,))  # cancelled already: re-raised below
            result = failure("tool call cancelled", "ABORTED" if run._body_started
                             else "ABORTED_BEFORE_DISPATCH")
            raise _cancelled(error, run, _publish(run, hooks, result, cancelled=True)) from None
        if task is not None and task.cancelling() > requests:
            # The body turned our cancellation into an orderly stop: publish, then re-raise.
            if not result.is_error:
                result = failure("tool call cancelled", "ABORTED",
                                 contexts=result.additional_contexts)
            raise _cancelled(asyncio.CancelledError(), run,
                             _publish(run, hooks, result, cancelled=True))
        return _publish(run, hooks, result)
    finally:
        running.pop(execution.token, None)
        if run.ended is None:  # the pipeline itself raised: the listeners still hear the end
            run.ended = time.time()
            lifecycle.call_end(run)


async def _stages(registry: RegistryView, run: CallRun, hooks: HookChain) -> ToolResult:
    """Everything between the start and the result, top to bottom."""
    signal = run.execution.signal
    definition = run.definition
    # Before any policy: arguments that are not a JSON object, an abort, an unknown tool,
    # invalid arguments, in that order.
    if run._malformed is not None:
        return run._malformed
    if _aborted(signal):
        return _aborted_before(signal)
    if definition is None:
        return failure(run._unknown or "unknown tool", "UNKNOWN_TOOL")
    if run._invalid is not None:
        return run._invalid
    lifecycle = run._lifecycle
    policy = _policy(registry, run, hooks)
    denied = await (_within(lifecycle.around_policy, run, policy) if lifecycle.around_policy
                    else policy)
    if denied is not None:
        return denied
    if _aborted(signal):
        return _aborted_before(signal)
    lifecycle.dispatch_start(run)
    result = await _dispatch(run, definition, hooks.wrappers)
    lifecycle.dispatch_end(run, result)
    post = _post(run, definition, hooks.post, result)
    result = await (_within(lifecycle.around_post, run, post) if lifecycle.around_post else post)
    if not result.is_error and _aborted(signal) and run._body_started:
        result = failure(f"tool call aborted: {signal.reason}", "ABORTED",
                         contexts=result.additional_contexts)
    return result


async def _within(sections: tuple[Callable[[CallRun], Section | None], ...], run: CallRun,
                  stage: Coroutine[Any, Any, _T]) -> _T:
    """``stage`` inside the listeners' sections for it (Code Mode's ordering)."""
    if len(sections) == 1:  # the common case (Code Mode's ordering alone): no exit stack
        return await _within_one(sections[0], run, stage)
    try:
        async with AsyncExitStack() as stack:
            for section in sections:
                try:
                    entered = section(run)
                    if entered is not None:
                        await stack.enter_async_context(entered)
                except Exception:
                    _log.exception("listener %s failed for call %s", _name(section),
                                   run.call_id)
            return await stage
    finally:
        stage.close()  # never started when a section was cancelled; a no-op otherwise


async def _within_one(section: Callable[[CallRun], Section | None], run: CallRun,
                      stage: Coroutine[Any, Any, _T]) -> _T:
    try:
        try:
            entered = section(run)
        except Exception:
            _log.exception("listener %s failed for call %s", _name(section), run.call_id)
            entered = None
        if entered is None:
            return await stage
        try:
            await entered.__aenter__()
        except Exception:
            _log.exception("listener %s failed for call %s", _name(section), run.call_id)
            return await stage
        try:
            value = await stage
        except BaseException as error:
            if not await entered.__aexit__(type(error), error, error.__traceback__):
                raise
            raise  # a section never swallows the stage's error
        await entered.__aexit__(None, None, None)
        return value
    finally:
        stage.close()  # never started when a section was cancelled; a no-op otherwise


def _aborted(signal: AbortSignal) -> bool:
    # A function, not the property inline: the signal changes across awaits.
    return signal.aborted


def _aborted_before(signal: AbortSignal) -> ToolFailure:
    return failure(f"tool call aborted before dispatch: {signal.reason}", "ABORTED_BEFORE_DISPATCH")


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


async def _policy(registry: RegistryView, run: CallRun, hooks: HookChain) -> ToolFailure | None:
    execution, lifecycle = run.execution, run._lifecycle
    decision: PreDecision = Allow()
    for hook in hooks.pre:
        try:
            nxt = await _maybe_await(hook(execution, decision))
        except Exception as exc:
            return failure(f"pre-execute hook {_name(hook)} failed: {_describe(exc)}",
                           "HOOK_FAILED")
        if nxt is None:
            continue
        if not isinstance(nxt, Allow | Deny | Ask):
            return failure(f"pre-execute hook {_name(hook)} returned {nxt!r}; expected "
                           "Allow(), Deny(reason), Ask(reason) or None", "HOOK_FAILED")
        decision = nxt
    lifecycle.decision(run, decision)
    if isinstance(decision, Ask):
        answered = await _ask(registry, run, decision)
        if isinstance(answered, ToolFailure):
            return answered
        decision = answered
    if isinstance(decision, Deny):
        return failure(decision.reason, "DENIED")
    guards: tuple[Any, ...] = hooks.guards  # a guard may return anything: checked here
    for checked, guard in enumerate(guards, start=1):
        try:
            reason = guard(execution)
        except Exception as exc:
            reason = failure(f"guard {_name(guard)} failed: {_describe(exc)}", "HOOK_FAILED")
        else:
            if reason is None:
                continue
            if not isinstance(reason, str):
                reason = failure(f"guard {_name(guard)} returned {reason!r}; expected a "
                                 "reason string or None", "HOOK_FAILED")
        lifecycle.guards(run, checked, _name(guard))
        return reason if isinstance(reason, ToolFailure) else failure(reason, "DENIED")
    if guards:
        lifecycle.guards(run, len(guards), None)
    return None


async def _ask(registry: RegistryView, run: CallRun, ask: Ask) -> PreDecision | ToolFailure:
    execution, lifecycle = run.execution, run._lifecycle
    why = ask.reason or f"{execution.name} needs approval"
    service = run.approval if run.approval is not None else registry.approval
    if service is None:
        return Deny(f"{why} (denied: no approval service is attached)")
    lifecycle.approval_request(run, ask.reason)
    try:
        answer = await service.request(execution, ask.reason)
    except Exception as exc:
        lifecycle.approval(run, Approval(approved=False, answered_by="error",
                                         note=_describe(exc)))
        return failure(f"approval failed: {_describe(exc)}", "HOOK_FAILED")
    except asyncio.CancelledError:
        lifecycle.approval(run, Approval(approved=False, answered_by=ANSWERED_BY_ABORT,
                                         note=CANCELLED_REASON))
        raise
    approval = answer if isinstance(answer, Approval) else Approval(approved=bool(answer))
    lifecycle.approval(run, approval)
    if approval.approved:
        return Allow()
    if approval.answered_by == ANSWERED_BY_ABORT:
        return Deny(f"{why} (not answered: the call was stopped: {approval.note or 'aborted'})")
    note = f": {approval.note}" if approval.note else ""
    return Deny(f"{why} (rejected by {approval.answered_by}{note})")


async def _dispatch(run: CallRun, definition: ToolDefinition,
                    wrappers: tuple[Any, ...]) -> ToolResult:
    execution = run.execution
    caller_signal = execution.signal
    annotate = run._annotate if run._lifecycle.on_trace_attributes else None

    async def body(operational: AbortSignal) -> ToolResult:
        if operational is not caller_signal:
            operational = AbortSignal.any((caller_signal, operational))
        if operational.aborted:
            return _aborted_before(operational)
        if run.before_body is not None:
            try:
                await run.before_body()
            except DshError as exc:
                return failure(exc.message, exc.code)
        run._body_started = True
        ctx = ToolRunContext.of(execution, operational, run._deferred.append, annotate,
                                run.attachments.append)
        try:
            raw = await definition.execute(run.parsed, ctx)
        except DshError as exc:
            return failure(exc.message, exc.code)
        except Exception as exc:
            return failure(_describe(exc))
        finally:
            if run._body_done is not None:
                run._body_done.set()
        return await _canonical(run, definition, raw, dump=True)

    if not wrappers:
        return await body(caller_signal)
    run._body_done = asyncio.Event()
    produced: set[int] = set()

    def link(index: int, current: AbortSignal) -> Callable[..., Awaitable[ToolResult]]:
        async def call_next(*, signal: AbortSignal | None = None) -> ToolResult:
            operational = current if signal is None else signal
            if index == len(wrappers):
                result = await body(operational)
            else:
                result = await _wrap(wrappers[index], execution, link(index + 1, operational))
            produced.add(id(result))
            return result
        return call_next

    result = await _wrap(wrappers[0], execution, link(1, caller_signal))
    if run._body_started:
        await wait_quietly((run._body_done,))  # a wrapper returned early: the body still works
    if isinstance(result, ToolSuccess) and id(result) not in produced:
        # A wrapper-authored success is normalised like the body's own value.
        result = await _canonical(run, definition, result.value, dump=False,
                                  contexts=result.additional_contexts)
    return result


async def _wrap(wrapper: Any, execution: ToolExecution,
                call_next: Callable[..., Awaitable[ToolResult]]) -> ToolResult:
    try:
        result = await wrapper(execution, call_next)
    except DshError as exc:  # a wrapper may fail the call with its own code
        return failure(exc.message, exc.code)
    except Exception as exc:
        return failure(f"execute wrapper {_name(wrapper)} failed: {_describe(exc)}",
                       "HOOK_FAILED")
    if not isinstance(result, ToolSuccess | ToolFailure):
        return failure(f"execute wrapper {_name(wrapper)} returned {type(result).__name__}; "
                       "expected a tool result", "HOOK_FAILED")
    return result


async def _canonical(run: CallRun, definition: ToolDefinition, raw: Any, *,
                     dump: bool, contexts: tuple[AdditionalContext, ...] = ()) -> ToolResult:
    """:func:`_success`, in a worker thread when ``raw`` is large."""
    if is_large(raw):
        return await in_worker_thread(
            lambda: _success(run, definition, raw, dump=dump, contexts=contexts))
    return _success(run, definition, raw, dump=dump, contexts=contexts)


def _success(run: CallRun, definition: ToolDefinition, raw: Any, *, dump: bool,
             contexts: tuple[AdditionalContext, ...] = ()) -> ToolResult:
    """Snapshot, validate and render a canonical value (INVALID_TOOL_OUTPUT on failure).
    May run in a worker thread (see the module docstring): touches no loop object."""
    name = definition.name
    try:
        if dump and definition.dump_output is not None:
            raw = definition.dump_output(raw)
        value = snapshot_json(raw)
    except (NotJsonError, ValueError, TypeError) as exc:
        return failure(f"{name} returned a value that is not lossless JSON: {exc}",
                       "INVALID_TOOL_OUTPUT", contexts=contexts)
    validator = definition.output_validator
    if validator is not None:
        violations = validator.validate(value)
        if violations:
            return failure(f"{name} returned a value that violates its output schema: "
                           + "; ".join(violations), "INVALID_TOOL_OUTPUT", contexts=contexts)
    try:
        content = _as_content(definition.output.render_for(run, value))
    except Exception as exc:
        return failure(f"{name} output render failed: {_describe(exc)}", "INVALID_TOOL_OUTPUT",
                       contexts=contexts)
    return ToolSuccess(value=value, content=content, additional_contexts=contexts)


async def _post(run: CallRun, definition: ToolDefinition, hooks: tuple[Any, ...],
                result: ToolResult) -> ToolResult:
    if not hooks and not run._deferred:
        return result  # the common case: nothing to attach, no copy
    execution, lifecycle = run.execution, run._lifecycle
    contexts = list(run._deferred)
    for hook in hooks:
        try:
            decision = await _maybe_await(hook(execution, result))
        except Exception as exc:
            result = failure(f"post-execute hook {_name(hook)} failed: {_describe(exc)}",
                             "HOOK_FAILED")
            break
        if decision is None:
            continue
        lifecycle.post_decision(run, _post_kind(decision))
        if isinstance(decision, Block):
            result = failure(decision.feedback, "BLOCKED")
            contexts = list(decision.contexts)
            continue
        if not isinstance(decision, Accept):
            result = failure(f"post-execute hook {_name(hook)} returned {decision!r}; expected "
                             "Accept(...), Block(feedback) or None", "HOOK_FAILED")
            break
        if decision.content is not None and decision.value is not NO_VALUE:
            result = failure(f"post-execute hook {_name(hook)} replaced both content and value; "
                             "Accept may replace one of them", "HOOK_FAILED")
            break
        if decision.value is not NO_VALUE:
            result = await _canonical(run, definition, decision.value, dump=False)
        elif decision.content is not None:
            result = result.with_content(_as_content(decision.content))
        contexts.extend(decision.contexts)
    return replace(result, additional_contexts=tuple(contexts))


def _post_kind(decision: object) -> str:
    if isinstance(decision, Block):
        return "block"
    if isinstance(decision, Accept) and (decision.content is not None
                                         or decision.value is not NO_VALUE):
        return "replace"
    return "accept" if isinstance(decision, Accept) else "invalid"


def _as_content(content: Content | str | list[Any]) -> Content:
    if isinstance(content, str):
        return text_content(content)
    return tuple(content)


def _publish(run: CallRun, hooks: HookChain, result: ToolResult, *,
             cancelled: bool = False) -> ToolResult:
    """The end of every call: ``finalize_content``, the result observers, the listeners."""
    definition = run.definition
    if definition is not None and definition.finalize_content is not None:
        result = _finalize(run.execution, definition, result)
    execution = run.execution
    for observer in hooks.observers:
        try:
            observer(execution, result)
        except Exception:
            _log.exception("result observer %s failed for call %s", _name(observer),
                           execution.call_id)
    run.result = result
    run.cancelled = cancelled
    run.ended = time.time()
    run._lifecycle.call_end(run)
    return result


def _cancelled(error: asyncio.CancelledError, run: CallRun,
               result: ToolResult) -> asyncio.CancelledError:
    execution = run.execution
    error.cancelled_call = CancelledCall(  # type: ignore[attr-defined]
        call_id=execution.call_id, name=execution.name, arguments=execution.arguments,
        result=result, seconds=time.time() - run.started)
    return error


async def _with_meta(run: CallRun, definition: ToolDefinition,
                     result: ToolResult) -> ToolResult:
    if result.is_error or run.execution.parent is not None:
        return result
    if is_large(result.value):
        return await in_worker_thread(lambda: _meta(run, definition, result))
    return _meta(run, definition, result)


def _meta(run: CallRun, definition: ToolDefinition, result: ToolResult) -> ToolResult:
    """Attach ``presentation_meta``. May run in a worker thread: touches no loop object."""
    try:
        meta = snapshot_json(definition.output.meta_for(run, result.value))
    except Exception as exc:
        return failure(f"{definition.name} presentation_meta failed: {_describe(exc)}",
                       "INVALID_TOOL_OUTPUT", contexts=result.additional_contexts)
    return replace(result, meta=meta)


def _finalize(execution: ToolExecution, definition: ToolDefinition,
              result: ToolResult) -> ToolResult:
    """Run ``finalize_content``. A finalizer that raises gives ``Error: <its message>``
    (``HOOK_FAILED``), as any thrown call does; one that returns something that is not
    content gives ``Error:`` and what it returned. Either way none of the content it was
    given is kept (a redaction that crashed must not leak it) and the contexts are; the
    traceback goes to the log."""
    assert definition.finalize_content is not None
    try:
        content = definition.finalize_content(execution, result)
        if content is None:
            return result
        blocks = _as_content(content) if isinstance(content, str | list | tuple) else None
        if blocks is None or not all(isinstance(b, dict) and isinstance(b.get("type"), str)
                                     for b in blocks):
            raise TypeError(f"finalize_content of {definition.name} returned "
                            f"{type(content).__name__}; expected a string, content blocks "
                            "or None")
        return result.with_content(blocks)
    except Exception as exc:
        _log.exception("finalize_content of %s failed for call %s", definition.name,
                       execution.call_id)
        return failure(str(exc) or type(exc).__name__, "HOOK_FAILED",
                       contexts=result.additional_contexts)


def _name(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
