"""Answering ``Ask`` decisions in the notebook, or by a policy when nobody can click.

::

    registry = ToolRegistry(mode="code", approval=NotebookApprovals(policy="reject"))
    view = LiveView(registry)        # approvals appear inside the call's card
    view
    # next cell
    await registry.execute(call)     # top-level await: the click reaches the kernel

A prompt offers Approve, Reject (with an optional reason the program receives) and,
for a sub-call of a run_code program, "Approve all <tool> calls in this run": later
asks for that tool in that run are approved at once, without a prompt.

How "nobody can click" is decided (``interactive``):

- ``False``: the policy answers at once (batch runs, CI);
- ``True``: always wait for a click (optionally at most ``timeout`` seconds);
- ``None`` (default): outside an IPython kernel the policy answers at once.
  Inside one, the prompt is displayed and the policy answers unless a front end
  *renders* it within ``frontend_timeout`` seconds. Rendering is reported by the
  front end itself (ipywidgets' ``_view_count``) over the same comm channel a
  click uses, while the cell awaits, so a positive answer also proves the click
  can arrive: papermill, nbval and ipykernel < 7.4 (where comm messages wait
  until the cell ends) all fall back to the policy instead of hanging.

The card always says who answered, in its title: ``read_csv approved by you``,
``read_csv rejected by policy 'reject' (no widget front end)`` (every wording is
in :mod:`.approval_card`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, TypeAlias, TypeVar

from ..codemode.journal import asking_run
from ..errors import RegistrationError
from ..registry.execution import ExecutionToken, ToolExecution
from ..registry.policy import Approval
from ..registry.scope import Disposer, Undo
from . import _ipw
from .approval_card import BY_ABORT, BY_USER, ApprovalCard, ApprovalChoice, run_note

PolicyFunction: TypeAlias = Callable[
    [ToolExecution, "str | None"], "bool | Approval | Awaitable[bool | Approval]"]
ApprovalPolicy: TypeAlias = Literal["approve", "reject"] | PolicyFunction

_T = TypeVar("_T")

REMEMBERED_RUNS = 64
"""How many runs' "approve all <tool> calls in this run" answers are remembered."""


class ApprovalHost(Protocol):
    """Something that can show an approval inside the card of call ``call_id``
    (a :class:`~dsh_jupyter.widgets.LiveView`); returns False if it has no such card."""

    def show_approval(self, call_id: str, card: ApprovalCard) -> bool: ...


