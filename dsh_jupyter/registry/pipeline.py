"""One tool call, start to finish, in the order the spec fixes:

    snapshot arguments → resolve → (pre-aborted? stop) → validate arguments
    → pre-execute waterfall (allow | deny | ask → approval) → guards
    → execute wrappers around the body → post-execute waterfall
    → presentation_meta (top-level only) → finalize_content → result observers

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

Tracing: when ``registry.instrument()`` switched it on (``registry._tracer``), each call
has an OpenTelemetry span (:mod:`~dsh_jupyter.registry.tracing`), current while the call
runs; the stages record what they decided into it, and publishing the result ends it.
Off, the only cost is one attribute read per call.

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
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

from .._waiting import wait_quietly, wait_uncancelled
from ..abort import AbortSignal
from ..errors import DshError, ToolArgsError
from ..events import ApprovalEvent, ApprovalRequestEvent, ToolCallEvent, ToolResultEvent
from ..json_value import FrozenDict, JsonObject, NotJsonError, snapshot_json
from ..runtime import RunFile
from .definition import ToolDefinition
from .execution import ExecutionToken, ToolCall, ToolExecution, ToolRunContext
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
    from .tracing import CallSpan

_log = logging.getLogger(__name__)
_NEVER = AbortSignal()  # shared: nobody holds its controller, so it never aborts
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
    """The call a ``CancelledError`` from :func:`execute` was cancelled in, if any."""
    found = getattr(error, "cancelled_call", None)
    return found if isinstance(found, CancelledCall) else None


class StageGate(Protocol):
    """Lets Code Mode order sub-calls: ``pre()`` wraps pre-execute and guards,
    ``post()`` wraps post-execute and context deferral; ``dispatching()`` is told when
    the call passed its policy and is dispatched to the wrappers and the body;
    ``traced()``, with tracing on, the call's trace and span ids once its span started."""

    def pre(self) -> AbstractAsyncContextManager[None]: ...
    def post(self) -> AbstractAsyncContextManager[None]: ...
    def dispatching(self) -> None: ...
    def traced(self, trace_id: str, span_id: str) -> None: ...


class Resolver(Protocol):
    def __call__(self, call: ToolCall) -> ToolDefinition | str: ...


class _Call:
    """Mutable bookkeeping for one execution (kept off the frozen view)."""

    __slots__ = ("attachments", "body_done", "body_started", "deferred", "parsed", "span")

    def __init__(self) -> None:
        self.body_started = False
        self.body_done: asyncio.Event | None = None
        self.deferred: list[AdditionalContext] = []
        self.attachments: list[RunFile] = []
        self.parsed: Any = None
        self.span: CallSpan | None = None  # tracing on (``registry._tracer``)


async def execute(registry: RegistryView, call: ToolCall, *,
                  gate: StageGate | None = None) -> ToolResult:
    started = time.time()
    signal = call.signal if call.signal is not None else _NEVER
    resolved = registry._resolve(call)
    definition = resolved if isinstance(resolved, ToolDefinition) else None
    state = _Call()
    args_error: str | None = None
    try:
        args = snapshot_json(call.arguments)
        if not isinstance(args, dict):
            raise NotJsonError("", f"must be a JSON object, not {type(args).__name__}")
    except NotJsonError as exc:
        args_error = f"invalid arguments: {exc}"
        args = FrozenDict()
    execution = ToolExecution(token=ExecutionToken(), call_id=call.call_id, name=call.name,
                              arguments=cast(JsonObject, args), signal=signal,
                              agent=call.agent, parent=call.parent, definition=definition)
    span = None
    tracer = registry._tracer
    if tracer is not None:
        span = state.span = tracer.start(execution)
        span.activate()
        if gate is not None:
            gate.traced(*span.ids())
    if execution.parent is None and registry._listening:
        event = ToolCallEvent(kind="tool/call", call_id=call.call_id, name=call.name,
                              arguments=args, agent=_agent_name(execution), time=started)
        if span is not None:
            event["trace_id"], event["span_id"] = span.ids()
        registry.emit(event)
    task = asyncio.current_task()
    requests = task.cancelling() if task is not None else 0
    try:
        try:
            result = await _run(registry, execution, definition, resolved, args_error, state,
                                gate)
            if state.attachments and isinstance(result, ToolSuccess):
                result = replace(result, attachments=tuple(state.attachments))
            if definition is not None and definition.output.presentation_meta is not None:
                result = await _with_meta(execution, definition, result)
        except asyncio.CancelledError as error:
            if state.body_done is not None:
                await wait_uncancelled((state.body_done,))  # cancelled already: re-raised below
            result = failure("tool call cancelled", "ABORTED" if state.body_started
                             else "ABORTED_BEFORE_DISPATCH")
            raise _cancelled(error, execution, _publish(registry, execution, definition, result,
                                                        started, state, cancelled=True),
                             started) from None
        if task is not None and task.cancelling() > requests:
            # The body turned our cancellation into an orderly stop: publish, then re-raise.
            if not result.is_error:
                result = failure("tool call cancelled", "ABORTED",
                                 contexts=result.additional_contexts)
            raise _cancelled(asyncio.CancelledError(), execution,
                             _publish(registry, execution, definition, result, started, state,
                                      cancelled=True), started)
        return _publish(registry, execution, definition, result, started, state)
    finally:
        if span is not None:
            span.end(None)  # ended already unless the pipeline itself raised


