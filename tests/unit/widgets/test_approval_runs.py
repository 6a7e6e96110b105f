"""Approvals of run_code sub-calls, through a real registry and program (the in-process
runtime, no kernel): what a rejection's reason does to the program, and "approve all
<tool> calls in this run"."""

from __future__ import annotations

import asyncio
from typing import Any

from widget_support import buttons, walk

from dsh_jupyter import Ask, ToolCall, ToolRegistry, ToolResult, define_tool
from dsh_jupyter.testing import InProcessRuntime
from dsh_jupyter.widgets import ApprovalCard, LiveView, NotebookApprovals, RunCodeCard

APPROVE_ALL = "Approve all read_csv calls in this run"
NOTE = "approved all read_csv calls of this run"


class Prompts:
    """An approval host in front of a live view: it hands every prompt to the view (so
    it shows in the sub-call's card) and to the test."""

    def __init__(self, view: LiveView) -> None:
        self.view = view
        self.shown: asyncio.Queue[ApprovalCard] = asyncio.Queue()

    def show_approval(self, call_id: str, card: ApprovalCard) -> bool:
        self.shown.put_nowait(card)
        return self.view.show_approval(call_id, card)

    async def next(self) -> ApprovalCard:
        """The next prompt that waits for a click (cards answered as they were shown,
        by an earlier "approve all", are passed over)."""
        async with asyncio.timeout(5):
            card = await self.shown.get()
            while card.answer is not None:
                card = await self.shown.get()
        assert card.on_answer is not None  # set before the request first waits
        return card


def make_registry() -> tuple[ToolRegistry, LiveView, Prompts]:
    service = NotebookApprovals("reject", interactive=True)
    registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime(), approval=service)
    for name in ("read_csv", "plot"):
        registry.register(define_tool(
            name=name, parameters={"type": "object"},
            output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
            execute=lambda args, ctx: f"rows of {args.get('path', '?')}"))
    registry.on_pre_execute(lambda execution, decision: Ask("reads the sales data")
                            if execution.name != "run_code" else None)
    view = LiveView(registry)
    view.widget  # noqa: B018  (displayed, as in a notebook)
    prompts = Prompts(view)
    service.add_host(prompts)  # the newest host is asked first
    return registry, view, prompts


def start(registry: ToolRegistry, code: str, call_id: str = "r1") -> asyncio.Task[ToolResult]:
    return asyncio.ensure_future(registry.execute(ToolCall(
        call_id=call_id, name="run_code",
        arguments={"code": code, "description": "Summarize the sales data"})))


def returned(result: ToolResult) -> Any:
    """What the program returned, as run_code renders it."""
    assert not result.is_error, result
    assert isinstance(result.value, dict)
    return result.value["result"]


async def test_a_rejection_reason_reaches_the_program() -> None:
    registry, view, prompts = make_registry()
    pending = start(registry, """\
try:
    await tools.read_csv({"path": "sales.csv"})
except ToolCallError as error:
    return error.message""")
    card = await prompts.next()
    [reason] = [w for w in walk(card.widget) if type(w).__name__ == "Text"]
    reason.value = "use sales_2024.csv instead"
    buttons(card.widget)["Reject"].click()
    message = returned(await pending)
    assert "use sales_2024.csv instead" in message
    assert message == ("reads the sales data (rejected by user: use sales_2024.csv instead)")
    assert card.title() == "read_csv rejected by you: use sales_2024.csv instead"
    assert ("      approval: rejected by you: use sales_2024.csv instead") in str(view)


async def test_approve_all_covers_the_rest_of_the_run_only() -> None:
    registry, view, prompts = make_registry()
    program = """\
rows = []
for month in ("jan", "feb", "mar"):
    rows.append(await tools.read_csv({"path": month + ".csv"}))
rows.append(await tools.plot({}))
return rows"""
    pending = start(registry, program)
    first = await prompts.next()
    assert first.title() == "Approve read_csv?"
    buttons(first.widget)[APPROVE_ALL].click()
    # The other two read_csv calls are approved without a prompt; plot still asks.
    plot = await prompts.next()
    assert plot.title() == "Approve plot?"
    assert APPROVE_ALL not in buttons(plot.widget)
    buttons(plot.widget)["Approve"].click()
    assert returned(await pending) == ["rows of jan.csv", "rows of feb.csv", "rows of mar.csv",
                                      "rows of ?"]
    [run] = view.cards
    assert isinstance(run, RunCodeCard)
    approvals = [card.approval for card in run.calls.values()]
    assert [a.title() if a else None for a in approvals] == [
        f"read_csv approved by you ({NOTE})"] * 3 + ["plot approved by you"]
    assert str(view).count(f"approval: approved by you ({NOTE})") == 3

    # Another run asks again.
    pending = start(registry, program, call_id="r2")
    again = await prompts.next()
    assert again.title() == "Approve read_csv?"
    buttons(again.widget)["Reject"].click()
    assert (await pending).is_error  # the program did not catch the denial
