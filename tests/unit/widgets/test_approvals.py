"""NotebookApprovals: buttons while the caller awaits, a policy when nobody can click."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from widget_support import buttons, walk, widget_html

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
from dsh_jupyter.widgets.approval_card import REASON_PLACEHOLDER, ApprovalChoice
from dsh_jupyter.widgets.approvals import REMEMBERED_RUNS, _rendered


class Host:
    """Shows every prompt (what a displayed LiveView does with the calls it knows)."""

    def __init__(self) -> None:
        self.cards: list[ApprovalCard] = []
        self._new: asyncio.Queue[ApprovalCard] = asyncio.Queue()

    def show_approval(self, call_id: str, card: ApprovalCard) -> bool:
        card.widget  # noqa: B018  (built at once, as in a displayed view)
        self.cards.append(card)
        self._new.put_nowait(card)
        return True

    async def next_card(self) -> ApprovalCard:
        """The next card shown (in the order they were shown)."""
        async with asyncio.timeout(5):
            return await self._new.get()


def execution(signal: AbortSignal | None = None, *, parent: ExecutionToken | None = None,
              arguments: Any = None) -> ToolExecution:
    return ToolExecution(token=ExecutionToken(), call_id="c1", name="rm",
                         arguments=arguments or {"path": "<img src=x onerror=alert(1)>"},
                         signal=signal or AbortSignal(), parent=parent)


async def prompted(host: Host) -> ApprovalCard:
    """The next prompt, once it waits for a click."""
    card = await host.next_card()
    assert card.on_answer is not None  # set before the request first waits
    return card


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
        f"[{verb}] rm {verb} by policy {policy!r} (non-interactive)", "  dangerous",
        "  arguments:", '    {', '      "path": "<img src=x onerror=alert(1)>"', "    }"]
    # The line in the call's own card keeps the pipeline's wording.
    assert card.summary().value == f"{verb} by policy {policy!r}: non-interactive"
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
    card = await prompted(host)
    await asyncio.sleep(0.01)
    assert not pending.done() and card.state == "waiting"
    assert str(card).splitlines()[0] == "[waiting] Approve rm?"
    controls = buttons(card.widget)
    assert list(controls) == ["Approve", "Reject"]  # a top-level call: no "approve all"
    controls[button].click()
    assert await pending == Approval(approved=approved, answered_by="user")  # data: "user"
    verb = "approved" if approved else "rejected"
    assert card.title() == f"rm {verb} by you"  # the card: "you"
    assert card.summary().value == f"{verb} by you"
    assert all(b.disabled for b in controls.values())
    controls["Approve"].click()  # a late click changes nothing
    assert card.answer == Approval(approved=approved, answered_by="user")


@pytest.mark.parametrize(("typed", "note"), [("  wrong file  ", "wrong file"), ("   ", None)])
async def test_a_rejection_carries_the_typed_reason(typed: str, note: str | None) -> None:
    service = NotebookApprovals("approve", interactive=True)
    host = Host()
    service.add_host(host)
    pending = asyncio.ensure_future(service.request(execution(), None))
    card = await prompted(host)
    [reason] = [w for w in walk(card.widget) if type(w).__name__ == "Text"]
    assert reason.placeholder == REASON_PLACEHOLDER == "reason (optional; the program receives it)"
    reason.value = typed
    buttons(card.widget)["Reject"].click()
    assert await pending == Approval(approved=False, answered_by="user", note=note)
    assert card.title() == ("rm rejected by you: wrong file" if note else "rm rejected by you")
    assert str(card).splitlines()[0] == f"[rejected] {card.title()}"
    assert reason.disabled


async def test_a_click_from_another_thread_reaches_the_loop() -> None:
    # Comm messages (the click) may be handled outside the event loop's thread.
    service = NotebookApprovals("reject", interactive=True)
    host = Host()
    service.add_host(host)
    pending = asyncio.ensure_future(service.request(execution(), None))
    card = await prompted(host)
    await asyncio.to_thread(buttons(card.widget)["Approve"].click)
    assert await pending == Approval(approved=True, answered_by="user")


async def test_without_an_answer_the_policy_answers_after_the_timeout() -> None:
    service = NotebookApprovals("approve", interactive=True, timeout=0.05)
    host = Host()
    service.add_host(host)
    answer = await service.request(execution(), None)
    assert answer == Approval(approved=True, answered_by="policy 'approve'",
                              note="no answer within 0.05 s")
    card = host.cards[0]
    assert card.title() == "rm approved by policy 'approve' (no answer within 0.05 s)"
    assert card.summary().value == "approved by policy 'approve': no answer within 0.05 s"
    assert card._controls.layout.display == "none"  # no buttons left to click
    card = ApprovalCard(name="read_csv", arguments={}, reason=None)
    card.answered(Approval(approved=False, answered_by="policy 'reject'",
                           note=f"no answer within {30.0:g} s"))
    assert card.title() == "read_csv rejected by policy 'reject' (no answer within 30 s)"


@pytest.mark.parametrize(("parent", "what"), [(None, "call"), (ExecutionToken(), "run")])
async def test_an_aborted_call_stops_waiting(parent: ExecutionToken | None, what: str) -> None:
    controller = AbortController()
    service = NotebookApprovals("approve", interactive=True)
    host = Host()
    service.add_host(host)
    pending = asyncio.ensure_future(service.request(execution(controller.signal, parent=parent),
                                                    None))
    card = await prompted(host)  # the prompt is up: the call waits for an answer
    controller.abort("run_code settled")
    assert await pending == Approval(approved=False, answered_by="abort",
                                     note="run_code settled")
    assert card.state == "cancelled"
    assert card.title() == f"rm not answered: the {what} was stopped"
    assert card.summary().value == f"not answered: the {what} was stopped (run_code settled)"


async def test_a_cancelled_caller_leaves_an_unanswered_card() -> None:
    service = NotebookApprovals("approve", interactive=True)
    host = Host()
    service.add_host(host)
    pending = asyncio.ensure_future(service.request(execution(), None))
    card = await host.next_card()
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    assert card.state == "cancelled"
    assert str(card).splitlines()[0] == "[cancelled] rm not answered: the call was stopped"
    assert card.summary().value == "not answered: the call was stopped (cancelled)"


def test_arguments_are_unfolded_and_long_strings_clipped() -> None:
    long = "x" * 1_500
    card = ApprovalCard(name="write", reason=None,
                        arguments={"path": "a.txt", "lines": [long, "short"]})
    lines = str(card).splitlines()
    clipped = '"' + "x" * 1_000 + '… (500 more characters)"'
    assert lines[:4] == ["[waiting] Approve write?", "  arguments:", "    {",
                         '      "path": "a.txt",']
    assert any(line.strip().rstrip(",") == clipped for line in lines)
    assert lines.index("  all arguments:") > lines.index("  arguments:")
    assert f'"{long}"' in str(card)  # the full value is still there
    html = card._repr_mimebundle_()["text/html"]
    assert '<details class="dsh-details">' in html  # "all arguments": collapsed
    assert html.count("<details") == 1  # "arguments": open, not a disclosure
    assert str(ApprovalCard(name="w", arguments={"a": "y" * 1_000}, reason=None)).count(
        "y" * 1_000) == 1  # up to the limit: shown once, nothing clipped


def test_origin_is_shown_when_the_host_sets_it() -> None:
    card = ApprovalCard(name="read_csv", arguments={"path": "sales.csv"}, reason="reads data")
    card.widget  # noqa: B018  (built first: the host may set the origin at any time)
    card.origin = "from 'Summarize the sales data' · call 2 of 3"
    assert str(card).splitlines()[:3] == [
        "[waiting] Approve read_csv?", "  reads data",
        "  from 'Summarize the sales data' · call 2 of 3"]
    assert "call 2 of 3" in widget_html(card.widget)


def test_approve_all_is_offered_to_sub_calls_only() -> None:
    card = ApprovalCard(name="read_csv", arguments={}, reason=None, sub_call=True)
    chosen: list[ApprovalChoice] = []
    card.on_answer = chosen.append
    controls = buttons(card.widget)
    assert list(controls) == ["Approve", "Approve all read_csv calls in this run", "Reject"]
    controls["Approve all read_csv calls in this run"].click()
    assert chosen == [ApprovalChoice(action="approve-run")]


async def test_approve_all_is_remembered_per_run_and_tool() -> None:
    service = NotebookApprovals("reject", interactive=True)
    host = Host()
    service.add_host(host)
    run, other_run = ExecutionToken(), ExecutionToken()
    pending = asyncio.ensure_future(service.request(execution(parent=run), None))
    card = await prompted(host)
    card._clicked(ApprovalChoice(action="approve-run"))
    note = "approved all rm calls of this run"
    # for_run: a journal keeps it, and a resumed run applies it (tests/unit/codemode).
    assert await pending == Approval(approved=True, answered_by="user", note=note,
                                     for_run=True)
    assert card.title() == f"rm approved by you ({note})"
    # The same tool in the same run: approved at once, and the card says why.
    assert await service.request(execution(parent=run), None) == Approval(
        approved=True, answered_by="user", note=note, for_run=True)
    card = await host.next_card()
    assert card.title() == f"rm approved by you ({note})"
    assert card.on_answer is None  # it never waited for a click
    # Another run, or a top-level call, asks again.
    for parent in (other_run, None):
        pending = asyncio.ensure_future(service.request(execution(parent=parent), None))
        (await prompted(host))._clicked(ApprovalChoice(action="approve"))
        assert await pending == Approval(approved=True, answered_by="user")


def test_only_the_latest_runs_are_remembered() -> None:
    service = NotebookApprovals()
    runs = [ExecutionToken() for _ in range(REMEMBERED_RUNS + 1)]
    for run in runs:
        service._remember(run, "rm")
    service._remember(runs[1], "cp")  # used again: now the newest
    service._remember(ExecutionToken(), "rm")
    assert len(service._approved_runs) == REMEMBERED_RUNS
    assert runs[0] not in service._approved_runs and runs[2] not in service._approved_runs
    assert service._approved_runs[runs[1]] == {"rm", "cp"}


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