def _cancelled(error: asyncio.CancelledError, execution: ToolExecution, result: ToolResult,
               started: float) -> asyncio.CancelledError:
    error.cancelled_call = CancelledCall(  # type: ignore[attr-defined]
        call_id=execution.call_id, name=execution.name, arguments=execution.arguments,
        result=result, seconds=time.time() - started)
    return error


async def _run(registry: RegistryView, execution: ToolExecution,
               definition: ToolDefinition | None, resolved: ToolDefinition | str,
               args_error: str | None, state: _Call, gate: StageGate | None) -> ToolResult:
    if args_error is not None:
        return failure(args_error, "INVALID_ARGS")
    signal = execution.signal
    if _aborted(signal):
        return _aborted_before(signal)
    if definition is None:
        return failure(cast(str, resolved), "UNKNOWN_TOOL")
    invalid = _parse_args(definition, execution.arguments, state)
    if invalid is not None:
        return invalid
    hooks = registry._hooks(execution.agent)
    if gate is None:
        denied = await _policy(registry, execution, hooks.pre, hooks.guards, state.span)
    else:
        async with gate.pre():
            denied = await _policy(registry, execution, hooks.pre, hooks.guards, state.span)
    if denied is not None:
        return denied
    if _aborted(signal):
        return _aborted_before(signal)
    if gate is not None:
        gate.dispatching()
    result = await _dispatch(execution, definition, hooks.wrappers, state)
    if gate is None:
        result = await _post(execution, definition, hooks.post, result, state)
    else:
        async with gate.post():
            result = await _post(execution, definition, hooks.post, result, state)
    if not result.is_error and _aborted(signal) and state.body_started:
        result = failure(f"tool call aborted: {signal.reason}", "ABORTED",
                         contexts=result.additional_contexts)
    return result


def _aborted(signal: AbortSignal) -> bool:
    # A function, not the property inline: the signal changes across awaits.
    return signal.aborted


def _aborted_before(signal: AbortSignal) -> ToolFailure:
    return failure(f"tool call aborted before dispatch: {signal.reason}", "ABORTED_BEFORE_DISPATCH")


def _parse_args(definition: ToolDefinition, args: JsonObject, state: _Call) -> ToolFailure | None:
    if definition.validator is not None:
        violations = definition.validator.validate(args)
        if violations:
            return failure(f"invalid arguments for {definition.name}: " + "; ".join(violations),
                           "INVALID_ARGS")
    if definition.parse_args is None:
        state.parsed = args
        return None
    try:
        state.parsed = definition.parse_args(args)
    except ToolArgsError as exc:
        return failure(f"invalid arguments for {definition.name}: "
                       + ("; ".join(exc.violations) or exc.message), "INVALID_ARGS")
    return None


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


