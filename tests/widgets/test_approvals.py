"""NotebookApprovals: buttons while the caller awaits, a policy when nobody can click."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from widget_support import buttons

from dsh_jupyter import (
    AbortController,
    Approval,
    Ask,
    ToolCall,
    ToolExecution,
    ToolRegistry,
    define_tool,
)
from dsh_jupyter.abort import AbortSignal
from dsh_jupyter.errors import RegistrationError
from dsh_jupyter.registry import ExecutionToken
from dsh_jupyter.widgets import ApprovalCard, NotebookApprovals
from dsh_jupyter.widgets.approvals import _rendered


class Host:
    """Shows every prompt (what a LiveView does with the calls it knows)."""

    def __init__(self) -> None:
        self.cards: list[ApprovalCard] = []
        self._shown = asyncio.Event()

    def show_approval(self, call_id: str, card: ApprovalCard) -> bool:
        self.cards.append(card)
        self._shown.set()
        return True

    async def next_card(self) -> ApprovalCard:
        await self._shown.wait()
        return self.cards[-1]


def execution(signal: AbortSignal | None = None) -> ToolExecution:
    return ToolExecution(token=ExecutionToken(), call_id="c1", name="rm",
                         arguments={"path": "<img src=x onerror=alert(1)>"},
                         signal=signal or AbortSignal())


@pytest.mark.parametrize(("policy", "approved"), [("approve", True), ("reject", False)])
async def test_non_interactive_policy_answers_and_the_card_says_so(policy: Any,
                                                                   approved: bool) -> None:
    service = NotebookApprovals(policy, interactive=False)
    host = Host()
    service.add_host(host)
    answer = await service.request(execution(), "dangerous")
    assert answer == Approval(approved=approved, answered_by=f"policy {policy!r}",
                              note="non-interactive")
    card = host.cards[0]
    verb = "approved" if approved else "rejected"
    assert str(card).splitlines() == [
        f"[{verb}] Approve rm?", "  dangerous", "  arguments:",
        '    {', '      "path": "<img src=x onerror=alert(1)>"', "    }",
        f"  approval: {verb} by policy {policy!r}: non-interactive"]
    assert "<img" not in card._repr_mimebundle_()["text/html"]


async def test_outside_a_kernel_the_policy_answers_at_once() -> None:
    answer = await NotebookApprovals("reject").request(execution(), None)
    assert answer.note == "no IPython kernel" and not answer.approved


async def test_policy_functions_sync_and_async() -> None:
    def allow_reads(execution: ToolExecution, reason: str | None) -> bool:
        return execution.name == "rm"

    async def ask_audit(execution: ToolExecution, reason: str | None) -> Approval:
        return Approval(approved=False, note="audit says no")

    answer = await NotebookApprovals(allow_reads, interactive=False).request(execution(), None)
    assert answer == Approval(approved=True, answered_by="policy 'allow_reads'",
                              note="non-interactive")
    answer = await NotebookApprovals(ask_audit, interactive=False).request(execution(), None)
    assert answer == Approval(approved=False, answered_by="policy 'ask_audit'",
                              note="non-interactive; audit says no")


@pytest.mark.parametrize(("button", "approved"), [("Approve", True), ("Reject", False)])
async def test_a_click_answers_while_the_caller_awaits(button: str, approved: bool) -> None:
    service = NotebookApprovals("reject", interactive=True)
    host = Host()
    service.add_host(host)
    pending = asyncio.ensure_future(service.request(execution(), "sure?"))
    card = await host.next_card()
    await asyncio.sleep(0.01)
    assert not pending.done() and card.state == "waiting"
    controls = buttons(card.widget)
    controls[button].click()
    assert await pending == Approval(approved=approved, answered_by="user")
    assert card.summary().value == ("approved" if approved else "rejected") + " by user"
    assert all(b.disabled for b in controls.values())
    controls["Approve"].click()  # a late click changes nothing
    assert card.answer == Approval(approved=approved, answered_by="user")


async def test_without_an_answer_the_policy_answers_after_the_timeout() -> None:
    service = NotebookApprovals("approve", interactive=True, timeout=0.05)
    answer = await service.request(execution(), None)
    assert answer == Approval(approved=True, answered_by="policy 'approve'",
                              note="no answer within 0.05 s")


async def test_an_aborted_call_stops_waiting() -> None:
    controller = AbortController()
    service = NotebookApprovals("approve", interactive=True)
    host = Host()
    service.add_host(host)
    pending = asyncio.ensure_future(service.request(execution(controller.signal), None))
    await host.next_card()  # the prompt is up: the call waits for an answer
    controller.abort("user interrupted")
    assert await pending == Approval(approved=False, answered_by="abort",
                                     note="user interrupted")


async def test_a_cancelled_caller_leaves_a_cancelled_card() -> None:
    service = NotebookApprovals("approve", interactive=True)
    host = Host()
    service.add_host(host)
    pending = asyncio.ensure_future(service.request(execution(), None))
    card = await host.next_card()
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    assert card.state == "cancelled"
    assert str(card).endswith("approval: cancelled before an answer")


async def test_front_end_detection_waits_for_a_rendered_view() -> None:
    card = ApprovalCard(name="rm", arguments={}, reason=None)
    widget = card.widget
    assert widget._view_count == 0  # the front end is asked to count its views
    never: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    assert not await _rendered(widget, never, 0.05)

    async def front_end_renders() -> None:
        await asyncio.sleep(0.02)
        widget._view_count = 1  # what the comm message from a front end does

    task = asyncio.ensure_future(front_end_renders())
    assert await _rendered(widget, never, 5.0)
    await task
    assert await _rendered(widget, never, 0.01)  # already rendered


async def test_through_the_pipeline_the_denial_names_the_policy() -> None:
    registry = ToolRegistry(approval=NotebookApprovals("reject", interactive=False))
    registry.register(define_tool(name="rm", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=lambda a, c: "gone"))
    registry.on_pre_execute(lambda e, d: Ask("destructive"))
    result = await registry.execute(ToolCall(call_id="c1", name="rm"))
    assert result.error is not None and result.error.code == "DENIED"
    assert result.error.message == "destructive (rejected by policy 'reject': non-interactive)"


def test_configuration_is_checked() -> None:
    with pytest.raises(RegistrationError, match="policy must be"):
        NotebookApprovals("maybe")  # type: ignore[arg-type]
    with pytest.raises(RegistrationError, match="timeout must be"):
        NotebookApprovals(timeout=0)
    with pytest.raises(RegistrationError, match="frontend_timeout must be"):
        NotebookApprovals(frontend_timeout=-1)


def test_hosts_are_asked_newest_first_and_can_be_removed() -> None:
    service = NotebookApprovals()
    first, second = Host(), Host()
    undo_first = service.add_host(first)
    undo_second = service.add_host(second)
    assert service._hosts == [second, first]
    undo_second()
    undo_second()
    undo_first()
    assert service._hosts == []
