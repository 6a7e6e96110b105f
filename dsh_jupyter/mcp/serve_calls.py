"""Calls from MCP clients into a registry: one pipeline run per ``tools/call``.

Each call runs ``registry.execute`` in a task of its own with an
:class:`~dsh_jupyter.abort.AbortController`, so that

- a cancelled request (``notifications/cancelled``, or a closed HTTP stream) aborts the
  call's signal and, unless the call stopped on its own within a grace period
  (:data:`~dsh_jupyter.abort.CANCEL_GRACE_SECONDS`), cancels its task: the tool body stops
  whether it watches the signal or not, a ``run_code`` program stops with its running
  sub-calls, and the request ends once the call has settled;
- the sub-calls of a ``run_code`` program (the registry's ``tool/code-dispatch-start`` and
  ``tool/code-dispatch`` events) go out as progress notifications of the request that
  started the program, when the client sent a progress token;
- an ``Ask`` decision, for the call or any of its sub-calls, becomes an elicitation
  (:class:`ElicitingApproval`). On handshake-era connections the server asks mid-call
  (``elicitation/create`` on the request's stream). The 2026 protocol forbids
  server-initiated requests: the call answers with an ``InputRequiredResult`` carrying the
  question, the pipeline keeps waiting, and the client's retry (``inputResponses`` plus the
  echoed ``requestState``) delivers the answer and serves the rest of the same run.

With a journal (``serve_mcp(journal=...)``, :mod:`~dsh_jupyter.mcp.serve_journal`) the
``requestState`` of a journaled ``run_code`` run names the run, signed: a retry whose run
this server does not hold (it restarted, or the run's parking expired and stopped it; the
journal keeps it ``waiting``) resumes it from the journal with the retry's answer, and a
retry for a run that has ended gets the result its host recorded, running nothing.

Imports the MCP SDK: :mod:`~dsh_jupyter.mcp.serve` imports this module when serving starts.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ElicitResult,
    InputRequest,
    InputRequiredResult,
)

from ..abort import AbortController, abort_then_cancel
from ..codemode.registry import ToolRegistry
from ..codemode.run_code import run_code_limit
from ..durable.host import current_host, host_state
from ..errors import JournalError, ToolAbortedError
from ..events import SessionEvent
from ..registry.execution import ToolCall, ToolExecution
from ..registry.pipeline import cancelled_call
from ..registry.policy import ANSWERED_BY_ABORT, Approval, ApprovalService
from ..registry.results import ToolResult, failure
from ..registry.scope import RESERVED_NAME, AgentScope
from .serve_journal import (
    ServedJournal,
    approval_key,
    journal_decision,
    not_resumable,
    question_again,
    recorded_result,
)
from .serve_questions import APPROVAL_SCHEMA, approval_of, approval_question, approval_request
from .serve_tools import any_json_output, call_result, output_schema

__all__ = ["APPROVAL_SCHEMA", "ElicitingApproval", "ServedCalls"]

_log = logging.getLogger(__name__)

CANCELLED_BY_CLIENT = "cancelled by the MCP client"


@dataclass(eq=False)
class _Question:
    key: str
    message: str
    answer: asyncio.Future[ElicitResult]


@dataclass(eq=False)
class _Run:
    """One served ``tools/call``: the pipeline task, and the request serving it now."""

    call_id: str
    name: str
    controller: AbortController
    structured: bool
    elicits: bool  # the client declared the elicitation capability
    task: asyncio.Task[ToolResult] | None = None
    request: ServerRequestContext[Any, Any] | None = None  # the request attached now
    direct: ServerRequestContext[Any, Any] | None = None  # handshake era: may send requests
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    unsent: list[_Question] = field(default_factory=list)  # 2026 era: for the next round
    asked: dict[str, _Question] = field(default_factory=dict)  # sent, awaiting the retry
    progress: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    steps: int = 0
    expiry: asyncio.TimerHandle | None = None
    journal_run: str | None = None  # its run in the journal, once known (journaled run_code)


class ServedCalls:
    """The ``tools/call`` handler of one served registry, and the runs it owns.

    ``answer_timeout`` bounds how long a 2026-era run waits for the client's retry after
    it asked a question; then the run is aborted (a journaled run stays ``waiting`` in
    ``journal``, and a retry resumes it).
    """

    def __init__(self, registry: ToolRegistry, scope: AgentScope | None, *,
                 answer_timeout: float = 600.0, journal: ServedJournal | None = None) -> None:
        self._registry = registry
        self._scope = scope
        self._answer_timeout = answer_timeout
        self._journal = journal
        self._runs: dict[str, _Run] = {}  # by call id
        self._parked: dict[str, _Run] = {}  # by request state
        self._roots: dict[str, str] = {}  # sub-call id -> the served call id
        # Call ids unique across server processes: a resumed run keeps its first call id,
        # which must not be one this process gives a new call.
        self._call_ids = f"mcp-{secrets.token_hex(4)}"
        self._numbers = itertools.count(1)
        self._questions = itertools.count(1)
        self._closing = False

    # The pipeline's side ------------------------------------------------------------------
    def on_event(self, event: SessionEvent) -> None:
        """The registry event sink: routes sub-call events to their run's progress."""
        if event["kind"] == "tool/code-dispatch-start":
            self._roots[event["call_id"]] = root = event["root_call_id"]
            message = f"{event['name']} started"
        elif event["kind"] == "tool/code-dispatch":
            self._roots.pop(event["call_id"], None)
            root = event["root_call_id"]
            elapsed = (event["ended"] - event["started"]) * 1000
            status = "failed" if event["is_error"] else "done"
            message = f"{event['name']} {status} ({elapsed:.0f} ms)"
        else:
            return
        run = self._runs.get(root)
        if run is not None and run.request is not None:
            run.progress.put_nowait(message)

    def run_of(self, execution: ToolExecution) -> _Run | None:
        """The served run ``execution`` belongs to (itself, or a sub-call of its program)."""
        root = (execution.call_id if execution.parent is None
                else self._roots.get(execution.call_id))
        return self._runs.get(root) if root is not None else None

    # The client's side --------------------------------------------------------------------
    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: CallToolRequestParams) -> CallToolResult | InputRequiredResult:
        state = params.request_state
        if state is not None:
            run = self._parked.get(state)
            if run is None and self._journal is not None:
                return await self._from_journal(ctx, params, self._journal, state)
            if run is None or run.name != params.name:
                raise _unknown_state()
            del self._parked[state]
            if run.expiry is not None:
                run.expiry.cancel()
            _deliver(run, params.input_responses or {})
        else:
            run = self._start(ctx, params.name, params.arguments or {})
        return await self._serve_round(run, ctx)

    def _start(self, ctx: ServerRequestContext[Any, Any], name: str,
               arguments: Mapping[str, Any]) -> _Run:
        run = self._new_run(ctx, f"{self._call_ids}-{next(self._numbers)}", name)
        self._begin(run, self._registry.execute(ToolCall(
            call_id=run.call_id, name=name, arguments=dict(arguments),
            signal=run.controller.signal, agent=self._scope)))
        return run

    def _new_run(self, ctx: ServerRequestContext[Any, Any], call_id: str, name: str) -> _Run:
        if self._closing:
            raise MCPError(INVALID_PARAMS, "the server is shutting down")
        capabilities = ctx.session.client_capabilities
        run = _Run(call_id=call_id, name=name, controller=AbortController(),
                   structured=self._structured(ctx, name),
                   elicits=capabilities is not None and capabilities.elicitation is not None)
        if ctx.session.can_send_request:
            run.direct = ctx
        return run

    def _begin(self, run: _Run, work: Coroutine[Any, Any, ToolResult]) -> None:
        self._runs[run.call_id] = run
        run.task = asyncio.create_task(work, name=f"mcp call {run.call_id}")
        run.task.add_done_callback(lambda _task: self._settled(run))

    def _structured(self, ctx: ServerRequestContext[Any, Any], name: str) -> bool:
        return output_schema(self._registry, self._scope, name,
                             any_json=any_json_output(ctx.protocol_version)) is not None

    def _settled(self, run: _Run) -> None:
        run.changed.set()
        if run.expiry is not None:
            run.expiry.cancel()
        if self._runs.get(run.call_id) is run:
            del self._runs[run.call_id]
        for state, parked in list(self._parked.items()):
            if parked is run:
                del self._parked[state]

    async def _serve_round(self, run: _Run, ctx: ServerRequestContext[Any, Any]
                           ) -> CallToolResult | InputRequiredResult:
        task = run.task
        assert task is not None
        run.request, run.progress = ctx, asyncio.Queue()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(_send_progress, run, ctx)
                try:
                    while not task.done() and not run.unsent:
                        await run.changed.wait()
                        run.changed.clear()
                except BaseException:  # cancelled by the client (or the server stopping)
                    _stop(run, CANCELLED_BY_CLIENT)
                    with anyio.CancelScope(shield=True):
                        await asyncio.wait({task})
                    raise
                finally:
                    run.progress.put_nowait("")  # _send_progress sends what is queued, then ends
        finally:
            run.request = None
        if task.done():
            return self._result(run.name, _outcome(task), structured=run.structured)
        return self._park(run)

    def _result(self, name: str, result: ToolResult, *, structured: bool) -> CallToolResult:
        # run_code's structuredContent and error message are for the client's model too:
        # they get the cap its content has.
        limit = run_code_limit(self._registry) if name == RESERVED_NAME else None
        return call_result(result, structured=structured, limit=limit)

    async def ask(self, run: _Run, message: str) -> ElicitResult:
        """Ask an approval question in ``run``'s next ``InputRequiredResult`` (2026 era)
        and wait for the answer. A journaled run's question is keyed by the approval's
        position, so the key still holds when the run is resumed from the journal."""
        key = f"approve-{next(self._questions)}"
        if self._journal is not None and run.name == RESERVED_NAME:
            try:
                waiting = await self._journal.waiting(run.call_id, run.journal_run)
            except JournalError as exc:  # the run fails closed on its own; still ask
                _log.warning("the journal could not be read: %s", exc.message)
                waiting = None
            if waiting is not None:
                run.journal_run, position = waiting
                key = approval_key(position)
        question = _Question(key=key, message=message,
                             answer=asyncio.get_running_loop().create_future())
        run.unsent.append(question)
        run.changed.set()
        return await question.answer

    def _park(self, run: _Run) -> InputRequiredResult:
        questions, run.unsent = run.unsent, []
        requests: dict[str, InputRequest] = {}
        for question in questions:
            run.asked[question.key] = question
            requests[question.key] = approval_request(question.message)
        journal = self._journal
        state = (journal.state(run.journal_run) if journal is not None
                 and run.journal_run is not None else secrets.token_urlsafe(24))
        self._parked[state] = run
        run.expiry = asyncio.get_running_loop().call_later(
            self._answer_timeout, self._expire, run, state)
        return InputRequiredResult(input_requests=requests, request_state=state)

    def _expire(self, run: _Run, state: str) -> None:
        if self._parked.pop(state, None) is run:  # the run waits on the signal: it says why
            kept = (f"; run {run.journal_run} waits in the journal"
                    if run.journal_run is not None else "")
            run.controller.abort(f"the MCP client did not answer within "
                                 f"{self._answer_timeout:g} s{kept}")

    # Retries the journal answers ----------------------------------------------------------
    async def _from_journal(self, ctx: ServerRequestContext[Any, Any],
                            params: CallToolRequestParams, journal: ServedJournal,
                            state: str) -> CallToolResult | InputRequiredResult:
        """A retry whose state names no run this server holds: the journal's run, resumed
        with the retry's answer, or its recorded result when it has ended."""
        run_id = journal.run_id(state)
        if run_id is None or params.name != RESERVED_NAME:
            raise _unknown_state()
        await self._not_held(run_id)
        try:
            journaled = await journal.load(run_id)
        except JournalError as exc:
            _log.warning("run %s: the journal could not be read: %s", run_id, exc.message)
            raise MCPError(INTERNAL_ERROR, f"run {run_id}: the server's journal could not be "
                                           "read; retry later") from None
        if journaled is None:
            raise _unknown_state()
        await self._not_held(run_id)  # another retry may have taken it up meanwhile
        structured = self._structured(ctx, RESERVED_NAME)
        if journaled.status in ("done", "failed"):
            result = recorded_result(self._registry, self._scope, journaled)
            return self._result(RESERVED_NAME, result, structured=structured)
        pending = journaled.open_approval
        decision: Approval | None = None  # decided: the answer recorded already
        if journaled.status == "waiting" and pending is not None:
            decision = journal_decision(pending, params.input_responses or {})
            if decision is None:  # the retry does not answer it: ask again
                return question_again(journaled, pending, state)
        elif journaled.status != "decided":
            raise MCPError(INVALID_PARAMS, not_resumable(journaled))
        host = journaled.run.host
        if host != current_host() and host_state(host) == "alive":
            raise MCPError(INVALID_PARAMS, f"run {run_id} waits in another server process "
                                           f"({host}): retry the call there")
        run = self._new_run(ctx, journaled.run.call_id, RESERVED_NAME)
        run.journal_run = run_id
        self._begin(run, self._resumed(run_id, decision, run.controller))
        return await self._serve_round(run, ctx)

    async def _not_held(self, run_id: str) -> None:
        """Return once no run of this server is ``run_id``: one whose parking expired is
        awaited while it stops; one still running is another request's (an error)."""
        for run in list(self._runs.values()):
            if run.journal_run != run_id or run.task is None:
                continue
            if not run.controller.signal.aborted:
                raise MCPError(INVALID_PARAMS, f"run {run_id} is running already, for "
                                               "another request: wait for that one")
            await asyncio.wait({run.task})

    async def _resumed(self, run_id: str, decision: Approval | None,
                       controller: AbortController) -> ToolResult:
        try:
            return await self._registry.resume(run_id, decision, agent=self._scope,
                                               signal=controller.signal)
        except JournalError as exc:  # lost a race: answered or taken up elsewhere first
            _log.warning("run %s could not be resumed: %s", run_id, exc.message)
            if exc.code == "JOURNAL_SCOPE":  # made in a scope this server does not serve
                return failure(f"run {run_id} could not be resumed: it was made in an agent "
                               "scope this server does not serve", exc.code)
            return failure(f"run {run_id} could not be resumed: it was answered or taken up "
                           "elsewhere first (another server on the journal, or the command "
                           "line)", exc.code)

    async def aclose(self) -> None:
        """Stop every run still in flight and wait until each has settled."""
        self._closing = True
        tasks = [run.task for run in self._runs.values() if run.task is not None]
        for run in list(self._runs.values()):
            _stop(run, "the MCP server is shutting down")
        if tasks:
            await asyncio.wait(tasks)


