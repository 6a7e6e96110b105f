"""The journal of durable runs: its records and :class:`JournalStore`, the store's contract.

A run_code program that may pause on an approval is journaled: the run (its program and
the fingerprint of the tools it may call), each sub-call at its position with its
arguments and, once known, its outcome, and each approval it asked for with the answer.
After a restart the journal is what lets the run resume without calling a tool twice
(docs/approvals-durable.md says how). Positions are the sub-calls' issue order, the
``n`` of their ids ``<call_id>:code:<n>``, starting at 1.

A call's ``state`` says how far it got, which is what makes a replay safe:

- ``issued``: recorded, its body never started (queued, in its policy stage, or waiting
  for an approval): a resume may run it;
- ``started``: its body was about to run (written, and committed, before it does); without
  an outcome it is *in doubt* after a crash: a resume never runs it again;
- ``done``: its outcome is recorded: a resume answers it from the journal.

The store is a plug point: :class:`~.sqlite.SqliteJournalStore` is the default, one SQLite
file; a server database fits behind the same methods. :class:`JournalSecret` is an optional
capability beside them: a key kept with the journal, for ``serve-mcp --journal``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from ..json_value import JsonObject, JsonValue
from ..registry.policy import Approval

__all__ = ["ApprovalRecord", "CallOutcome", "CallRecord", "CallState", "JournalSecret",
           "JournalStore", "JournaledRun", "PendingApproval", "RunRecord", "RunStatus"]

RunStatus: TypeAlias = Literal["running", "waiting", "decided", "done", "failed"]
"""``running`` (live, no approval open), ``waiting`` (an approval is open), ``decided``
(answered, no host has taken it up yet: :meth:`JournalStore.claim` makes it ``running``
again), ``done``, ``failed``."""

CallState: TypeAlias = Literal["issued", "started", "done"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """What a run is, fixed when it starts."""

    run_id: str
    program: str
    tools_fingerprint: str
    """A digest of the tools the program may call (names and parameter schemas): a resume
    with other tools would answer another program's calls."""
    call_id: str
    """The run_code call's id (the sub-calls' ids are ``<call_id>:code:<n>``)."""
    scope: str | None = None
    """The calling scope's session key, ``None`` for the registry's own."""
    scope_name: str | None = None
    """The calling scope's name: after a restart, the run resumes in the live scope of
    that name (its tools and policies), never with the registry's own."""
    host: str = ""
    """``<pid>@<hostname>`` of the process that ran it."""
    created: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CallOutcome:
    """What the program saw of a sub-call: its value, or its failure (``error`` is the
    message the program's exception carries, ``code`` the failure's code)."""

    value: JsonValue = None
    error: str | None = None
    code: str | None = None
    contexts: tuple[JsonObject, ...] = ()
    """The additional contexts the call deferred to the run's result
    (:meth:`~dsh_jupyter.registry.results.AdditionalContext.to_json`), so a resumed run's
    result carries its replayed calls' too."""

    def to_json(self) -> JsonObject:
        data: JsonObject = ({"value": self.value} if self.error is None
                            else {"error": {"message": self.error, "code": self.code}})
        if self.contexts:
            data["contexts"] = list(self.contexts)
        return data

    @classmethod
    def from_json(cls, data: JsonValue) -> CallOutcome:
        raw = data.get("contexts") if isinstance(data, dict) else None
        contexts = tuple(c for c in raw if isinstance(c, dict)) if isinstance(raw, list) else ()
        if isinstance(data, dict) and "value" in data:
            return cls(value=data["value"], contexts=contexts)
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            code = error.get("code")
            return cls(error=str(error["message"]),
                       code=code if isinstance(code, str) else None, contexts=contexts)
        raise ValueError(f"a call outcome is {{'value': ...}} or {{'error': {{'message': "
                         f"str, 'code': str | None}}}}, got {data!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CallRecord:
    """One sub-call at its position (see the module docstring for ``state``)."""

    position: int
    tool: str
    arguments: JsonObject
    state: CallState
    outcome: CallOutcome | None = None
    started: float | None = None
    ended: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRecord:
    """An approval the run asked for at ``position``; ``decision`` once answered."""

    position: int
    reason: str | None
    asked: float
    decision: Approval | None = None
    answered: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JournaledRun:
    """A run as its journal holds it."""

    run: RunRecord
    status: RunStatus
    updated: float
    calls: tuple[CallRecord, ...] = ()
    approvals: tuple[ApprovalRecord, ...] = ()
    result: JsonValue = None
    """What the run ended with (``done`` or ``failed``), as its host recorded it."""

    @property
    def open_approval(self) -> ApprovalRecord | None:
        """The approval asked and not answered yet (a run has at most one: a program's
        policy stages never overlap), else ``None``."""
        for approval in self.approvals:
            if approval.decision is None:
                return approval
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingApproval:
    """One line of ``dsh-jupyter approvals list``: a run waiting for an answer."""

    run_id: str
    position: int
    tool: str
    arguments: JsonObject
    reason: str | None
    asked: float
    scope: str | None
    host: str
    scope_name: str | None = None


class JournalStore(Protocol):
    """Where journals are kept. Every write is atomic and durable once it returns (a
    process killed after it keeps it, one killed during it keeps none of it); stores on
    one backing file or database see each other's writes. Errors are
    :class:`~dsh_jupyter.errors.JournalError`, one line."""

    async def record_run(self, run: RunRecord) -> None:
        """A new run, ``running``. A second run with the same id is an error."""

    async def record_call(self, run_id: str, position: int, tool: str,
                          arguments: JsonObject) -> None:
        """Sub-call ``position`` was issued (``issued``)."""

    async def mark_started(self, run_id: str, position: int) -> None:
        """Its body is about to run (``started``): awaited before the body starts."""

    async def record_call_result(self, run_id: str, position: int,
                                 outcome: CallOutcome) -> None:
        """Its outcome (``done``)."""

    async def mark_pending(self, run_id: str, position: int, reason: str | None) -> None:
        """It asks for an approval: the run is ``waiting`` until :meth:`resolve`."""

    async def resolve(self, run_id: str, decision: Approval) -> ApprovalRecord:
        """Answer the run's open approval (the run becomes ``decided``) and return it.
        ``JOURNAL_UNKNOWN_RUN`` when there is no such run, ``JOURNAL_ANSWERED`` when it
        has no open approval (someone answered first): exactly one answer wins."""

    async def claim(self, run_id: str, host: str) -> bool:
        """Take a ``decided`` run to go on with it (``running`` again, ``host`` its new host);
        ``False`` when it is not ``decided`` (another host took it first)."""

    async def finish_run(self, run_id: str, status: Literal["done", "failed"],
                         result: JsonValue = None) -> None:
        """The run ended."""

    async def load_run(self, run_id: str) -> JournaledRun | None:
        """The run with its calls and approvals in position order, ``None`` if unknown."""

    async def list_pending(self) -> tuple[PendingApproval, ...]:
        """The open approvals of ``waiting`` runs, oldest first."""


@runtime_checkable
class JournalSecret(Protocol):
    """Optional beside :class:`JournalStore`: a secret kept with the journal.

    ``serve-mcp --journal`` signs the ``requestState`` it hands a client with it
    (``<run_id>.<HMAC-SHA256>``), so a state given out before a restart is recognised
    after it and nobody can make one for another run. It is not part of
    :class:`JournalStore` because only a server handing out states needs it: replay and
    resume do not, and a store without it still journals and resumes (served states then
    hold for the server process only). Whoever can read the secret can make states, so
    keep it where the journal is: a reader of the journal can answer its approvals anyway.
    """

    async def secret(self) -> bytes:
        """The journal's secret: at least 32 random bytes, made on first use and the
        same afterwards, for every store on the same backing file or database (two
        first uses at once agree on one)."""
