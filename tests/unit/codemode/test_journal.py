"""Durable Code Mode through the registry: ``ToolRegistry(journal=...)`` journals each
run_code run, a run stopped while it waits for an approval stays resumable, and
``registry.resume`` finishes it with every tool body run exactly once; a run whose
program diverges, whose call was in doubt, whose tools changed or whose store fails
stops with its kind and calls nothing it should not.

Programs run on :class:`InProcessRuntime` (the unit tier starts no kernel); the host
killed for real, with real kernels: tests/integration/durable/test_resume_kill.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from dsh_jupyter import ToolCall, ToolRegistry
from dsh_jupyter.abort import AbortController
from dsh_jupyter.durable import CallOutcome, JournaledRun, RunRecord, SqliteJournalStore
from dsh_jupyter.errors import JournalError, RegistrationError
from dsh_jupyter.events import SessionEvent
from dsh_jupyter.kernel import InProcessRuntime
from dsh_jupyter.registry.execution import ToolExecution
from dsh_jupyter.registry.policy import Approval, Ask, Deny, PreDecision
from dsh_jupyter.registry.scope import AgentScope

PROGRAM = """
first = await tools.read({"path": "a.txt"})
print("read", first)
removed = await tools.rm({"path": "a.txt"})
print("rm", removed)
return await tools.read({"path": "b.txt"})
"""


class Host:
    """A registry with a journal and two counted tools; ``rm`` asks for approval."""

    def __init__(self, path: Path, *, approval: object = None) -> None:
        self.bodies: list[str] = []
        self.registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime(),
                                     journal=path, approval=approval)  # type: ignore[arg-type]
        registry = self.registry

        @registry.tool
        async def read(path: str) -> str:
            """Read a file."""
            self.bodies.append(f"read {path}")
            return f"<{path}>"

        @registry.tool
        async def rm(path: str) -> str:
            """Remove a file."""
            self.bodies.append(f"rm {path}")
            return f"removed {path}"

        def ask_for_rm(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
            return Ask("rm deletes a file") if execution.name == "rm" else None

        registry.on_pre_execute(ask_for_rm)

    async def run(self, program: str = PROGRAM, *, call_id: str = "c1",
                  signal: object = None, agent: AgentScope | None = None) -> object:
        return await self.registry.execute(ToolCall(
            call_id=call_id, name="run_code", signal=signal,  # type: ignore[arg-type]
            arguments={"code": program, "description": "test"}, agent=agent))


def analyst(registry: ToolRegistry) -> AgentScope:
    """Scope 'analyst', whose own policy denies reading b.txt (the registry's allows it)."""
    scope = registry.scope("analyst")

    def no_b(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
        return Deny("b.txt is not the analyst's") \
            if execution.name == "read" and execution.arguments == {"path": "b.txt"} else None

    scope.on_pre_execute(no_b)
    return scope


class NeverAnswers:
    """An approval service whose user never clicks (the host dies first)."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.count = 0

    async def request(self, _execution: ToolExecution, _reason: str | None) -> Approval:
        self.count += 1
        self.asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class Answers:
    def __init__(self, approved: bool) -> None:
        self.approved = approved
        self.count = 0

    async def request(self, _execution: ToolExecution, _reason: str | None) -> Approval:
        self.count += 1
        return Approval(approved=self.approved)


async def pause(path: Path, program: str = PROGRAM, *,
                scope: Callable[[ToolRegistry], AgentScope] | None = None) -> tuple[Host, str]:
    """Run ``program`` (in the scope ``scope`` makes, if any) until rm waits for approval,
    then stop its host's call (as a dying host would leave it): the run stays ``waiting``
    in the journal."""
    approvals = NeverAnswers()
    host = Host(path, approval=approvals)
    stop = AbortController()
    agent = scope(host.registry) if scope is not None else None
    run = asyncio.ensure_future(host.run(program, signal=stop.signal, agent=agent))
    await asyncio.wait_for(approvals.asked.wait(), 10)
    stop.abort("the host went away")
    await run
    await host.registry.aclose()
    pending = await SqliteJournalStore(path).list_pending()
    assert len(pending) == 1, pending
    return host, pending[0].run_id


async def only_run(path: Path) -> JournaledRun | None:
    """The one run the journal at ``path`` holds, loaded."""
    async with SqliteJournalStore(path) as store:
        assert store._db is not None
        (run_id,) = [row[0] for row in store._db.execute("SELECT run_id FROM runs")]
        return await store.load_run(run_id)


async def test_a_run_is_journaled_with_its_calls_and_its_end(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    host = Host(path, approval=Answers(approved=True))
    result = await host.run()
    assert not result.is_error, result  # type: ignore[attr-defined]
    run = await only_run(path)
    assert run is not None and run.status == "done"
    assert run.run.program == PROGRAM and run.run.call_id == "c1"
    assert [(c.position, c.tool, c.state) for c in run.calls] == [
        (1, "read", "done"), (2, "rm", "done"), (3, "read", "done")]
    assert run.calls[1].outcome == CallOutcome(value="removed a.txt")
    assert run.approvals[0].decision == Approval(approved=True)
    assert isinstance(run.result, dict) and run.result["result"] == "<b.txt>"
    await host.registry.aclose()


async def test_a_stopped_host_leaves_the_run_waiting_and_resume_finishes_it(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    first, run_id = await pause(path)
    assert first.bodies == ["read a.txt"]  # rm never ran: it waited

    second = Host(path)  # a new process: no approval service at all
    events: list[SessionEvent] = []
    second.registry.on_event(events.append)
    result = await second.registry.resume(run_id, Approval(approved=True, note="ok"))
    assert not result.is_error, result.content
    assert result.value == {"logs": ["read <a.txt>", "rm removed a.txt"], "result": "<b.txt>"}
    assert second.bodies == ["rm a.txt", "read b.txt"]  # read a.txt came from the journal
    dispatched = [(e["name"], e.get("replayed", False)) for e in events
                  if e["kind"] == "tool/code-dispatch"]
    assert dispatched == [("read", True), ("rm", False), ("read", False)]
    run = await second.registry.journal.load_run(run_id)  # type: ignore[union-attr]
    assert run is not None and run.status == "done"
    assert run.approvals[0].decision == Approval(approved=True, note="ok")
    with pytest.raises(JournalError) as again:
        await second.registry.resume(run_id)
    assert again.value.code == "JOURNAL_NOT_RESUMABLE"
    assert second.bodies == ["rm a.txt", "read b.txt"]
    await second.registry.aclose()


async def test_a_rejection_on_resume_fails_the_call_as_a_denial(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    _, run_id = await pause(path)
    second = Host(path)
    result = await second.registry.resume(run_id, Approval(approved=False, answered_by="cli"))
    assert result.is_error
    assert "rejected by cli" in result.text
    assert second.bodies == []
    await second.registry.aclose()


async def test_a_decision_recorded_elsewhere_reaches_the_live_host(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    approvals = NeverAnswers()
    host = Host(path, approval=approvals)
    run = asyncio.ensure_future(host.run())
    await asyncio.wait_for(approvals.asked.wait(), 10)
    async with SqliteJournalStore(path) as cli:  # `dsh-jupyter approvals approve`
        (pending,) = await cli.list_pending()
        await cli.resolve(pending.run_id, Approval(approved=True, answered_by="cli"))
    result = await asyncio.wait_for(run, 10)
    assert not result.is_error, result.content  # type: ignore[attr-defined]
    assert host.bodies == ["read a.txt", "rm a.txt", "read b.txt"]
    journaled = await host.registry.journal.load_run(pending.run_id)  # type: ignore[union-attr]
    assert journaled is not None and journaled.status == "done"
    assert journaled.approvals[0].decision == Approval(approved=True, answered_by="cli")
    await host.registry.aclose()


THREE_RMS = """
for name in ("a.txt", "b.txt", "c.txt"):
    print(await tools.rm({"path": name}))
"""


@pytest.mark.parametrize(("for_run", "asked"), [(True, 0), (False, 2)],
                         ids=["for-the-run", "for-the-call"])
async def test_an_approval_for_the_whole_run_covers_its_later_calls_after_a_resume(
        tmp_path: Path, for_run: bool, asked: int) -> None:
    # The card's "Approve all rm calls in this run" (or `approvals approve --all-in-run`)
    # given to a run whose host is gone: the resumed run asks for no later rm.
    path = tmp_path / "journal.sqlite"
    _, run_id = await pause(path, THREE_RMS)
    answers = Answers(approved=True)
    second = Host(path, approval=answers)
    result = await second.registry.resume(run_id, Approval(approved=True, for_run=for_run))
    assert not result.is_error, result.content
    assert second.bodies == ["rm a.txt", "rm b.txt", "rm c.txt"]
    assert answers.count == asked
    run = await second.registry.journal.load_run(run_id)  # type: ignore[union-attr]
    assert run is not None and run.status == "done"
    assert run.approvals[0].decision == Approval(approved=True, for_run=for_run)
    assert len(run.approvals) == 1 + asked  # a covered call records no question
    await second.registry.aclose()


async def test_a_run_wide_approval_recorded_elsewhere_covers_the_live_runs_later_calls(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    approvals = NeverAnswers()
    host = Host(path, approval=approvals)
    run = asyncio.ensure_future(host.run(THREE_RMS))
    await asyncio.wait_for(approvals.asked.wait(), 10)
    async with SqliteJournalStore(path) as cli:  # `approvals approve --all-in-run`
        (pending,) = await cli.list_pending()
        await cli.resolve(pending.run_id, Approval(approved=True, answered_by="cli",
                                                   for_run=True))
    result = await asyncio.wait_for(run, 10)
    assert not result.is_error, result.content  # type: ignore[attr-defined]
    assert host.bodies == ["rm a.txt", "rm b.txt", "rm c.txt"]
    assert approvals.count == 1
    await host.registry.aclose()


async def test_a_run_made_in_a_scope_resumes_in_that_scope_or_not_at_all(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    first, run_id = await pause(path, scope=analyst)
    assert first.bodies == ["read a.txt"]
    (waiting,) = await SqliteJournalStore(path).list_pending()
    assert waiting.scope_name == "analyst"

    # After a restart the scope is not there yet: refused, nothing recorded or called (with
    # the registry's own policies, the program's last read would be allowed).
    second = Host(path)
    with pytest.raises(JournalError) as missing:
        await second.registry.resume(run_id, Approval(approved=True))
    assert missing.value.code == "JOURNAL_SCOPE"
    assert missing.value.message == (
        f"run {run_id} was made in scope 'analyst', which this process does not have: create "
        "that scope (with its tools and policies) before resuming, or name the scope to "
        "resume in (agent=, --scope)")
    with pytest.raises(JournalError, match=f"^run {run_id} was made in scope 'analyst', not "
                       "'other': resume it in 'analyst'$"):
        await second.registry.resume(run_id, Approval(approved=True),
                                     agent=second.registry.scope("other"))
    assert second.bodies == []
    run = await second.registry.journal.load_run(run_id)  # type: ignore[union-attr]
    assert run is not None and run.status == "waiting" and run.open_approval is not None

    # Made again, as the setup cell after a restart would: the run resumes in it, and its
    # policy holds.
    analyst(second.registry)
    result = await second.registry.resume(run_id, Approval(approved=True))
    assert second.bodies == ["rm a.txt"]
    assert result.is_error and "b.txt is not the analyst's" in result.text
    await first.registry.aclose()
    await second.registry.aclose()


async def test_a_run_made_without_a_scope_does_not_resume_in_one(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    _, run_id = await pause(path)
    second = Host(path)
    with pytest.raises(JournalError, match=f"^run {run_id} was made with the registry's own "
                       "tools, not in a scope: resume it without one, not in scope 'x'$"):
        await second.registry.resume(run_id, Approval(approved=True),
                                     agent=second.registry.scope("x"))
    result = await second.registry.resume(run_id, Approval(approved=True))
    assert not result.is_error and second.bodies == ["rm a.txt", "read b.txt"]
    await second.registry.aclose()


async def test_a_program_that_takes_another_path_on_resume_diverges(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    program = """
import random
name = "a.txt" if not hasattr(random, "_resumed") else "z.txt"
random._resumed = True
await tools.read({"path": name})
await tools.rm({"path": name})
"""
    # In-process, a module attribute survives between runs, as a kept kernel's state would:
    # the resumed run asks for another file.
    import random
    if hasattr(random, "_resumed"):
        delattr(random, "_resumed")
    approvals = NeverAnswers()
    first = Host(path, approval=approvals)
    stop = AbortController()
    run = asyncio.ensure_future(first.run(program, signal=stop.signal))
    await asyncio.wait_for(approvals.asked.wait(), 10)
    stop.abort("gone")
    await run
    (pending,) = await first.registry.journal.list_pending()  # type: ignore[union-attr]
    second = Host(path)
    try:
        result = await second.registry.resume(pending.run_id, Approval(approved=True))
    finally:
        delattr(random, "_resumed")
    assert result.is_error
    assert result.text.startswith(
        'Error: code run failed (journal-divergence): call 1 asks tools.read({"path": '
        '"z.txt"}), which this run did not make before it paused; no tool was called again')
    assert second.bodies == []
    run_after = await second.registry.journal.load_run(pending.run_id)  # type: ignore[union-attr]
    assert run_after is not None and run_after.status == "failed"
    await first.registry.aclose()
    await second.registry.aclose()


async def test_a_call_in_doubt_is_not_called_again(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    host = Host(path)
    fingerprint = _fingerprint(host.registry)
    async with SqliteJournalStore(path) as store:  # a host killed while read ran
        await store.record_run(RunRecord(run_id="r1", program=PROGRAM, call_id="c9",
                                         tools_fingerprint=fingerprint, host="1@elsewhere"))
        await store.record_call("r1", 1, "read", {"path": "a.txt"})
        await store.mark_started("r1", 1)
        await store.record_call("r1", 2, "rm", {"path": "a.txt"})
        await store.mark_pending("r1", 2, "rm deletes a file")
    result = await host.registry.resume("r1", Approval(approved=True))
    assert result.is_error
    assert result.text.startswith('Error: code run failed (journal-in-doubt): '
                                  'tools.read({"path": "a.txt"}) was running when the run '
                                  'stopped')
    assert host.bodies == []
    await host.registry.aclose()


async def test_a_run_whose_tools_changed_does_not_resume(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    _, run_id = await pause(path)
    second = Host(path)

    @second.registry.tool
    async def extra(x: int) -> int:
        """A tool the run did not have."""
        return x

    result = await second.registry.resume(run_id, Approval(approved=True))
    assert result.is_error
    assert "code run failed (journal-tools-changed): the tools changed since run" in result.text
    assert second.bodies == []
    run = await second.registry.journal.load_run(run_id)  # type: ignore[union-attr]
    assert run is not None and run.status == "failed"
    await second.registry.aclose()


class Broken:
    async def request(self, _execution: ToolExecution, _reason: str | None) -> Approval:
        raise RuntimeError("the approval front end broke")


async def test_an_approval_service_that_fails_ends_the_question_and_the_run(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    host = Host(path, approval=Broken())
    result = await host.run(PROGRAM.replace('removed = await tools.rm({"path": "a.txt"})',
                                            'try:\n    removed = await tools.rm({"path": '
                                            '"a.txt"})\nexcept ToolCallError as e:\n'
                                            '    removed = str(e)'))
    assert not result.is_error, result  # type: ignore[attr-defined]
    assert "approval failed: RuntimeError: the approval front end broke" in \
        result.text  # type: ignore[attr-defined]
    assert host.bodies == ["read a.txt", "read b.txt"]
    assert await host.registry.journal.list_pending() == ()  # type: ignore[union-attr]
    run = await only_run(path)
    assert run is not None and run.status == "done"
    assert run.calls[1].state == "done" and run.calls[1].outcome is not None
    assert run.calls[1].outcome.code == "HOOK_FAILED"
    await host.registry.aclose()


class FailingStarts(SqliteJournalStore):
    """A store whose disk fills up when a body is about to start."""

    async def mark_started(self, run_id: str, position: int) -> None:
        raise JournalError(f"the journal {self.path} is unreadable (disk is full)")


async def test_a_store_that_fails_stops_the_run_before_the_body(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = FailingStarts(tmp_path / "journal.sqlite")
    host = Host(tmp_path / "unused.sqlite")
    host.registry._journal = store  # the store a user plugged in
    result = await host.run()
    assert result.is_error  # type: ignore[attr-defined]
    text = result.text  # type: ignore[attr-defined]
    assert text.startswith("Error: code run failed (journal-unavailable): the run's journal "
                           "could not record the start of call 1; it was not called")
    assert str(tmp_path) not in text  # the model never reads a host path
    assert host.bodies == []
    assert "disk is full" in caplog.text  # the user does, in the log
    await store.aclose()


async def test_a_stateful_runtime_and_a_journal_are_refused_together(tmp_path: Path) -> None:
    stateful = InProcessRuntime()
    stateful.info = replace(InProcessRuntime.info, stateful=True)
    with pytest.raises(RegistrationError, match="fresh kernels only"):
        ToolRegistry(mode="code", code_runtime=stateful, journal=tmp_path / "j.sqlite")


async def test_resume_needs_a_journal_and_a_known_run(tmp_path: Path) -> None:
    with pytest.raises(RegistrationError, match="resume needs the registry's journal"):
        await ToolRegistry(mode="code").resume("r1")
    host = Host(tmp_path / "journal.sqlite")
    with pytest.raises(JournalError) as unknown:
        await host.registry.resume("nope", Approval(approved=True))
    assert unknown.value.code == "JOURNAL_UNKNOWN_RUN"
    await host.registry.aclose()


def _fingerprint(registry: ToolRegistry) -> str:
    from dsh_jupyter.durable import tools_fingerprint
    visible = registry.visible()
    return tools_fingerprint(d for name, d in visible.items() if name != "run_code")