def _stop(run: _Run, reason: str) -> None:
    """Abort the run's signal, then cancel its task (the registry's cancellation contract):
    a body that never looks at its signal stops too (:func:`abort_then_cancel`)."""
    abort_then_cancel(run.controller, reason, [run.task] if run.task is not None else [])


def _outcome(task: asyncio.Task[ToolResult]) -> ToolResult:
    """The call's result; for a call :func:`_stop` cancelled (the server shutting down while
    the client still waits), the aborted result the pipeline published."""
    try:
        return task.result()
    except asyncio.CancelledError as error:
        stopped = cancelled_call(error)
        return stopped.result if stopped is not None else failure("tool call cancelled",
                                                                  "ABORTED")


def _deliver(run: _Run, responses: Mapping[str, Any]) -> None:
    for key, response in responses.items():
        question = run.asked.pop(key, None)
        if question is None or question.answer.done():
            continue
        if isinstance(response, ElicitResult):
            question.answer.set_result(response)
        else:
            question.answer.set_exception(MCPError(INVALID_PARAMS, f"{key}: expected an "
                                                                   "elicitation result"))
    # A question the retry did not answer is asked again in the next round.
    run.unsent.extend(run.asked.values())
    run.asked.clear()


async def _send_progress(run: _Run, ctx: ServerRequestContext[Any, Any]) -> None:
    """Send the run's progress messages on ``ctx`` until the round ends (an empty message)."""
    while True:
        message = await run.progress.get()
        if not message:
            return
        run.steps += 1
        try:
            await ctx.session.report_progress(run.steps, None, message)
        except Exception as exc:  # a closed stream: the round is ending anyway
            _log.debug("progress for %s not sent: %s", run.call_id, exc)


