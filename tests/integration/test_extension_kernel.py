"""``%%run_code`` and Kernel > Interrupt in a real IPython kernel started through
jupyter-client: the messages a front end receives (displays, widget updates, errors)
while a program runs, and after the user stops it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from jupyter_client.manager import AsyncKernelManager

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(180)]
WIDGET = "application/vnd.jupyter.widget-view+json"
CELL_SECONDS = 120

SETUP = """
%load_ext dsh_jupyter
import asyncio
from dsh_jupyter import ToolCall, ToolRegistry
from dsh_jupyter.kernel import KernelRuntime

runtime = await KernelRuntime().__aenter__()
registry = ToolRegistry(mode="code", code_runtime=runtime)

@registry.tool
async def slow(x: int) -> int:
    "Return x after a second."
    await asyncio.sleep(1.0)
    return x
"""

PROGRAM = """%%run_code --description "Count slowly" --out outcome
print("first line")
value = await tools.slow({"x": 1})
print("second line")
await asyncio.sleep(30)
return value
"""


@dataclass
class Cell:
    """The iopub messages of one executed cell, with when they arrived."""

    messages: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    reply: dict[str, Any] = field(default_factory=dict)

    def of(self, *types: str) -> list[dict[str, Any]]:
        return [m for _, m in self.messages if m["msg_type"] in types]

    def first(self, predicate: Any) -> float | None:
        return next((t for t, m in self.messages if predicate(m)), None)

    @property
    def text(self) -> str:
        """Every text/plain and stream text the cell published, in order."""
        parts = []
        for message in self.of("stream", "display_data", "update_display_data",
                               "execute_result", "error"):
            content = message["content"]
            if "text" in content:
                parts.append(content["text"])
            parts.append(content.get("data", {}).get("text/plain", ""))
            parts += content.get("traceback", [])
        return "\n".join(parts)


class Kernel:
    def __init__(self, manager: AsyncKernelManager) -> None:
        self.manager = manager
        self.client = manager.client()

    async def run(self, code: str, *, interrupt_when: Any = None,
                  interrupt_after: float | None = None) -> Cell:
        cell = Cell()
        msg_id = self.client.execute(code)
        interrupted = False
        if interrupt_after is not None:
            asyncio.get_running_loop().call_later(
                interrupt_after, lambda: asyncio.ensure_future(self.manager.interrupt_kernel()))
        deadline = time.monotonic() + CELL_SECONDS
        while True:
            message = await self.client.get_iopub_msg(timeout=deadline - time.monotonic())
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            cell.messages.append((time.monotonic(), message))
            if interrupt_when is not None and not interrupted and interrupt_when(message):
                interrupted = True
                await self.manager.interrupt_kernel()
            if (message["msg_type"] == "status"
                    and message["content"]["execution_state"] == "idle"):
                break
        while True:
            reply = await self.client.get_shell_msg(timeout=10)
            if reply["parent_header"].get("msg_id") == msg_id:
                cell.reply = reply["content"]
                return cell


@pytest.fixture
async def kernel() -> AsyncIterator[Kernel]:
    manager = AsyncKernelManager(kernel_name="python3")
    await manager.start_kernel()
    wrapped = Kernel(manager)
    wrapped.client.start_channels()
    try:
        await wrapped.client.wait_for_ready(timeout=60)
        setup = await wrapped.run(SETUP)
        assert setup.reply["status"] == "ok", setup.text
        yield wrapped
    finally:
        wrapped.client.stop_channels()
        await manager.shutdown_kernel(now=True)


def _widget_text(message: dict[str, Any]) -> str:
    """The HTML a widget update carries (``comm_msg`` with a ``value`` state)."""
    if message["msg_type"] != "comm_msg":
        return ""
    data = message["content"].get("data", {})
    return json.dumps(data.get("state", {})) if data.get("method") == "update" else ""


async def test_the_card_is_live_and_stop_leaves_it_with_the_logs(kernel: Kernel) -> None:
    cell = await kernel.run(PROGRAM, interrupt_when=lambda m: "second line" in _widget_text(m))
    # The card was the cell's output from the start (a widget with text fallbacks) ...
    shown = cell.of("display_data")
    assert shown and list(shown[0]["content"]["data"]) == [WIDGET]
    # ... and streamed: the first line and the started sub-call reached the front end
    # while the program was still running (the second line came a second later).
    first = cell.first(lambda m: "first line" in _widget_text(m))
    sub_call = cell.first(lambda m: "slow" in _widget_text(m) and "x=1" in _widget_text(m))
    second = cell.first(lambda m: "second line" in _widget_text(m))
    assert first is not None and sub_call is not None and second is not None
    assert first < second and sub_call < second
    # Kernel > Interrupt: no traceback, the cell ends normally, the card says who stopped
    # the program and keeps its lines.
    assert cell.reply["status"] == "ok", cell.text
    assert not cell.of("error")
    assert "CancelledError" not in cell.text and "Traceback" not in cell.text
    # The live output gave way to the outcome: the same widget, with text fallbacks.
    assert [m["content"]["wait"] for m in cell.of("clear_output")] == [True]
    (value,) = cell.of("execute_result")
    assert value["content"]["data"][WIDGET] == shown[0]["content"]["data"][WIDGET]
    final = value["content"]["data"]["text/plain"]
    assert final.startswith("[stopped] Count slowly — run_code")
    assert "Stopped by the user after" in final
    assert "first line" in final and "second line" in final
    # The program kernel is gone and the next cell runs.
    after = await kernel.run("print(outcome.stopped_by, outcome.result.error.code, "
                             "outcome.logs)")
    assert after.reply["status"] == "ok"
    assert "the user CODE_RUN_FAILED ['first line', 'second line']" in after.text
    again = await kernel.run("%%run_code --description again\nreturn await tools.slow({'x': 3})")
    assert again.reply["status"] == "ok" and "[ok] again" in again.text


async def test_interrupting_an_awaited_execute_shows_the_stopped_card(kernel: Kernel) -> None:
    code = ('result = await registry.execute(ToolCall(call_id="c1", name="run_code", arguments='
            '{"code": "print(\'started\')\\nawait asyncio.sleep(30)", "description": "Wait"}))')
    started = asyncio.get_running_loop().time()
    cell = await kernel.run(code, interrupt_after=4.0)
    assert asyncio.get_running_loop().time() - started < 30
    assert not cell.of("error"), cell.text  # no traceback
    text = cell.text
    assert "[stopped] Wait — run_code" in text
    assert "Stopped by the user after" in text and "started" in text
    assert "Stopped by the user after" in cell.of("stream")[-1]["content"]["text"]


async def test_a_live_view_does_not_show_the_cells_card_twice(kernel: Kernel) -> None:
    view = await kernel.run("from dsh_jupyter.widgets import LiveView\nview = LiveView(registry)")
    assert view.reply["status"] == "ok"
    cell = await kernel.run("%%run_code --description Once\nreturn 1")
    assert cell.reply["status"] == "ok"
    check = await kernel.run("print(len(view.cards), str(view))")
    assert "0 (no tool calls)" in check.text
    other = await kernel.run('await registry.execute(ToolCall(call_id="n1", name="run_code", '
                             'arguments={"code": "return 5", "description": "Elsewhere"}))\n'
                             "print(len(view.cards))")
    assert other.text.strip().endswith("1")


@pytest.fixture
async def bare_kernel() -> AsyncIterator[Kernel]:
    """A kernel with the extension loaded and nothing else (no runtime started)."""
    manager = AsyncKernelManager(kernel_name="python3")
    await manager.start_kernel()
    wrapped = Kernel(manager)
    wrapped.client.start_channels()
    try:
        await wrapped.client.wait_for_ready(timeout=60)
        setup = await wrapped.run("%load_ext dsh_jupyter\nfrom dsh_jupyter import ToolRegistry\n"
                                  "from dsh_jupyter.testing import InProcessRuntime")
        assert setup.reply["status"] == "ok", setup.text
        yield wrapped
    finally:
        wrapped.client.stop_channels()
        await manager.shutdown_kernel(now=True)


def _shown(cell: Cell) -> str:
    """All the text a front end shows for the cell: streams, tracebacks, displays."""
    parts = []
    for message in cell.of("stream", "error", "display_data", "execute_result"):
        content = message["content"]
        parts.append(content.get("text", ""))
        parts.append("\n".join(content.get("traceback", [])))
        parts.append(content.get("data", {}).get("text/plain", ""))
    return "".join(parts)


async def test_a_setup_mistake_shows_one_line(bare_kernel: Kernel) -> None:
    """Each mistake in setting up %%run_code (or %dsh_sdk) shows one line saying what is
    wrong and how to fix it: no traceback, no argparse usage, no SystemExit."""
    expected = [
        ("%%run_code\nreturn 1", "no ToolRegistry"),
        ("plain = ToolRegistry()\n", None),
        ("%%run_code\nreturn 1", "needs Code Mode"),
        ('coder = ToolRegistry(mode="code", code_runtime=InProcessRuntime())', None),
        # Several registries: the hint names the one that can run code (not "plain").
        ("%%run_code\nreturn 1", "name one: %%run_code coder"),
        ("%%run_code plain\nreturn 1", "needs Code Mode"),
        ("%%run_code nosuch\nreturn 1", "'nosuch' is not a ToolRegistry"),
        ("%%run_code coder --bogus\nreturn 1", "unrecognized arguments: --bogus"),
        ("%%run_code coder --scope\nreturn 1", "--scope: expected one argument"),
        ("%%run_code coder --scope nobody\nreturn 1", "no scope named 'nobody'"),
        ("%%run_code coder --description 'unclosed\nreturn 1", "No closing quotation"),
        ("%dsh_sdk --bogus", "unrecognized arguments: --bogus"),
        ("%dsh_sdk", "name one: %dsh_sdk coder"),
    ]
    for code, message in expected:
        cell = await bare_kernel.run(code)
        if message is None:
            assert cell.reply["status"] == "ok", _shown(cell)
            continue
        shown = _shown(cell)
        assert cell.reply["status"] == "error", (code, shown)
        assert not cell.of("error"), (code, shown)  # no traceback
        assert shown.count("\n") == 1 and shown.startswith("UsageError: "), (code, shown)
        assert message in shown, (code, shown)
    ran = await bare_kernel.run("%%run_code coder\nreturn 1")
    assert ran.reply["status"] == "ok" and "[ok] Run the cell's program" in _shown(ran)
