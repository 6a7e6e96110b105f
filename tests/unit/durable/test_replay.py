"""Replay: a resumed program's calls matched to the journal by tool, arguments and
occurrence; the paused call gets its decision, completed calls their outcomes, and
anything the journal cannot vouch for stops the run without calling a tool."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_jupyter import define_tool
from dsh_jupyter.durable import (
    Answered,
    ApprovalRecord,
    CallOutcome,
    CallRecord,
    Decided,
    JournaledRun,
    Live,
    Replay,
    RunRecord,
    RunStatus,
    SqliteJournalStore,
    Stop,
    tools_fingerprint,
)
from dsh_jupyter.errors import JournalError
from dsh_jupyter.json_value import JsonObject, JsonValue
from dsh_jupyter.registry.policy import Approval

RUN = RunRecord(run_id="r", program="...", tools_fingerprint="f", call_id="c")
YES = Approval(approved=True, answered_by="cli")


def done(position: int, tool: str, arguments: JsonObject, value: JsonValue) -> CallRecord:
    return CallRecord(position=position, tool=tool, arguments=arguments, state="done",
                      outcome=CallOutcome(value=value))


def a_journal(*calls: CallRecord, paused: int, decision: Approval | None = YES,
              status: RunStatus = "decided") -> JournaledRun:
    return JournaledRun(run=RUN, status=status, updated=0.0, calls=calls,
                        approvals=(ApprovalRecord(position=paused, reason="r", asked=1.0,
                                                  decision=decision),))


def test_completed_calls_come_from_the_journal_even_in_another_order() -> None:
    # for p in set(paths): await tools.rm(...): a new hash seed after the restart changes
    # the order, and each call still gets its own outcome.
    journal = a_journal(done(1, "rm", {"path": "b"}, "removed b"),
                        done(2, "rm", {"path": "c"}, "removed c"),
                        CallRecord(position=3, tool="rm", arguments={"path": "a"},
                                   state="issued"),
                        paused=3)
    replay = Replay(journal)
    assert replay.match("rm", {"path": "a"}) == Decided(3, YES)
    assert replay.match("rm", {"path": "c"}) == Answered(2, CallOutcome(value="removed c"))
    assert replay.match("rm", {"path": "b"}) == Answered(1, CallOutcome(value="removed b"))
    assert replay.match("ls", {}) == Live(4)  # past the pause: new calls run live
    assert replay.match("ls", {}) == Live(5)
    assert replay.finish() is None and replay.unused == ()


def test_identical_calls_get_their_outcomes_in_occurrence_order() -> None:
    journal = a_journal(done(1, "next_page", {}, [1]), done(2, "next_page", {}, [2]),
                        CallRecord(position=3, tool="save", arguments={"rows": 2, "to": "t"},
                                   state="issued"),
                        paused=3)
    replay = Replay(journal)
    assert replay.match("next_page", {}) == Answered(1, CallOutcome(value=[1]))
    assert replay.match("next_page", {}) == Answered(2, CallOutcome(value=[2]))
    # Keys are canonical: the order of an object's keys does not matter.
    assert replay.match("save", {"to": "t", "rows": 2}) == Decided(3, YES)


def test_a_call_the_journal_does_not_have_before_the_pause_is_divergence() -> None:
    journal = a_journal(done(1, "read", {"n": 1}, "x"),
                        CallRecord(position=2, tool="rm", arguments={"path": "a"},
                                   state="issued"),
                        paused=2)
    replay = Replay(journal)
    assert replay.match("read", {"n": 1}) == Answered(1, CallOutcome(value="x"))
    stop = replay.match("rm", {"path": "b"})
    assert stop == Stop("journal-divergence",
                        'call 2 asks tools.rm({"path": "b"}), which this '
                        "run did not make before it paused; no tool was called again")
    assert replay.unused == (2,)


def test_a_program_ending_before_the_paused_call_diverged() -> None:
    replay = Replay(a_journal(CallRecord(position=1, tool="rm", arguments={}, state="issued"),
                              paused=1))
    stop = replay.finish()
    assert stop is not None and stop.kind == "journal-divergence"
    assert "without making again the call that waited for approval (tools.rm)" in stop.message


def test_a_call_in_doubt_is_never_called_again() -> None:
    journal = a_journal(
        CallRecord(position=1, tool="send_mail", arguments={"to": "x" * 200}, state="started"),
        CallRecord(position=2, tool="rm", arguments={}, state="issued"),
        paused=2)
    stop = Replay(journal).match("send_mail", {"to": "x" * 200})
    assert isinstance(stop, Stop) and stop.kind == "journal-in-doubt"
    assert "was running when the run stopped" in stop.message
    assert "\n" not in stop.message and len(stop.message) < 200  # arguments cut short


def test_a_queued_call_that_never_started_runs_live_at_its_position() -> None:
    journal = a_journal(CallRecord(position=1, tool="rm", arguments={}, state="issued"),
                        CallRecord(position=2, tool="ls", arguments={}, state="issued"),
                        paused=1)
    replay = Replay(journal)
    assert replay.match("rm", {}) == Decided(1, YES)
    assert replay.match("ls", {}) == Live(2)
    assert replay.match("ls", {}) == Live(3)


@pytest.mark.parametrize(("journal", "says"), [
    (a_journal(CallRecord(position=1, tool="rm", arguments={}, state="issued"), paused=1,
               decision=None, status="waiting"), "run r waits for an answer"),
    (a_journal(done(1, "rm", {}, 1), paused=1, status="done"),
     "run r is done and has no approval to resume from"),
    (JournaledRun(run=RUN, status="running", updated=0.0), "run r is running and has no"),
])
def test_only_a_run_paused_on_an_answered_approval_resumes(journal: JournaledRun,
                                                           says: str) -> None:
    with pytest.raises(JournalError, match=says) as refused:
        Replay(journal)
    assert refused.value.code == "JOURNAL_NOT_RESUMABLE"


async def test_a_replay_from_a_real_journal(tmp_path: Path) -> None:
    async with SqliteJournalStore(tmp_path / "j.sqlite") as store:
        await store.record_run(RUN)
        await store.record_call("r", 1, "read", {"n": 1})
        await store.mark_started("r", 1)
        await store.record_call_result("r", 1, CallOutcome(value={"rows": 3}))
        await store.record_call("r", 2, "rm", {"path": "a"})
        await store.mark_pending("r", 2, "deletes")
        await store.resolve("r", Approval(approved=False, answered_by="cli", note="no"))
        journal = await store.load_run("r")
    assert journal is not None
    replay = Replay(journal)
    assert replay.match("read", {"n": 1}) == Answered(1, CallOutcome(value={"rows": 3}))
    assert replay.match("rm", {"path": "a"}) == Decided(
        2, Approval(approved=False, answered_by="cli", note="no"))


def test_the_fingerprint_follows_names_and_schemas_not_descriptions() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    def add_text(a: str, b: str) -> str:
        return a + b

    first = tools_fingerprint([define_tool(add, name="add", description="Add two numbers.")])
    assert first.startswith("sha256:")
    assert tools_fingerprint([define_tool(add, name="add", description="Adds.")]) == first
    assert tools_fingerprint([define_tool(add_text, name="add", description="Add.")]) != first
    assert tools_fingerprint([define_tool(add, name="plus", description="Add.")]) != first
