"""``registry.resume(run_id, decision)``: take up a journaled run that paused on an
approval, after its host stopped (docs/approvals-durable.md, "Resume, end to end").

The decision is recorded (unless one was recorded already, by ``dsh-jupyter approvals
approve`` say), the run is claimed for this process (two processes never resume one
run), and its stored program runs again as a ``run_code`` call with the run's own call
id: through the pipeline like any call (its card, its events, its span), in a fresh
kernel, its sub-calls answered from the journal up to the one that paused, which gets
the decision, and live after it. A run made in an agent scope resumes in that scope
(the live one of its name after a restart), or not at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..durable.host import current_host, host_state
from ..durable.replay import Replay
from ..errors import JournalError, RegistrationError
from ..json_value import JsonValue
from ..registry.execution import ToolCall
from ..registry.scope import RESERVED_NAME
from .journal import Resumption

if TYPE_CHECKING:
    from ..abort import AbortSignal
    from ..durable.store import JournalStore, RunRecord
    from ..registry.execution import ScopeView
    from ..registry.policy import Approval
    from ..registry.results import ToolResult
    from ._view import CodeModeHost


async def resume_run(registry: CodeModeHost, resumptions: dict[str, Resumption], run_id: str,
                     decision: Approval | None, *, agent: ScopeView | None = None,
                     signal: AbortSignal | None = None) -> ToolResult:
    """Resume ``run_id`` with ``decision`` (``None``: the one recorded already) and return
    its ``run_code`` result. Raises :class:`~dsh_jupyter.errors.JournalError` when the run
    cannot be resumed (unknown, ended, unanswered, answered already, its host still
    running, taken up by another process)."""
    store = _store(registry)
    journaled = await store.load_run(run_id)
    if journaled is None:
        raise JournalError(f"the journal has no run {run_id}: `dsh-jupyter approvals list` "
                           "shows the runs waiting", code="JOURNAL_UNKNOWN_RUN")
    agent = resumed_scope(registry, journaled.run, agent)  # before anything is recorded
    host = journaled.run.host
    if journaled.status in ("waiting", "decided") and host != current_host() \
            and host_state(host) == "alive":
        raise JournalError(f"run {run_id} still has its host, process {host}: answer it there "
                           "(its card, or `dsh-jupyter approvals approve`), which goes on "
                           "with it", code="JOURNAL_NOT_RESUMABLE")
    if decision is not None:
        await store.resolve(run_id, decision)
        journaled = await store.load_run(run_id)
        assert journaled is not None
    replay = Replay(journaled)  # refuses a run that is not paused on an answered approval
    if not await store.claim(run_id, current_host()):
        raise JournalError(f"run {run_id} was taken up by another process first",
                           code="JOURNAL_NOT_RESUMABLE")
    call_id = journaled.run.call_id
    resumptions[call_id] = Resumption(journaled, replay)
    try:
        return await registry.execute(ToolCall(
            call_id=call_id, name=RESERVED_NAME, agent=agent, signal=signal,
            arguments=resumed_arguments(journaled.run)))
    finally:
        resumptions.pop(call_id, None)  # run_code took it, unless the call never got there


def resumed_scope(registry: CodeModeHost, run: RunRecord,
                  agent: ScopeView | None = None) -> ScopeView | None:
    """The scope ``run`` resumes in: ``agent`` when given (a run made in a scope must be
    given that scope, by name), else the live scope that made it (its session key: this
    process) or, after a restart, the live scope of its name. A run made in a scope never
    resumes with the registry's own tools and policies, which may allow what the scope
    denied: without its scope it is refused (``JOURNAL_SCOPE``)."""
    if agent is not None:
        if run.scope is None:
            raise JournalError(f"run {run.run_id} was made with the registry's own tools, "
                               f"not in a scope: resume it without one, not in scope "
                               f"{agent.name!r}", code="JOURNAL_SCOPE")
        if agent.session_key != run.scope and run.scope_name not in (None, agent.name):
            raise JournalError(f"run {run.run_id} was made in scope {run.scope_name!r}, not "
                               f"{agent.name!r}: resume it in {run.scope_name!r}",
                               code="JOURNAL_SCOPE")
        return agent
    if run.scope is None:
        return None
    for live in registry.scopes:  # the very scope (this process), else one of its name
        if live.session_key == run.scope:
            return live
    for live in registry.scopes:
        if run.scope_name is not None and live.name == run.scope_name:
            return live
    made_in = (f"scope {run.scope_name!r}" if run.scope_name is not None
               else "an agent scope whose name the journal does not hold (an older journal)")
    raise JournalError(f"run {run.run_id} was made in {made_in}, which this process does not "
                       "have: create that scope (with its tools and policies) before resuming, "
                       "or name the scope to resume in (agent=, --scope)", code="JOURNAL_SCOPE")


def resumed_arguments(run: RunRecord) -> dict[str, JsonValue]:
    """The ``run_code`` arguments a resume of ``run`` calls with (its stored program), so a
    card drawn before the resume starts shows what it will show."""
    return {"code": run.program, "description": f"Resume run {run.run_id}"}


def _store(registry: CodeModeHost) -> JournalStore:
    store = registry.journal
    if store is None:
        raise RegistrationError("resume needs the registry's journal: "
                                "ToolRegistry(journal='path/to/journal.sqlite')")
    return store
