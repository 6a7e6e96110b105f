"""``serve_mcp(journal=...)``: the 2026-era approval round of a journaled ``run_code``
run. The ``requestState`` is ``<run_id>.<mac>`` (its format, and that nothing else
passes, checked by hand); a retry whose run the server no longer holds (the serving
ended, or the answer timed out) resumes it from the journal; a retry after the run ended
gets its recorded result; a forged state is refused like an unknown one.

Programs run on :class:`InProcessRuntime` (no kernel in the unit tier); a real server
process SIGKILLed and started again: tests/integration/mcp/test_serve_journal_restart.py.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/unit/mcp folder

from mcp import Client, MCPError
from mcp.types import (
    CallToolResult,
    ElicitRequest,
    ElicitResult,
    InputRequiredResult,
    TextContent,
)
from mcp_support import eventually

from dsh_jupyter import ToolRegistry
from dsh_jupyter.durable import SqliteJournalStore
from dsh_jupyter.errors import RegistrationError
from dsh_jupyter.events import SessionEvent
from dsh_jupyter.kernel import InProcessRuntime
from dsh_jupyter.mcp import serve_mcp
from dsh_jupyter.mcp.serve_journal import approval_key, sign_state, state_run
from dsh_jupyter.registry.execution import ToolExecution
from dsh_jupyter.registry.policy import Approval, Ask, PreDecision

pytestmark = pytest.mark.timeout(60)

SECRET = bytes(range(32))
PROGRAM = """
first = await tools.read({"path": "a.txt"})
removed = await tools.rm({"path": "a.txt"})
print("rm said", removed)
return {"removed": removed, "first": first}
"""
RUN_CODE = {"code": PROGRAM, "description": "read then remove a.txt"}


# The state's format ---------------------------------------------------------------------
def test_a_state_is_the_run_id_and_a_base64url_hmac() -> None:
    state = sign_state(SECRET, "20261204T200905Z-3f9a1c2e")
    run_id, dot, mac = state.rpartition(".")
    assert (run_id, dot) == ("20261204T200905Z-3f9a1c2e", ".")
    assert len(mac) == 43 and "=" not in mac  # 32 bytes, base64url without padding
    assert len(base64.urlsafe_b64decode(mac + "=")) == 32
    assert state_run(SECRET, state) == "20261204T200905Z-3f9a1c2e"
    assert sign_state(SECRET, "20261204T200905Z-3f9a1c2e") == state  # deterministic


@pytest.mark.parametrize("forged", [
    "20261204T200905Z-3f9a1c2f.{mac}",  # another run with this run's MAC
    "{run}.{mac}x", "{run}.{short}", "{run}.", ".{mac}", "{run}", "", "{run}.{mac}.",
    "{run}.{other}",  # the MAC under another journal's secret
    "{run}.é{short}",
])
def test_anything_but_the_signed_state_names_no_run(forged: str) -> None:
    run = "20261204T200905Z-3f9a1c2e"
    mac = sign_state(SECRET, run).rpartition(".")[2]
    other = sign_state(bytes(32), run).rpartition(".")[2]
    state = forged.format(run=run, mac=mac, short=mac[:-1], other=other)
    assert state_run(SECRET, state) is None


def test_a_run_id_with_a_dot_still_round_trips() -> None:
    assert state_run(SECRET, sign_state(SECRET, "a.b")) == "a.b"


# Serving ------------------------------------------------------------------------------
class Tools:
    """A code-mode registry with two counted tools (``rm`` asks first), as a server process
    would load it again after a restart: same tools, new objects."""

    def __init__(self, bodies: list[str]) -> None:
        self.registry = registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())
        self.results: list[SessionEvent] = []
        registry.on_event(lambda event: self.results.append(event)
                          if event["kind"] == "tool/result" else None)

        @registry.tool
        async def read(path: str) -> str:
            """Read a file."""
            bodies.append(f"read {path}")
            return f"<{path}>"

        @registry.tool
        async def rm(path: str) -> str:
            """Remove a file."""
            bodies.append(f"rm {path}")
            return f"removed {path}"

        def ask_for_rm(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
            return Ask("rm deletes a file") if execution.name == "rm" else None

        registry.on_pre_execute(ask_for_rm)


async def never_called(context: Any, params: Any) -> ElicitResult:
    raise AssertionError("the test answers by hand")


def approve(first: InputRequiredResult, action: str = "accept") -> dict[str, Any]:
    assert first.input_requests is not None
    [key] = first.input_requests
    return {key: ElicitResult(action=action, content={"approve": True})}  # type: ignore[arg-type]


def text(result: CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


async def ask_and_leave(path: Path, bodies: list[str]) -> tuple[InputRequiredResult, str]:
    """Serve, call run_code until it asks, then stop the serving (the run stays waiting)."""
    async with (serve_mcp(Tools(bodies).registry, http="127.0.0.1:0", journal=path) as service,
                Client(str(service.url), elicitation_callback=never_called) as client):
        first = await client.session.call_tool("run_code", RUN_CODE, allow_input_required=True)
    assert isinstance(first, InputRequiredResult) and first.request_state is not None
    async with SqliteJournalStore(path) as store:
        [pending] = await store.list_pending()
    return first, pending.run_id


async def test_the_state_names_the_waiting_run_and_the_question_its_position(
        tmp_path: Path) -> None:
    bodies: list[str] = []
    first, run_id = await ask_and_leave(tmp_path / "journal.sqlite", bodies)
    assert first.request_state is not None and first.request_state.startswith(f"{run_id}.")
    async with SqliteJournalStore(tmp_path / "journal.sqlite") as store:
        assert state_run(await store.secret(), first.request_state) == run_id
    assert first.input_requests is not None
    [(key, request)] = first.input_requests.items()
    assert key == approval_key(2) == "approve-call-2"
    assert isinstance(request, ElicitRequest)
    assert request.params.message.startswith('Allow the tool call rm({"path": "a.txt"})?')
    assert bodies == ["read a.txt"]


async def test_a_retry_after_the_server_stopped_resumes_the_run_and_then_keeps_its_result(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    bodies: list[str] = []
    first, run_id = await ask_and_leave(path, bodies)
    state = first.request_state
    async with (serve_mcp(Tools(bodies).registry, http="127.0.0.1:0", journal=path) as service,
                Client(str(service.url), elicitation_callback=never_called) as client):
        # A retry without the answer is asked the journal's question again, same state.
        again = await client.session.call_tool("run_code", RUN_CODE, request_state=state,
                                               input_responses={}, allow_input_required=True)
        assert isinstance(again, InputRequiredResult) and again.request_state == state
        assert again.input_requests is not None
        assert list(again.input_requests) == list(first.input_requests or {})
        done = await client.session.call_tool("run_code", RUN_CODE, request_state=state,
                                              input_responses=approve(again))
        assert not done.is_error, text(done)
        assert done.structured_content is not None
        assert done.structured_content["result"] == {"removed": "removed a.txt",
                                                       "first": "<a.txt>"}
        assert bodies == ["read a.txt", "rm a.txt"]  # read answered from the journal
        # The answer got lost; the client retries: the recorded result, nothing runs.
        repeated = await client.session.call_tool("run_code", RUN_CODE, request_state=state,
                                                  input_responses=approve(again))
    assert bodies == ["read a.txt", "rm a.txt"]
    assert (repeated.structured_content, text(repeated)) == (done.structured_content,
                                                             text(done))
    async with SqliteJournalStore(path) as store:
        run = await store.load_run(run_id)
    assert run is not None and run.status == "done"


async def test_a_declined_retry_resumes_the_run_with_the_call_denied(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    bodies: list[str] = []
    first, _ = await ask_and_leave(path, bodies)
    async with (serve_mcp(Tools(bodies).registry, http="127.0.0.1:0", journal=path) as service,
                Client(str(service.url), elicitation_callback=never_called) as client):
        done = await client.session.call_tool("run_code", RUN_CODE,
                                              request_state=first.request_state,
                                              input_responses=approve(first, "decline"))
    assert done.is_error and "declined in the MCP client" in text(done)
    assert bodies == ["read a.txt"]


async def test_an_unanswered_run_stays_waiting_and_a_late_retry_resumes_it(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    bodies: list[str] = []
    tools = Tools(bodies)
    async with (serve_mcp(tools.registry, http="127.0.0.1:0", journal=path,
                          answer_timeout=0.3) as service,
                Client(str(service.url), elicitation_callback=never_called) as client):
        first = await client.session.call_tool("run_code", RUN_CODE, allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        await eventually(lambda: bool(tools.results))  # the in-memory run stopped
        async with SqliteJournalStore(path) as store:
            [pending] = await store.list_pending()
            run = await store.load_run(pending.run_id)
        assert run is not None and run.status == "waiting"  # not failed
        assert str(first.request_state).startswith(f"{pending.run_id}.")
        [ended] = tools.results
        assert ended["kind"] == "tool/result"
        assert f"did not answer within 0.3 s; run {pending.run_id} waits in the journal" in \
            ended["content"][0]["text"]
        done = await client.session.call_tool("run_code", RUN_CODE,
                                              request_state=first.request_state,
                                              input_responses=approve(first))
    assert not done.is_error, text(done)
    assert done.structured_content is not None
    assert done.structured_content["result"] == {"removed": "removed a.txt",
                                                       "first": "<a.txt>"}
    assert bodies == ["read a.txt", "rm a.txt"]


async def test_a_forged_state_is_refused_like_an_unknown_one(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    bodies: list[str] = []
    first, run_id = await ask_and_leave(path, bodies)
    assert first.request_state is not None
    mac = first.request_state.rpartition(".")[2]
    async with (serve_mcp(Tools(bodies).registry, http="127.0.0.1:0", journal=path) as service,
                Client(str(service.url), elicitation_callback=never_called) as client):
        # One character changed (never to itself: that would be the genuine state).
        other_id = run_id[:-1] + ("1" if run_id[-1] == "0" else "0")
        other_mac = mac[:-1] + ("B" if mac[-1] == "A" else "A")
        for forged in (f"{other_id}.{mac}", f"{run_id}.{other_mac}",
                       sign_state(bytes(32), run_id), run_id, "not-a-state"):
            with pytest.raises(MCPError, match="unknown or expired requestState") as refused:
                await client.session.call_tool("run_code", RUN_CODE, request_state=forged,
                                               input_responses=approve(first))
            assert refused.value.error.code == -32602  # INVALID_PARAMS
        # The genuine state for another tool name names no run either.
        with pytest.raises(MCPError, match="unknown or expired requestState"):
            await client.session.call_tool("read", {"path": "x"},
                                           request_state=first.request_state,
                                           input_responses=approve(first))
    assert bodies == ["read a.txt"]
    async with SqliteJournalStore(path) as store:
        run = await store.load_run(run_id)
    assert run is not None and run.status == "waiting"


async def test_serving_with_a_journal_leaves_the_registry_as_it_was(tmp_path: Path) -> None:
    tools = Tools([])
    async with serve_mcp(tools.registry, http="127.0.0.1:0", journal=tmp_path / "j.sqlite"):
        assert isinstance(tools.registry.journal, SqliteJournalStore)
    assert tools.registry.journal is None


async def test_a_handshake_era_question_is_lost_with_the_connection_but_the_run_waits(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    bodies: list[str] = []
    asked = asyncio.Event()

    async def never_answers(context: Any, params: Any) -> ElicitResult:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    served = Tools(bodies)
    async with serve_mcp(served.registry, http="127.0.0.1:0", journal=path) as service:
        async with Client(str(service.url), mode="legacy",
                          elicitation_callback=never_answers) as client:
            call = asyncio.ensure_future(client.call_tool("run_code", RUN_CODE))
            await asyncio.wait_for(asked.wait(), 30)
            call.cancel()  # the client goes away while the question is open
            await asyncio.gather(call, return_exceptions=True)
        await eventually(lambda: bool(served.results))  # the served call has ended
        [ended] = served.results
        assert ended["kind"] == "tool/result" and ended["is_error"]
    async with SqliteJournalStore(path) as store:
        [pending] = await store.list_pending()
        run = await store.load_run(pending.run_id)
        assert run is not None and run.status == "waiting"
        # Resumable from Python (or the command line) with a decision made there.
        again = Tools(bodies)
        undo = again.registry.attach_journal(store)
        result = await again.registry.resume(pending.run_id, Approval(approved=True))
        undo()
    assert not result.is_error, result
    assert bodies == ["read a.txt", "rm a.txt"]


async def test_a_registry_with_its_own_journal_is_served_with_it(tmp_path: Path) -> None:
    own = ToolRegistry(mode="code", code_runtime=InProcessRuntime(),
                       journal=tmp_path / "own.sqlite")
    with pytest.raises(RegistrationError, match="has a journal already"):
        serve_mcp(own, http="127.0.0.1:0", journal=tmp_path / "other.sqlite")
    with pytest.raises(RegistrationError, match="has a journal already"):
        own.attach_journal(SqliteJournalStore(tmp_path / "other.sqlite"))
    with pytest.raises(RegistrationError, match="attach_journal takes a store"):
        Tools([]).registry.attach_journal(str(tmp_path / "j.sqlite"))  # type: ignore[arg-type]
    async with serve_mcp(own, http="127.0.0.1:0") as service, \
            Client(str(service.url), elicitation_callback=never_called) as client:
        first = await client.session.call_tool("run_code", {"code": "return 1",
                                                            "description": "one"})
    assert not first.is_error
    async with SqliteJournalStore(tmp_path / "own.sqlite") as store:
        assert store._db is not None
        [(status,)] = store._db.execute("SELECT status FROM runs").fetchall()
    assert status == "done"
    await own.aclose()
