"""The notebook's side of durable approvals, through a real registry, journal (SQLite on
disk) and program (the in-process runtime, no kernel): the live approval card of a
journaled run says so; :func:`show_pending` draws a card per waiting run whose click
resolves and resumes it, the run's card marking the calls the journal answered; what
cannot be resumed is one line. The kernel restart itself:
tests/integration/widgets/test_pending_kernel.py."""

from __future__ import annotations

import asyncio
import os
import re
import socket
from pathlib import Path

from widget_support import buttons, walk, widget_html

from dsh_jupyter import ToolCall, ToolRegistry, ToolResult
from dsh_jupyter.abort import AbortController
from dsh_jupyter.durable import RunRecord, SqliteJournalStore, tools_fingerprint
from dsh_jupyter.kernel import InProcessRuntime
from dsh_jupyter.registry.execution import ToolExecution
from dsh_jupyter.registry.policy import Approval, Ask, PreDecision
from dsh_jupyter.registry.scope import AgentScope
from dsh_jupyter.widgets import (
    ApprovalCard,
    LiveView,
    NotebookApprovals,
    PendingApprovals,
    RunCodeCard,
    show_pending,
)
from dsh_jupyter.widgets.pending import NO_JOURNAL, NONE_WAITING

PROGRAM = """
first = await tools.read({"path": "a.txt"})
print("read", first)
removed = await tools.rm({"path": "a.txt"})
print("rm", removed)
return await tools.read({"path": "b.txt"})
"""
JOURNALED = "journaled: survives a restart"


class Prompts:
    """An approval host in front of a live view that also hands each prompt to the test."""

    def __init__(self, view: LiveView) -> None:
        self.view = view
        self.shown: asyncio.Queue[ApprovalCard] = asyncio.Queue()

    def show_approval(self, call_id: str, card: ApprovalCard) -> bool:
        self.shown.put_nowait(card)
        return self.view.show_approval(call_id, card)


