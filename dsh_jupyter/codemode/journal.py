"""Durable Code Mode, while a run runs: :class:`RunJournal`, one run's journal.

With ``ToolRegistry(journal=...)`` every ``run_code`` program on a fresh kernel is
journaled (docs/approvals-durable.md): the run when it starts, each sub-call when the
program makes it, its start just before its body runs, its outcome before the program
learns it, an approval's question and its answer, and the run's end. A resumed run
(``registry.resume``) has a :class:`~dsh_jupyter.durable.Replay` too: each call the
program makes again is matched to the journal and answered from it, run live, or stops
the run.

Who calls what:

- :class:`~.scheduler.SubCallScheduler` asks :meth:`RunJournal.match` when a call is
  submitted, :meth:`RunJournal.record` before it runs, gives the call its gates
  (:meth:`RunJournal.gate`: its approval service and its ``before_body``), and records its
  outcome (:meth:`RunJournal.outcome`);
- ``run_code`` opens the run (:func:`start_journal`) and ends it (:meth:`RunJournal.finish`).

Failing closed: when the store fails, the call it was about is not run, the run stops
with ``journal-unavailable``, and the store's own error (it names the file) goes to the
log for the user; the model reads one line without a path.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ..durable.host import current_host
from ..durable.replay import Answered, Live, Match, Replay, Stop, StopKind
from ..durable.store import CallOutcome, JournaledRun, JournalStore, RunRecord
from ..errors import DshError, JournalError
from ..json_value import JsonObject, JsonValue
from ..registry.policy import ANSWERED_BY_ABORT, Approval

if TYPE_CHECKING:
    from ..registry.execution import ToolExecution
    from ..registry.lifecycle import CallRun
    from ..registry.policy import ApprovalService
    from ..registry.results import ToolResult

__all__ = ["JOURNAL_POLL_SECONDS", "JournalStopped", "Resumption", "RunJournal", "asking_run",
           "new_run_id", "start_journal"]

_log = logging.getLogger(__name__)

JOURNAL_POLL_SECONDS = 0.25
"""How often a run waiting for an approval looks for an answer recorded by another
process (``dsh-jupyter approvals approve``)."""

UNAVAILABLE = "JOURNAL_UNAVAILABLE"


_ASKING_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "dsh_jupyter_asking_run", default=None)


def asking_run() -> str | None:
    """Inside an approval service's ``request``: the id of the journaled run whose call
    asks (its question is in the journal and survives a restart), else ``None``. The
    notebook's approval card shows it."""
    return _ASKING_RUN.get()


class JournalStopped(DshError):
    """A journaled call that must not run (the code its failure carries)."""

    default_code = UNAVAILABLE


