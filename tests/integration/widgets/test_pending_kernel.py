"""Approvals that survive a kernel restart, in a real IPython kernel driven through
jupyter-client as a notebook front end drives it.

A setup cell makes a journaled registry whose two tools append a line per body call to a
counter file, ``rm`` asking for approval with clickable approvals
(``NotebookApprovals(interactive=True)``); a ``%%run_code`` cell's program reads, then
waits on ``rm``'s card for a click that never comes. The kernel is SIGKILLed and
restarted (what JupyterLab's restart does to a dead kernel: the same connection, a new
process), the setup cell runs again, ``%dsh_approvals`` draws the waiting run, and its
Approve button gets the comm message a browser sends for a click. The run resumes in
the new kernel: each tool body ran exactly once (the counter's lines), and the outputs
show the result, the first read marked as answered from the journal."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import AsyncKernelManager
from lab_harness import PENDING_PROGRAM, PENDING_SETUP

from dsh_jupyter.durable import SqliteJournalStore

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]
WIDGET = "application/vnd.jupyter.widget-view+json"
SECONDS = 120



class Frontend:
    """What a notebook front end does with a kernel: execute cells, send widget messages,
    and read every iopub message (the ones a click causes come after its cell)."""

    def __init__(self, manager: AsyncKernelManager) -> None:
        self.manager = manager
        self.client = manager.client()
        self.seen: list[dict[str, Any]] = []

    def execute(self, code: str) -> str:
        return str(self.client.execute(code))

    async def until(self, predicate: Callable[[dict[str, Any]], bool], what: str, *,
                    since: int | None = None) -> dict[str, Any]:
        """The first message satisfying ``predicate``: among those read already from
        index ``since`` on (if given), else the next ones read from iopub."""
        if since is not None:
            for message in self.seen[since:]:
                if predicate(message):
                    return message
        deadline = time.monotonic() + SECONDS
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {SECONDS} s; last messages: "
                                     f"{[m['msg_type'] for m in self.seen[-20:]]}")
            try:
                message = await self.client.get_iopub_msg(timeout=left)
            except Exception:  # queue.Empty: the deadline passed
                continue
            self.seen.append(message)
            if predicate(message):
                return message

    async def run(self, code: str) -> str:
        """Execute ``code`` to its end; the text it published (streams, errors, displays)."""
        msg_id = self.execute(code)
        texts: list[str] = []

        def done(message: dict[str, Any]) -> bool:
            if message["parent_header"].get("msg_id") != msg_id:
                return False
            content = message["content"]
            texts.append(content.get("text", ""))
            texts.append(content.get("data", {}).get("text/plain", ""))
            texts.extend(content.get("traceback", []))
            return bool(message["msg_type"] == "status"
                        and content["execution_state"] == "idle")

        await self.until(done, f"end of cell {code[:40]!r}")
        reply = await self.client.get_shell_msg(timeout=SECONDS)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = await self.client.get_shell_msg(timeout=SECONDS)
        text = "\n".join(t for t in texts if t)
        assert reply["content"]["status"] == "ok", text
        return text

    def click(self, comm_id: str) -> None:
        """The message ipywidgets' front end sends when a button is clicked."""
        self.client.shell_channel.send(self.client.session.msg("comm_msg", {
            "comm_id": comm_id, "data": {"method": "custom", "content": {"event": "click"}}}))


def widget_state(message: dict[str, Any]) -> dict[str, Any]:
    """The state a comm_open or an update carries (empty for other messages)."""
    if message["msg_type"] not in ("comm_open", "comm_msg"):
        return {}
    data = message["content"].get("data", {})
    state = data.get("state", {})
    return state if isinstance(state, dict) else {}


@pytest.fixture
async def frontend() -> AsyncIterator[Frontend]:
    manager = AsyncKernelManager(kernel_name="python3")
    await manager.start_kernel()
    front = Frontend(manager)
    front.client.start_channels()
    try:
        await front.client.wait_for_ready(timeout=60)
        yield front
    finally:
        front.client.stop_channels()
        await manager.shutdown_kernel(now=True)


async def pending_runs(journal: Path) -> list[str]:
    async with SqliteJournalStore(journal) as store:
        return [p.run_id for p in await store.list_pending()]


async def test_an_approval_survives_a_kernel_restart_and_a_click_resumes_the_run(
        frontend: Frontend, tmp_path: Path) -> None:
    journal, counter = tmp_path / "journal.sqlite", tmp_path / "bodies.txt"
    setup = PENDING_SETUP.format(counter=str(counter), journal=str(journal))
    await frontend.run(setup)

    # The program waits on rm's card; the card says the question is journaled.
    frontend.execute(PENDING_PROGRAM)
    asked = await frontend.until(
        lambda m: "journaled: survives a restart" in json.dumps(widget_state(m)),
        "approval card saying it is journaled")
    (run_id,) = await pending_runs(journal)
    assert f"run {run_id} · journaled: survives a restart" in json.dumps(
        widget_state(asked), ensure_ascii=False)
    assert counter.read_text().splitlines() == ["read a.txt"]

    # The kernel dies (SIGKILL) while the cell waits, and is restarted.
    provisioner: Any = frontend.manager.provisioner
    os.kill(provisioner.process.pid, signal.SIGKILL)
    # The restart kills what is left of the kernel's process group, reaps the dead
    # kernel and starts a new one on the same connection.
    await frontend.manager.restart_kernel(now=True)
    await frontend.client.wait_for_ready(timeout=60)
    assert await pending_runs(journal) == [run_id]  # the question outlived its kernel

    # Run the setup cell again, then show the waiting approvals.
    await frontend.run(setup)
    restarted = len(frontend.seen)
    shown = await frontend.run("%dsh_approvals")
    assert "Approvals waiting in the journal" in shown
    approve = await frontend.until(
        lambda m: m["msg_type"] == "comm_open"
        and widget_state(m).get("_model_name") == "ButtonModel"
        and widget_state(m).get("description") == "Approve",
        "Approve button of the waiting run", since=restarted)
    card = await frontend.until(
        lambda m: f"run {run_id} · journaled: survives a restart" in json.dumps(
            widget_state(m), ensure_ascii=False) and "has stopped" in json.dumps(
            widget_state(m)), "the waiting run's card, its host gone", since=restarted)
    assert "Approve rm?" in json.dumps(widget_state(card))

    # A click, as the browser sends it: the run resumes in this kernel, its card live.
    frontend.click(approve["content"]["comm_id"])
    final = await frontend.until(
        lambda m: m["msg_type"] == "update_display_data"
        and "[ok] Resume run" in m["content"]["data"].get("text/plain", ""),
        "the resumed run's result in the output")
    text = final["content"]["data"]["text/plain"]
    for expected in ("[approved] rm approved by you", '[ok: from the journal] read — path="a.txt"',
                     '[ok] rm — path="a.txt"', '[ok] read — path="b.txt"', "<b.txt>"):
        assert expected in text, (expected, text)
    assert WIDGET in final["content"]["data"]
    assert any("from the journal" in json.dumps(widget_state(m)) for m in frontend.seen)

    # Each tool body ran exactly once, across the restart.
    assert counter.read_text().splitlines() == ["read a.txt", "rm a.txt", "read b.txt"]
    assert await pending_runs(journal) == []
    after = await frontend.run("print(len(await registry.journal.list_pending()), 'waiting')")
    assert "0 waiting" in after