class NotebookApprovals:
    """An :class:`~dsh_jupyter.registry.ApprovalService` with Approve / Reject buttons
    (and "Approve all <tool> calls in this run" for the sub-calls of a program)."""

    def __init__(self, policy: ApprovalPolicy = "reject", *, interactive: bool | None = None,
                 frontend_timeout: float = 5.0, timeout: float | None = None) -> None:
        if policy not in ("approve", "reject") and not callable(policy):
            raise RegistrationError(
                f"policy must be 'approve', 'reject' or a callable, got {policy!r}")
        for label, value in (("frontend_timeout", frontend_timeout), ("timeout", timeout)):
            if value is not None and (isinstance(value, bool) or value <= 0):
                raise RegistrationError(f"{label} must be a positive number of seconds")
        self.policy = policy
        self.interactive = interactive
        self.frontend_timeout = frontend_timeout
        self.timeout = timeout
        self._hosts: list[ApprovalHost] = []
        # run (the run_code call's token) -> tools approved for the rest of that run;
        # insertion order is recency, the oldest run is forgotten first.
        self._approved_runs: dict[ExecutionToken, set[str]] = {}

    @property
    def policy_name(self) -> str:
        policy = self.policy
        return policy if isinstance(policy, str) else getattr(policy, "__name__", "policy")

    def add_host(self, host: ApprovalHost) -> Undo:
        """Offer prompts to ``host`` first (newest host first); returns an undo."""
        self._hosts.insert(0, host)

        def undo() -> None:
            if host in self._hosts:
                self._hosts.remove(host)

        return Disposer(undo, f"approval host {type(host).__name__}")

    async def request(self, execution: ToolExecution, reason: str | None) -> Approval:
        card = ApprovalCard(name=execution.name, arguments=execution.arguments, reason=reason,
                            sub_call=execution.parent is not None, run_id=asking_run())
        handle = self._place(execution.call_id, card)
        try:
            approval = self._remembered(execution)
            if approval is None:
                approval = await self._decide(execution, reason, card)
        except BaseException:
            card.cancel()
            _update(handle, card)
            raise
        card.answered(approval)
        _update(handle, card)
        return approval

    def _remembered(self, execution: ToolExecution) -> Approval | None:
        """The approval of an earlier "approve all" for this tool in this run, if any."""
        run = execution.parent
        if run is None or execution.name not in self._approved_runs.get(run, ()):
            return None
        return Approval(approved=True, answered_by=BY_USER, note=run_note(execution.name),
                        for_run=True)

    def _remember(self, run: ExecutionToken, name: str) -> None:
        names = self._approved_runs.pop(run, set())
        names.add(name)
        self._approved_runs[run] = names
        while len(self._approved_runs) > REMEMBERED_RUNS:
            del self._approved_runs[next(iter(self._approved_runs))]

    def _chosen(self, execution: ToolExecution, choice: ApprovalChoice) -> Approval:
        if choice.action == "reject":
            return Approval(approved=False, answered_by=BY_USER, note=choice.reason)
        if choice.action == "approve-run" and execution.parent is not None:
            self._remember(execution.parent, execution.name)
            return Approval(approved=True, answered_by=BY_USER, note=run_note(execution.name),
                            for_run=True)
        return Approval(approved=True, answered_by=BY_USER)

    def _place(self, call_id: str, card: ApprovalCard) -> Any:
        """Show ``card`` in a host's card, else as its own output; the display handle."""
        for host in tuple(self._hosts):
            if host.show_approval(call_id, card):
                return None
        if self.interactive is False or not _ipw.in_kernel():
            return None
        return _ipw.display(card._repr_mimebundle_())

    async def _decide(self, execution: ToolExecution, reason: str | None,
                      card: ApprovalCard) -> Approval:
        if self.interactive is False:
            return await self._by_policy(execution, reason, "non-interactive")
        if self.interactive is None and not _ipw.in_kernel():
            return await self._by_policy(execution, reason, "no IPython kernel")
        loop = asyncio.get_running_loop()
        clicked: asyncio.Future[ApprovalChoice] = loop.create_future()

        def on_answer(choice: ApprovalChoice) -> None:  # may run outside the loop's thread
            loop.call_soon_threadsafe(_settle, clicked, choice)

        card.on_answer = on_answer
        if self.interactive is None and not await _rendered(card.widget, clicked,
                                                            self.frontend_timeout):
            return await self._by_policy(execution, reason, "no widget front end")
        aborted = asyncio.ensure_future(execution.signal.wait())
        waiting: set[asyncio.Future[Any]] = {clicked, aborted}
        try:
            done, _ = await asyncio.wait(waiting, timeout=self.timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
        if clicked in done:
            return self._chosen(execution, clicked.result())
        if aborted in done:
            return Approval(approved=False, answered_by=BY_ABORT, note=aborted.result())
        return await self._by_policy(execution, reason, f"no answer within {self.timeout:g} s")

    async def _by_policy(self, execution: ToolExecution, reason: str | None,
                         why: str) -> Approval:
        who = f"policy {self.policy_name!r}"
        if self.policy in ("approve", "reject"):
            return Approval(approved=self.policy == "approve", answered_by=who, note=why)
        assert callable(self.policy)
        answer = self.policy(execution, reason)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, Approval):
            return Approval(approved=answer.approved, answered_by=who,
                            note=f"{why}; {answer.note}" if answer.note else why)
        return Approval(approved=bool(answer), answered_by=who, note=why)


async def _rendered(widget: Any, clicked: asyncio.Future[Any], seconds: float) -> bool:
    """Wait until a front end reports a view of ``widget`` (or a click); False on timeout."""
    if (widget._view_count or 0) > 0:
        return True
    loop = asyncio.get_running_loop()
    seen: asyncio.Future[bool] = loop.create_future()

    def observe(change: dict[str, Any]) -> None:
        if (change["new"] or 0) > 0:
            loop.call_soon_threadsafe(_settle, seen, True)

    widget.observe(observe, names="_view_count")
    try:
        done, _ = await asyncio.wait({seen, clicked}, timeout=seconds,
                                     return_when=asyncio.FIRST_COMPLETED)
        return bool(done)
    finally:
        widget.unobserve(observe, names="_view_count")
        seen.cancel()


def _settle(future: asyncio.Future[_T], value: _T) -> None:
    if not future.done():
        future.set_result(value)


def _update(handle: Any, card: ApprovalCard) -> None:
    if handle is not None:
        handle.update(card._repr_mimebundle_(), raw=True)