class ElicitingApproval:
    """The approval service while a registry is served: an ``Ask`` in a call from an MCP
    client that declared elicitation is asked of that client; anything else goes to
    ``fallback`` (the registry's own approval service, if it had one), or is denied by
    the ``'deny'`` policy. The result's denial names who answered."""

    def __init__(self, calls: ServedCalls, fallback: ApprovalService | None) -> None:
        self._calls = calls
        self._fallback = fallback

    async def request(self, execution: ToolExecution, reason: str | None) -> Approval | bool:
        run = self._calls.run_of(execution)
        if run is None or not run.elicits:
            return await self._without_client(execution, reason, run is not None)
        message = approval_question(execution.name, execution.arguments, reason)
        try:
            if run.direct is not None:
                answer = await execution.signal.run(run.direct.session.elicit_form(
                    message, APPROVAL_SCHEMA, related_request_id=run.direct.request_id))
            else:
                answer = await execution.signal.run(self._calls.ask(run, message))
        except ToolAbortedError:
            return Approval(approved=False, answered_by=ANSWERED_BY_ABORT,
                            note=execution.signal.reason)
        return approval_of(answer)

    async def _without_client(self, execution: ToolExecution, reason: str | None,
                              served: bool) -> Approval | bool:
        why = "the MCP client cannot answer elicitations" if served else None
        if self._fallback is None:
            return Approval(approved=False, answered_by="policy 'deny'", note=why)
        answer = await self._fallback.request(execution, reason)
        if why is None:
            return answer
        approval = answer if isinstance(answer, Approval) else Approval(approved=bool(answer))
        note = f"{approval.note}; {why}" if approval.note else why
        return Approval(approved=approval.approved, answered_by=approval.answered_by, note=note)


def _unknown_state() -> MCPError:
    return MCPError(INVALID_PARAMS, "unknown or expired requestState: call the tool again")
