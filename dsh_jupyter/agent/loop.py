"""The agent loop: prompt → model → tool calls through the registry → repeat.

Each step assembles the prompt for the agent's scope (so tools registered
mid-run show up next step), sends one chat request, and executes the returned
calls through ``registry.execute`` (see :mod:`.scheduling` for the order). The
run ends when the model answers without tool calls (``"answered"``), after
``max_steps`` requests (``"step_limit"``), when the signal aborts
(``"aborted"``), or when the model request fails (``"model_error"``, with the
error on the result). Cancelling the task running it cancels the tool calls,
waits for them to settle and re-raises.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from ..abort import AbortSignal
from ..errors import ToolAbortedError
from ..events import ErrorJson
from ..registry import AgentScope, ToolCall, ToolRegistry, ToolResult
from ..registry.assembly import PromptAssembly
from ..registry.results import failure
from .accounting import RequestAccounting, RunAccounting, SubCallCounter, measure_request
from .errors import ModelError
from .events import (
    AgentEvent,
    AgentRequestEvent,
    AgentRunEndEvent,
    AgentRunStartEvent,
    StopReason,
)
from .model import ChatMessage, ChatModel, ChatRequest, ModelResponse, ModelToolCall
from .scheduling import Planned, execute_planned, plan
from .wire import function_tools

if TYPE_CHECKING:
    from .tracing import RunSpan

DEFAULT_INSTRUCTIONS = (
    "You are an agent working in a Jupyter notebook. Use the tools to carry out the user's "
    "task. When the task is done, reply with the answer and call no tools."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentResult:
    """How a run ended: ``answer`` is the final text when ``stop == "answered"``;
    ``messages`` the transcript as last sent plus the final answer."""

    run_id: str
    stop: StopReason
    answer: str | None
    messages: tuple[ChatMessage, ...]
    responses: tuple[ModelResponse, ...]
    accounting: RunAccounting
    error: ModelError | None = None


def system_prompt(instructions: str, assembly: PromptAssembly) -> str:
    """The base instructions, then the assembly's non-empty sections in order."""
    return "\n\n".join(part for part in (instructions, assembly.system_text) if part)