def new_run_id() -> str:
    """A fresh run id, sortable by time: ``20261204T200905Z-3f9a1c2e``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


@dataclass(frozen=True, slots=True)
class Resumption:
    """A run ``registry.resume`` took up (claimed) for its ``run_code`` call to replay."""

    run: JournaledRun
    replay: Replay


async def start_journal(store: JournalStore, resumption: Resumption | None, *, program: str,
                        fingerprint: str, call_id: str, scope: str | None,
                        scope_name: str | None = None,
                        approval: Callable[[], ApprovalService | None]) -> RunJournal | Stop:
    """The journal of a run about to start: a new run recorded in ``store``, or the
    ``resumption``'s; a :class:`~dsh_jupyter.durable.Stop` when it may not start (the
    store failed; the tools changed since the resumed run paused: it is failed)."""
    if resumption is None:
        run_id = new_run_id()
        try:
            await store.record_run(RunRecord(run_id=run_id, program=program,
                                             tools_fingerprint=fingerprint, call_id=call_id,
                                             scope=scope, scope_name=scope_name,
                                             host=current_host()))
        except JournalError as exc:
            _log.warning("a run could not be journaled: %s", exc.message)
            return Stop("journal-unavailable", "the run's journal could not record the run; "
                        "nothing ran")
        return RunJournal(store, run_id, approval=approval)
    run = resumption.run.run
    if run.tools_fingerprint != fingerprint:
        stop = Stop("journal-tools-changed", f"the tools changed since run {run.run_id} "
                    "paused; it cannot resume")
        try:
            await store.finish_run(run.run_id, "failed", {"failure": stop.kind,
                                                          "message": stop.message})
        except JournalError as exc:
            _log.warning("run %s: could not record its end: %s", run.run_id, exc.message)
        return stop
    return RunJournal(store, run.run_id, approval=approval, replay=resumption.replay,
                      recorded=(c.position for c in resumption.run.calls))


class RunJournal:
    """One run's journal while it runs (see the module docstring). ``stop`` stops the run
    (the bridge's): called once, when a call may not go on."""

    def __init__(self, store: JournalStore, run_id: str, *,
                 approval: Callable[[], ApprovalService | None],
                 replay: Replay | None = None, recorded: Iterable[int] = ()) -> None:
        self.store = store
        self.run_id = run_id
        self.replay = replay
        self.stopped: Stop | None = None
        self.unanswered: int | None = None
        """The position of an approval that was asked and never answered (the run was
        stopped while it waited): the run stays ``waiting`` in the journal."""
        self._approval = approval
        self._recorded = set(recorded)
        # Tool -> the recorded approval that covers its later calls in this run (one given
        # before a resume, or recorded by another process). One the live service gave is
        # applied by that service, which says so on its card.
        self._for_run: dict[str, Approval] = dict(replay.for_run) if replay else {}
        self._stop: Callable[[str], None] = lambda _reason: None
        self.replayed = 0

    def on_stop(self, stop: Callable[[str], None]) -> None:
        """What stops the run (the bridge's abort)."""
        self._stop = stop

    # The calls ---------------------------------------------------------------------------
    def match(self, tool: str, arguments: JsonObject, count: int) -> Match:
        """What to do with the program's ``count``-th call: a fresh run runs each live at
        position ``count``; a resumed run asks its replay."""
        if self.stopped is not None:
            return self.stopped
        if self.replay is None:
            return Live(count)
        found = self.replay.match(tool, arguments)
        if isinstance(found, Stop):
            self.stop(found.kind, found.message)
        elif isinstance(found, Answered):
            self.replayed += 1
        return found

    def stop(self, kind: StopKind, message: str) -> Stop:
        """Stop the run with ``kind`` (the first stop wins) and return it."""
        if self.stopped is None:
            self.stopped = Stop(kind, message)
            self._stop(message)
        return self.stopped

    async def record(self, position: int, tool: str, arguments: JsonObject) -> None:
        """Journal call ``position`` as issued (a call the journal has already is not
        written again). Raises :class:`JournalStopped` when the store fails."""
        if position in self._recorded:
            return
        self._recorded.add(position)
        await self._write(self.store.record_call(self.run_id, position, tool, arguments),
                          f"could not record call {position}; it was not called")

    def gate(self, run: CallRun, position: int, decision: Approval | None) -> None:
        """Give the prepared call its journaled approval (answered by ``decision`` when the
        resumed run has one) and its start mark."""
        run.approval = _JournaledApproval(self, position, decision)

        async def before_body() -> None:
            await self._mark_started(position)
        run.before_body = before_body

    async def outcome(self, position: int, result: ToolResult) -> None:
        """Record what the program is about to see of call ``position``."""
        if position == self.unanswered:
            return  # its question stays open: a resume asks it again
        contexts = tuple(cast(JsonObject, c.to_json()) for c in result.additional_contexts)
        outcome = (CallOutcome(error=result.error.message, code=result.error.code,
                               contexts=contexts) if result.error is not None
                   else CallOutcome(value=result.value, contexts=contexts))
        await self._write(self.store.record_call_result(self.run_id, position, outcome),
                          f"could not record the outcome of call {position}")

    async def _mark_started(self, position: int) -> None:
        await self._write(self.store.mark_started(self.run_id, position),
                          f"could not record the start of call {position}; it was not called")

    async def _write(self, write: Awaitable[None], what: str) -> None:
        try:
            await write
        except JournalError as exc:
            _log.warning("run %s: %s", self.run_id, exc.message)
            stopped = self.stop("journal-unavailable", f"the run's journal {what}")
            raise JournalStopped(stopped.message) from None

    # The run -----------------------------------------------------------------------------
    async def finish(self, failed: bool, result: JsonValue) -> None:
        """Record the run's end, unless a question is still open (then it stays
        ``waiting``, resumable). A store that fails now is logged: the run is over."""
        if self.unanswered is not None:
            return
        try:
            await self.store.finish_run(self.run_id, "failed" if failed else "done", result)
        except JournalError as exc:
            _log.warning("run %s: could not record its end: %s", self.run_id, exc.message)

    # Approvals ---------------------------------------------------------------------------
    async def ask(self, position: int, execution: ToolExecution,
                  reason: str | None) -> Approval:
        """Record the question, then take the first answer: the registry's approval
        service (the card, an elicitation), a decision another process recorded, or the
        call's abort (which leaves the question open, for a resume). A call whose tool a
        recorded approval covers for the whole run is approved at once, asking nothing."""
        covered = self._for_run.get(execution.name)
        if covered is not None:
            return covered
        try:
            await self.store.mark_pending(self.run_id, position, reason)
        except JournalError as exc:
            return self._refused(exc, f"could not record the approval of call {position}; "
                                 "it was not called")
        self.unanswered = position
        signal = execution.signal
        service = self._approval()
        live = (asyncio.ensure_future(_asked(service, execution, reason, self.run_id))
                if service is not None else None)
        recorded = asyncio.ensure_future(self._recorded_decision(position))
        stopped = asyncio.ensure_future(signal.wait())
        waiters = {recorded, stopped} | ({live} if live is not None else set())
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if live is not None and live.done() and not live.cancelled():
            if live.exception() is not None:
                # A service that raised fails the call, as without a journal: the call is
                # over, so is its question (the run goes on, and ends as it ends).
                self.unanswered = None
                return live.result()
            answer = live.result()
            if answer.answered_by == ANSWERED_BY_ABORT:
                return answer  # stopped, not answered: the question stays open
            settled = await self._settle(answer, recorded=False)
            if settled is not answer:  # another process's answer was recorded first
                self._cover(execution.name, settled)
            return settled
        if recorded.done() and not recorded.cancelled():
            settled = await self._settle(recorded.result(), recorded=True)
            self._cover(execution.name, settled)
            return settled
        return Approval(approved=False, answered_by=ANSWERED_BY_ABORT, note=signal.reason)

    async def _settle(self, answer: Approval, *, recorded: bool) -> Approval:
        """Record ``answer`` unless it was read from the store (the first answer recorded
        wins), then take the run up again under this host."""
        try:
            if not recorded:
                try:
                    await self.store.resolve(self.run_id, answer)
                except JournalError as exc:
                    if exc.code != "JOURNAL_ANSWERED":
                        raise
                    answer = await self._last_decision() or answer
            claimed = await self.store.claim(self.run_id, current_host())
        except JournalError as exc:
            return self._refused(exc, "could not record the answer to an approval")
        if not claimed:
            stopped = self.stop("journal-unavailable",
                                "another process took this run up after its approval")
            return Approval(approved=False, answered_by="journal", note=stopped.message)
        self.unanswered = None
        return answer

    def _cover(self, tool: str, answer: Approval) -> None:
        """Keep a recorded answer that approves ``tool`` for the rest of the run."""
        if answer.for_run and answer.approved:
            self._for_run[tool] = answer

    def _refused(self, error: JournalError, what: str) -> Approval:
        _log.warning("run %s: %s", self.run_id, error.message)
        stopped = self.stop("journal-unavailable", f"the run's journal {what}")
        return Approval(approved=False, answered_by="journal", note=stopped.message)

    async def _recorded_decision(self, position: int) -> Approval:
        """The decision another process records for ``position`` (polled)."""
        while True:
            run = await self.store.load_run(self.run_id)
            for approval in run.approvals if run is not None else ():
                if approval.position == position and approval.decision is not None:
                    return approval.decision
            await asyncio.sleep(JOURNAL_POLL_SECONDS)

    async def _last_decision(self) -> Approval | None:
        run = await self.store.load_run(self.run_id)
        answered = [a for a in run.approvals if a.decision is not None] if run else []
        return max(answered, key=lambda a: a.asked).decision if answered else None


class _JournaledApproval:
    """A journaled call's approval service (:attr:`CallRun.approval`): answered from the
    journal on a resume, else asked through :meth:`RunJournal.ask`."""

    __slots__ = ("_decision", "_journal", "_position")

    def __init__(self, journal: RunJournal, position: int, decision: Approval | None) -> None:
        self._journal = journal
        self._position = position
        self._decision = decision

    async def request(self, execution: ToolExecution, reason: str | None) -> Approval:
        if self._decision is not None:
            return self._decision
        return await self._journal.ask(self._position, execution, reason)


async def _asked(service: ApprovalService, execution: ToolExecution,
                 reason: str | None, run_id: str) -> Approval:
    _ASKING_RUN.set(run_id)  # this task's own context: seen by the service it awaits only
    answer = await service.request(execution, reason)
    return answer if isinstance(answer, Approval) else Approval(approved=bool(answer))