async def _policy(registry: RegistryView, execution: ToolExecution,
                  pre_hooks: tuple[Any, ...], guards: tuple[Any, ...],
                  span: CallSpan | None) -> ToolFailure | None:
    decision: PreDecision = Allow()
    for hook in pre_hooks:
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
    if span is not None:
        span.decision(_DECISIONS[type(decision)])
    if isinstance(decision, Ask):
        answered = await _ask(registry, execution, decision, span)
        if isinstance(answered, ToolFailure):
            return answered
        decision = answered
    if isinstance(decision, Deny):
        return failure(decision.reason, "DENIED")
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
        if span is not None:
            span.guards(checked, stopped_by=_name(guard))
        return reason if isinstance(reason, ToolFailure) else failure(reason, "DENIED")
    if span is not None and guards:
        span.guards(len(guards))
    return None


_DECISIONS: dict[type, str] = {Allow: "allow", Deny: "deny", Ask: "ask"}


async def _ask(registry: RegistryView, execution: ToolExecution,
               ask: Ask, span: CallSpan | None) -> PreDecision | ToolFailure:
    why = ask.reason or f"{execution.name} needs approval"
    service = registry.approval
    if service is None:
        return Deny(f"{why} (denied: no approval service is attached)")
    listening = registry._listening
    if listening:
        registry.emit(ApprovalRequestEvent(
            kind="tool/approval-request", call_id=execution.call_id, name=execution.name,
            reason=ask.reason, agent=_agent_name(execution), time=time.time()))
    try:
        answer = await service.request(execution, ask.reason)
    except Exception as exc:
        _answered(registry, execution, Approval(approved=False, answered_by="error",
                                                note=_describe(exc)), listening, span)
        return failure(f"approval failed: {_describe(exc)}", "HOOK_FAILED")
    except asyncio.CancelledError:
        _answered(registry, execution, Approval(approved=False, answered_by=ANSWERED_BY_ABORT,
                                                note=CANCELLED_REASON), listening, span)
        raise
    approval = answer if isinstance(answer, Approval) else Approval(approved=bool(answer))
    _answered(registry, execution, approval, listening, span)
    if approval.approved:
        return Allow()
    if approval.answered_by == ANSWERED_BY_ABORT:
        return Deny(f"{why} (not answered: the call was stopped: {approval.note or 'aborted'})")
    note = f": {approval.note}" if approval.note else ""
    return Deny(f"{why} (rejected by {approval.answered_by}{note})")


def _answered(registry: RegistryView, execution: ToolExecution, approval: Approval,
              listening: bool, span: CallSpan | None) -> None:
    if span is not None:
        span.approval(approval)
    if listening:
        registry.emit(ApprovalEvent(
            kind="tool/approval", call_id=execution.call_id, name=execution.name,
            approved=approval.approved, answered_by=approval.answered_by, note=approval.note,
            time=time.time()))