class Notebook:
    """What a notebook's setup cell makes: a journaled registry (or not) with two tools
    that count their bodies, ``rm`` asking for approval, clickable approvals and a live
    view (built, as if displayed)."""

    def __init__(self, journal: Path | None) -> None:
        self.bodies: list[str] = []
        self.approvals = NotebookApprovals("reject", interactive=True)
        self.registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime(),
                                     journal=journal, approval=self.approvals)

        @self.registry.tool
        async def read(path: str) -> str:
            """Read a file."""
            self.bodies.append(f"read {path}")
            return f"<{path}>"

        @self.registry.tool
        async def rm(path: str) -> str:
            """Remove a file."""
            self.bodies.append(f"rm {path}")
            return f"removed {path}"

        def ask_for_rm(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
            return Ask("rm deletes a file") if execution.name == "rm" else None

        self.registry.on_pre_execute(ask_for_rm)
        self.view = LiveView(self.registry)
        self.view.widget  # noqa: B018  (displayed)
        self.prompts = Prompts(self.view)
        self.approvals.add_host(self.prompts)

    def start(self, signal: object = None, program: str = PROGRAM,
              agent: AgentScope | None = None) -> asyncio.Future[ToolResult]:
        return asyncio.ensure_future(self.registry.execute(ToolCall(
            call_id="c1", name="run_code", signal=signal,  # type: ignore[arg-type]
            arguments={"code": program, "description": "Tidy up"}, agent=agent)))

    async def prompt(self) -> ApprovalCard:
        async with asyncio.timeout(10):
            return await self.prompts.shown.get()


async def paused(path: Path, program: str = PROGRAM,
                 scope: str | None = None) -> tuple[Notebook, ApprovalCard, str]:
    """A run (made in a new scope named ``scope``, if given) whose ``rm`` waits for a click
    that never comes: its call is stopped (as a dying kernel leaves it) and the run stays
    waiting in the journal."""
    notebook = Notebook(path)
    stop = AbortController()
    agent = notebook.registry.scope(scope) if scope is not None else None
    run = notebook.start(stop.signal, program, agent)
    card = await notebook.prompt()
    stop.abort("the kernel went away")
    await run
    await notebook.registry.aclose()
    async with SqliteJournalStore(path) as store:
        (pending,) = await store.list_pending()
    return notebook, card, pending.run_id


async def test_the_live_card_of_a_journaled_run_names_it_and_says_it_is_journaled(
        tmp_path: Path) -> None:
    first, card, run_id = await paused(tmp_path / "journal.sqlite")
    assert card.run_id == run_id
    assert f"run {run_id} · {JOURNALED}" in widget_html(card.widget)
    # The text fallbacks say it too, without the random id (they stay deterministic).
    assert JOURNALED in str(card) and run_id not in str(card)
    assert first.bodies == ["read a.txt"]

    plain = Notebook(None)  # without a journal nothing is said about restarts
    run = plain.start()
    unjournaled = await plain.prompt()
    assert unjournaled.run_id is None
    assert "journaled" not in widget_html(unjournaled.widget)
    buttons(unjournaled.widget)["Approve"].click()
    assert not (await run).is_error


async def after_a_restart(path: Path,
                          program: str = PROGRAM) -> tuple[str, Notebook, PendingApprovals]:
    """A run paused on ``rm`` (see :func:`paused`), then the setup cell again and the
    waiting approvals read: the run's id, the new notebook and its pending view."""
    _, _, run_id = await paused(path, program)
    second = Notebook(path)
    view = show_pending(second.registry)
    await view.wait()
    return run_id, second, view


async def test_a_click_resolves_and_resumes_the_run_with_each_tool_called_once(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    first, _, run_id = await paused(path)
    second = Notebook(path)  # the setup cell, run again after the restart
    view = show_pending(second.registry)
    await view.wait()
    (run,) = view.runs
    assert (run.run_id, run.state) == (run_id, "waiting")
    assert run.card.title() == "Approve rm?"
    text = str(view)
    assert text.startswith("Approvals waiting in the journal (1)")
    for expected in ("rm deletes a file", '"path": "a.txt"', JOURNALED):
        assert expected in text, (expected, text)
    assert re.search(r"call 2 · asked (just now|\d+ s ago) · asked in this kernel", text), text
    assert f"run {run_id} · {JOURNALED}" in widget_html(view.widget)

    buttons(view.widget)["Approve"].click()
    await view.wait()
    assert run.state == "done" and run.error is None
    assert run.result is not None and not run.result.is_error
    assert run.result.value == {"logs": ["read <a.txt>", "rm removed a.txt"],
                                "result": "<b.txt>"}
    # Each body ran once: the first read before the restart, the rest after it.
    assert first.bodies + second.bodies == ["read a.txt", "rm a.txt", "read b.txt"]
    assert run.card.title() == "rm approved by you"
    assert run.view is not None
    card = run.view.main
    assert isinstance(card, RunCodeCard)
    assert [(c.name, c.replayed, c.status) for c in card.calls.values()] == [
        ("read", True, "ok"), ("rm", False, "ok"), ("read", False, "ok")]
    text = str(view)
    assert f"[ok] Resume run {run_id} — run_code" in text
    assert '[ok: from the journal] read — path="a.txt"' in text, text
    assert '[ok] rm — path="a.txt"' in text and '[ok] read — path="b.txt"' in text
    assert "<b.txt>" in text
    html = widget_html(view.widget)  # the run's card is in the widget, under the question
    assert "from the journal" in html and "&lt;b.txt&gt;" in html
    assert not second.view.cards  # the run's card is the view's, not shown twice
    journaled = await second.registry.journal.load_run(run_id)  # type: ignore[union-attr]
    assert journaled is not None and journaled.status == "done"
    assert journaled.approvals[0].decision == Approval(approved=True, answered_by="user")

    again = show_pending(second.registry)
    await again.wait()
    assert again.runs == [] and again.message == NONE_WAITING
    assert str(again) == f"Approvals waiting in the journal\n  {NONE_WAITING}"
    await second.registry.aclose()


async def test_approve_all_resumes_the_run_asking_no_more_for_that_tool(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    run_id, second, view = await after_a_restart(path, """
for name in ("a.txt", "b.txt", "c.txt"):
    print(await tools.rm({"path": name}))
""")
    buttons(view.widget)["Approve all rm calls in this run"].click()
    await view.wait()
    (run,) = view.runs
    assert run.state == "done" and run.result is not None and not run.result.is_error
    assert second.bodies == ["rm a.txt", "rm b.txt", "rm c.txt"]
    assert second.prompts.shown.empty()  # the later rm calls asked nothing
    note = "approved all rm calls of this run"
    assert run.card.title() == f"rm approved by you ({note})"
    journaled = await second.registry.journal.load_run(run_id)  # type: ignore[union-attr]
    assert journaled is not None and journaled.status == "done"
    assert [a.decision for a in journaled.approvals] == [
        Approval(approved=True, answered_by="user", note=note, for_run=True)]
    await second.registry.aclose()


async def test_a_rejection_and_its_reason_reach_the_resumed_program(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    run_id, second, view = await after_a_restart(path)
    [reason] = [w for w in walk(view.widget) if type(w).__name__ == "Text"]
    reason.value = "keep a.txt"
    buttons(view.widget)["Reject"].click()
    await view.wait()
    (run,) = view.runs
    assert run.state == "done" and run.result is not None and run.result.is_error
    assert "rejected by user: keep a.txt" in run.result.text
    assert run.card.title() == "rm rejected by you: keep a.txt"
    assert second.bodies == []  # read a.txt came from the journal; rm was refused
    journaled = await second.registry.journal.load_run(run_id)  # type: ignore[union-attr]
    assert journaled is not None
    assert journaled.approvals[0].decision == Approval(approved=False, answered_by="user",
                                                       note="keep a.txt")
    await second.registry.aclose()


async def test_a_run_made_in_a_scope_resumes_once_the_scope_is_made_again(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    _, _, run_id = await paused(path, scope="analyst")
    second = Notebook(path)  # the setup cell again, before it makes its scope
    view = show_pending(second.registry)
    await view.wait()
    buttons(view.widget)["Approve"].click()
    await view.wait()
    (run,) = view.runs
    assert run.state == "failed" and run.error is not None
    assert run.error.startswith(f"run {run_id} was made in scope 'analyst', which this "
                                "process does not have: create that scope")
    assert run.view is None and run.card.state == "waiting"  # nothing recorded, nothing ran
    assert second.bodies == []

    seen: list[str] = []  # the scope's own hook sees the calls the resumed run makes

    def note(execution: ToolExecution, decision: PreDecision) -> None:
        seen.append(execution.name)

    second.registry.scope("analyst").on_pre_execute(note)
    buttons(view.widget)["Approve"].click()
    await view.wait()
    assert view.runs == [run]
    (run,) = view.runs
    assert run.state == "done", run.error
    assert second.bodies == ["rm a.txt", "read b.txt"]
    assert seen == ["run_code", "rm", "read"]  # the replayed read never reached a hook
    await second.registry.aclose()


async def test_a_question_answered_elsewhere_first_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    run_id, second, view = await after_a_restart(path)
    async with SqliteJournalStore(path) as cli:  # `dsh-jupyter approvals approve`
        await cli.resolve(run_id, Approval(approved=True, answered_by="cli"))
    buttons(view.widget)["Approve"].click()
    await view.wait()
    (run,) = view.runs
    assert run.state == "failed" and run.result is None
    assert run.error is not None and "\n" not in run.error
    assert f"has no approval waiting in run {run_id} (it is decided): answered already?" \
        in run.error
    assert f"not resumed: {run.error}" in str(view)
    assert run.view is None and run.card.state == "waiting"  # no run card: nothing ran
    assert second.bodies == []
    await second.registry.aclose()


async def test_a_run_whose_host_still_runs_is_left_to_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    notebook = Notebook(path)
    visible = notebook.registry.visible()
    fingerprint = tools_fingerprint(d for name, d in visible.items() if name != "run_code")
    host = f"{os.getppid()}@{socket.gethostname()}"  # a live process: our parent
    async with SqliteJournalStore(path) as store:
        await store.record_run(RunRecord(run_id="r1", program=PROGRAM, call_id="c9",
                                         tools_fingerprint=fingerprint, host=host))
        await store.record_call("r1", 1, "rm", {"path": "a.txt"})
        await store.mark_pending("r1", 1, "rm deletes a file")
    view = show_pending(notebook.registry)
    await view.wait()
    (run,) = view.runs
    assert f"its host {host} still runs: answer it there" in str(view)
    buttons(view.widget)["Approve"].click()
    await view.wait()
    assert run.state == "failed" and run.error is not None
    assert run.error.startswith(f"run r1 still has its host, process {host}: answer it there")
    assert notebook.bodies == []
    # Nothing was recorded: the card can be answered again (once that host is gone).
    assert run.choice is None and run.card.state == "waiting"
    async with SqliteJournalStore(path) as store:
        assert [p.run_id for p in await store.list_pending()] == ["r1"]
    await notebook.registry.aclose()


async def test_without_a_journal_or_with_a_bad_one_the_view_is_one_line(
        tmp_path: Path) -> None:
    view = show_pending(Notebook(None).registry)
    await view.wait()
    assert view.runs == [] and view.message == NO_JOURNAL
    assert str(view) == f"Approvals waiting in the journal\n  {NO_JOURNAL}"
    assert "this registry has no journal" in widget_html(view.widget)

    bad = tmp_path / "notes.txt"
    bad.write_text("not a database " * 100)
    broken = Notebook(bad)
    view = PendingApprovals(broken.registry)  # no running task: read when awaited
    await view.wait()
    assert view.message is not None and "\n" not in view.message
    assert view.message.startswith(f"the journal {bad} is unreadable")