async def run_agent(registry: ToolRegistry, model: ChatModel, task: str, *,
                    scope: AgentScope | None = None, instructions: str = DEFAULT_INSTRUCTIONS,
                    max_steps: int = 20, max_parallel: int = 10,
                    signal: AbortSignal | None = None, history: Sequence[ChatMessage] = (),
                    run_id: str | None = None) -> AgentResult:
    """Run ``task`` to completion (see the module docstring for when it stops).

    ``history`` is an earlier conversation to continue (a leading system message
    is dropped, so ``previous.messages`` works); ``max_parallel`` bounds how many
    parallel-classified calls of one step run at once.
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
        raise ValueError(f"max_parallel must be a positive integer, got {max_parallel!r}")
    run = _Run(registry, model, scope=scope, instructions=instructions, max_steps=max_steps,
               max_parallel=max_parallel, signal=signal or AbortSignal.never(),
               run_id=run_id or uuid.uuid4().hex[:12])
    return await run.go(task, history)


class _Run:
    def __init__(self, registry: ToolRegistry, model: ChatModel, *, scope: AgentScope | None,
                 instructions: str, max_steps: int, max_parallel: int, signal: AbortSignal,
                 run_id: str) -> None:
        self.registry = registry
        self.model = model
        self.scope = scope
        self.instructions = instructions
        self.max_steps = max_steps
        self.max_parallel = max_parallel
        self.signal = signal
        self.run_id = run_id
        self.messages: list[ChatMessage] = []
        self.responses: list[ModelResponse] = []
        self.requests: list[RequestAccounting] = []
        self.counter = SubCallCounter()
        self.step = 0
        self.tool_calls = 0
        self.result_bytes = 0
        self.context_bytes = 0
        self.span: RunSpan | None = None  # the registry is instrumented

    async def go(self, task: str, history: Sequence[ChatMessage]) -> AgentResult:
        started = time.monotonic()
        assembly = self.registry.prompt(self.scope)
        undo = self.registry.on_event(self.counter)
        stop: StopReason = "step_limit"
        error: ModelError | None = None
        try:
            start: AgentRunStartEvent = {
                "kind": "agent/run-start", "run_id": self.run_id,
                "agent": self.scope.name if self.scope else None, "mode": assembly.mode,
                "model": self.model.name, "task": task, "max_steps": self.max_steps,
                "time": time.time()}
            calls = self.registry.instrumentation
            if calls is not None:
                from .tracing import RunSpan  # imports opentelemetry: only when tracing

                self.span = RunSpan(calls, self.model, agent=start["agent"],
                                    run_id=self.run_id, mode=assembly.mode,
                                    max_steps=self.max_steps)
                start["trace_id"], start["span_id"] = self.span.ids()
            self.emit(start)
            self.set_system(assembly)
            for message in history:
                if message["role"] != "system" or message is not history[0]:
                    self.append(message)
            self.append({"role": "user", "content": task})
            while self.step < self.max_steps:
                if self.signal.aborted:
                    stop = "aborted"
                    break
                self.step += 1
                if self.step > 1:
                    assembly = self.registry.prompt(self.scope)
                    self.set_system(assembly)
                try:
                    outcome = await self.take_step(assembly)
                except ModelError as exc:
                    stop, error = "model_error", exc
                    break
                if outcome is not None:
                    stop = outcome
                    break
            if stop == "step_limit" and self.signal.aborted:
                stop = "aborted"
        except BaseException as exc:  # the live view must see every run end
            cancelled = isinstance(exc, asyncio.CancelledError)
            self.end("cancelled" if cancelled else "raised", self.accounting(started), None,
                     None if cancelled else {"message": f"{type(exc).__name__}: {exc}",
                                             "code": getattr(exc, "code", None)})
            raise
        finally:
            undo()
        accounting = self.accounting(started)
        last = self.responses[-1] if self.responses else None
        answer = last.content if stop == "answered" and last is not None else None
        self.end(stop, accounting, answer, None if error is None
                 else {"message": error.message, "code": error.code})
        return AgentResult(run_id=self.run_id, stop=stop, answer=answer,
                           messages=tuple(self.messages), responses=tuple(self.responses),
                           accounting=accounting, error=error)

    async def take_step(self, assembly: PromptAssembly) -> StopReason | None:
        """One request and its tool calls; a stop reason if the run ends here."""
        step = self.step

        def on_text(text: str) -> None:
            self.emit({"kind": "agent/text-delta", "run_id": self.run_id, "step": step,
                       "text": text, "time": time.time()})

        request = ChatRequest(messages=tuple(self.messages),
                              tools=function_tools(assembly.tools), on_text=on_text)
        sizes = measure_request(step=self.step, instructions=self.instructions,
                                assembly=assembly, request=request,
                                tool_result_bytes=self.result_bytes,
                                context_bytes=self.context_bytes)
        self.result_bytes = self.context_bytes = 0
        event: AgentRequestEvent = {
            "kind": "agent/request", "run_id": self.run_id, "step": self.step,
            "messages": len(request.messages), "tools": list(request.tool_names),
            "sizes": sizes.sizes_json(), "time": time.time()}
        chat = self.span.chat(request, sizes) if self.span is not None else None
        if chat is not None:
            event["trace_id"], event["span_id"] = chat.ids()
        self.emit(event)
        began = time.monotonic()
        try:
            try:
                response = await self.model.complete(request, signal=self.signal)
            except ModelError as exc:
                if chat is not None:
                    chat.end(error=exc)
                raise
            except BaseException:
                if chat is not None:
                    chat.end()  # aborted (ToolAbortedError) or cancelled
                raise
        except ToolAbortedError:
            self.requests.append(replace(sizes, model_seconds=time.monotonic() - began))
            return "aborted"
        except ModelError as exc:
            self.requests.append(replace(sizes, attempts=exc.attempts,
                                         model_seconds=time.monotonic() - began))
            raise
        seconds = time.monotonic() - began
        if chat is not None:
            chat.end(response)
        response = self.with_call_ids(response)
        self.responses.append(response)
        items = [self.planned(call) for call in response.tool_calls]
        groups = plan(self.registry, items)
        ids = [call.id for call in response.tool_calls]
        self.emit({"kind": "agent/response", "run_id": self.run_id, "step": self.step,
                   "finish_reason": response.finish_reason, "tool_calls": ids,
                   "schedule": [[ids[i] for i in group] for group in groups],
                   "prompt_tokens": response.prompt_tokens,
                   "completion_tokens": response.completion_tokens,
                   "attempts": response.attempts, "seconds": seconds, "time": time.time()})
        self.append(response.message())
        self.tool_calls += len(ids)
        for call_id in ids:
            self.counter.track(call_id)
        if ids:
            results = await execute_planned(self.registry, items, groups,
                                            max_parallel=self.max_parallel)
            self.append_results(ids, results)
        self.requests.append(replace(
            sizes, prompt_tokens=response.prompt_tokens,
            completion_tokens=response.completion_tokens, attempts=response.attempts,
            model_seconds=seconds, tool_calls=len(ids), sub_calls=self.counter.count(ids)))
        return None if ids else "answered"

    def with_call_ids(self, response: ModelResponse) -> ModelResponse:
        """Give every call an id unique in this run (some servers send none)."""
        seen = {call_id for call_id in self.counter.counts}
        calls: list[ModelToolCall] = []
        for index, call in enumerate(response.tool_calls, start=1):
            if not call.id or call.id in seen:
                call = replace(call, id=f"{self.run_id}-{self.step}-{index}")
            seen.add(call.id)
            calls.append(call)
        return replace(response, tool_calls=tuple(calls))

    def planned(self, call: ModelToolCall) -> Planned:
        text = call.arguments.strip()
        try:
            arguments = json.loads(text) if text else {}
        except json.JSONDecodeError as exc:
            shown = text if len(text) <= 200 else text[:200] + "..."
            return failure(f"invalid arguments for {call.name}: not valid JSON ({exc.msg} at "
                           f"character {exc.pos}): {shown}", "INVALID_ARGS")
        except RecursionError:
            return failure(f"invalid arguments for {call.name}: JSON nested too deeply",
                           "INVALID_ARGS")
        return ToolCall(call_id=call.id, name=call.name, arguments=arguments,
                        signal=self.signal, agent=self.scope)

    def append_results(self, ids: list[str], results: list[ToolResult]) -> None:
        """Tool messages in model order, then every deferred context as a user message."""
        for call_id, result in zip(ids, results, strict=True):
            text = result.text
            self.result_bytes += len(text.encode())
            self.append({"role": "tool", "tool_call_id": call_id, "content": text})
        for result in results:
            for context in result.additional_contexts:
                self.context_bytes += len(context.text.encode())
                self.append({"role": "user", "content": context.text})

    def set_system(self, assembly: PromptAssembly) -> None:
        text = system_prompt(self.instructions, assembly)
        if self.messages and self.messages[0]["content"] == text:
            return
        if self.messages:
            self.messages[0] = {"role": "system", "content": text}
            self.emit_message(0)
        else:
            self.append({"role": "system", "content": text})

    def append(self, message: ChatMessage) -> None:
        self.messages.append(message)
        self.emit_message(len(self.messages) - 1)

    def emit_message(self, index: int) -> None:
        self.emit({"kind": "agent/message", "run_id": self.run_id, "step": self.step,
                   "index": index, "message": dict(self.messages[index]), "time": time.time()})

    def emit(self, event: AgentEvent) -> None:
        # The registry's sinks are typed for tool events; agent events are JSON too.
        self.registry.emit(event)

    def accounting(self, started: float) -> RunAccounting:
        return RunAccounting(requests=tuple(self.requests), steps=self.step,
                             tool_calls=self.tool_calls,
                             sub_calls=sum(self.counter.counts.values()),
                             wall_seconds=time.monotonic() - started)

    def end(self, stop: StopReason | Literal["cancelled", "raised"], accounting: RunAccounting,
            answer: str | None, error: ErrorJson | None) -> None:
        event: AgentRunEndEvent = {
            "kind": "agent/run-end", "run_id": self.run_id, "stop": stop,
            "steps": accounting.steps, "tool_calls": accounting.tool_calls,
            "sub_calls": accounting.sub_calls, "wall_seconds": accounting.wall_seconds,
            "answer": answer, "time": time.time()}
        if error is not None:
            event["error"] = error
        self.emit(event)
        if self.span is not None:
            self.span.end(stop, steps=accounting.steps, tool_calls=accounting.tool_calls,
                          sub_calls=accounting.sub_calls, error_code=_error_code(stop, error))


def _error_code(stop: str, error: ErrorJson | None) -> str | None:
    """The run span's status: the model error's code, ``ABORTED``, or the type of what
    the loop raised; ``None`` for runs that ended normally (answered, step limit)."""
    if stop in ("cancelled", "aborted"):
        return "ABORTED"
    if error is None:
        return None
    code = error.get("code")
    return code if isinstance(code, str) and code else error["message"].partition(":")[0]