async def _dispatch(execution: ToolExecution, definition: ToolDefinition,
                    wrappers: tuple[Any, ...], state: _Call) -> ToolResult:
    caller_signal = execution.signal

    async def body(operational: AbortSignal) -> ToolResult:
        if operational is not caller_signal:
            operational = AbortSignal.any((caller_signal, operational))
        if operational.aborted:
            return _aborted_before(operational)
        state.body_started = True
        ctx = ToolRunContext.of(execution, operational, state.deferred.append,
                                None if state.span is None else state.span.annotate,
                                state.attachments.append)
        try:
            raw = await definition.execute(state.parsed, ctx)
        except DshError as exc:
            return failure(exc.message, exc.code)
        except Exception as exc:
            return failure(_describe(exc))
        finally:
            if state.body_done is not None:
                state.body_done.set()
        return await _canonical(execution, definition, raw, dump=True)

    if not wrappers:
        return await body(caller_signal)
    state.body_done = asyncio.Event()
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
    if state.body_started:
        await wait_quietly((state.body_done,))  # a wrapper returned early: the body still works
    if isinstance(result, ToolSuccess) and id(result) not in produced:
        # A wrapper-authored success is normalised like the body's own value.
        result = await _canonical(execution, definition, result.value, dump=False,
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


async def _canonical(execution: ToolExecution, definition: ToolDefinition, raw: Any, *,
                     dump: bool, contexts: tuple[AdditionalContext, ...] = ()) -> ToolResult:
    """:func:`_success`, in a worker thread when ``raw`` is large."""
    if is_large(raw):
        return await in_worker_thread(
            lambda: _success(execution, definition, raw, dump=dump, contexts=contexts))
    return _success(execution, definition, raw, dump=dump, contexts=contexts)


def _success(execution: ToolExecution, definition: ToolDefinition, raw: Any, *, dump: bool,
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
        content = _as_content(definition.output.render(execution.arguments, value))
    except Exception as exc:
        return failure(f"{name} output render failed: {_describe(exc)}", "INVALID_TOOL_OUTPUT",
                       contexts=contexts)
    return ToolSuccess(value=value, content=content, additional_contexts=contexts)


async def _post(execution: ToolExecution, definition: ToolDefinition, hooks: tuple[Any, ...],
                result: ToolResult, state: _Call) -> ToolResult:
    if not hooks and not state.deferred:
        return result  # the common case: nothing to attach, no copy
    contexts = list(state.deferred)
    for hook in hooks:
        try:
            decision = await _maybe_await(hook(execution, result))
        except Exception as exc:
            result = failure(f"post-execute hook {_name(hook)} failed: {_describe(exc)}",
                             "HOOK_FAILED")
            break
        if decision is None:
            continue
        if state.span is not None:
            state.span.post(_post_kind(decision))
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
            result = await _canonical(execution, definition, decision.value, dump=False)
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


def _publish(registry: RegistryView, execution: ToolExecution, definition: ToolDefinition | None,
             result: ToolResult, started: float, state: _Call, *,
             cancelled: bool = False) -> ToolResult:
    if definition is not None and definition.finalize_content is not None:
        result = _finalize(execution, definition, result)
    hooks = registry._hooks(execution.agent)
    for observer in hooks.observers:
        try:
            observer(execution, result)
        except Exception:
            _log.exception("result observer %s failed for call %s", _name(observer),
                           execution.call_id)
    if execution.parent is None and registry._listening:
        event = _result_event(execution, result, started, cancelled=cancelled)
        if state.span is not None:
            event["trace_id"], event["span_id"] = state.span.ids()
        registry.emit(event)
    if state.span is not None:
        state.span.end(result)
    return result


async def _with_meta(execution: ToolExecution, definition: ToolDefinition,
                     result: ToolResult) -> ToolResult:
    if result.is_error or execution.parent is not None:
        return result
    if is_large(result.value):
        return await in_worker_thread(lambda: _meta(execution, definition, result))
    return _meta(execution, definition, result)


def _meta(execution: ToolExecution, definition: ToolDefinition,
          result: ToolResult) -> ToolResult:
    """Attach ``presentation_meta``. May run in a worker thread: touches no loop object."""
    meta_fn = definition.output.presentation_meta
    assert meta_fn is not None
    try:
        meta = snapshot_json(meta_fn(execution.arguments, result.value))
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


def _result_event(execution: ToolExecution, result: ToolResult, started: float, *,
                  cancelled: bool) -> ToolResultEvent:
    event = ToolResultEvent(
        kind="tool/result", call_id=execution.call_id, name=execution.name,
        arguments=execution.arguments, agent=_agent_name(execution), is_error=result.is_error,
        content=[dict(block) for block in result.content], started=started, ended=time.time())
    if result.error is not None:
        event["error"] = {"message": result.error.message, "code": result.error.code}
    if result.meta is not None:
        event["meta"] = result.meta
    if result.additional_contexts:
        event["additional_contexts"] = [dict(c.to_json()) for c in result.additional_contexts]
    stopped = _stop_reason(execution, result, cancelled=cancelled)
    if stopped is not None:
        event["stopped"] = stopped
    return event


def _stop_reason(execution: ToolExecution, result: ToolResult, *,
                 cancelled: bool) -> str | None:
    """Why a call that failed was stopped by its caller, if it was: its signal's abort
    reason (``"stopped by the user"`` from a card's Stop button), or
    :data:`CANCELLED_REASON` when the task awaiting it was cancelled."""
    if not result.is_error:
        return None
    if execution.signal.aborted:
        return execution.signal.reason
    return CANCELLED_REASON if cancelled else None


def _agent_name(execution: ToolExecution) -> str | None:
    return execution.agent.name if execution.agent is not None else None


def _name(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

