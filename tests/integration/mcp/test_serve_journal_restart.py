"""``dsh-jupyter serve-mcp --journal``: an approval survives the server being SIGKILLed.

A real server process (streamable HTTP, Code Mode, real kernels) runs a program whose
second sub-call asks for approval and answers the official MCP client (2026-07-28) with an
``InputRequiredResult``. The server is killed outright (its process group, SIGKILL) and
its kernels die with it; a new server on the same journal takes the client's retry
(``requestState`` plus the approving answer), resumes the run from the journal and answers
with its result: each tool body ran exactly once (the served tools append a line per body
call). A forged state is refused; the retry repeated after the answer returns the
recorded result without calling a tool again.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from waiting_support import still_running

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, ElicitResult, InputRequiredResult
from serve_support import HttpServe, http_client, served_facts

from dsh_jupyter.durable import SqliteJournalStore
from dsh_jupyter.kernel.launch import proctree

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(240)]

PROGRAM = """
forecast = await tools.forecast({"city": "Oslo"})
deleted = await tools.delete_file({"path": "a.txt"})
print("deleted:", deleted)
return {"high": forecast["high_c"], "deleted": deleted}
"""
RUN_CODE = {"code": PROGRAM, "description": "check the weather, then delete a.txt"}
APPROVE = ElicitResult(action="accept", content={"approve": True})


async def by_hand(context: Any, params: Any) -> ElicitResult:
    raise AssertionError("the test answers by hand (the 2026 round)")


def serve(facts: Path, journal: Path, name: str) -> HttpServe:
    return HttpServe(facts, "--mode", "code", "--http", "127.0.0.1:0", "--journal",
                     str(journal), new_session=True, stderr_suffix=f".{name}.stderr")


async def test_a_killed_server_resumes_the_run_on_the_clients_retry(tmp_path: Path) -> None:
    facts, journal = tmp_path / "facts", tmp_path / "journal.sqlite"
    first_server = serve(facts, journal, "first")
    try:
        async with http_client(first_server.url, elicitation_callback=by_hand) as client:
            asked = await client.session.call_tool("run_code", RUN_CODE,
                                                   allow_input_required=True)
        assert isinstance(asked, InputRequiredResult), asked
        assert asked.request_state is not None and asked.input_requests is not None
        [key] = asked.input_requests
        assert served_facts(facts) == ["forecast Oslo"]
        # The run's kernel (and anything else the server started) must die with it.
        children = proctree.descendants(first_server.process.pid)
        assert children, "a code-mode server has its kernels below it"
        os.killpg(first_server.process.pid, signal.SIGKILL)
        assert first_server.process.wait(timeout=30) == -signal.SIGKILL
        left = await still_running(children, within=30)
        for pid in left:  # do not leak them into the rest of the run, then fail
            os.kill(pid, signal.SIGKILL)
        assert not left, f"processes of the killed server still run: {left}"
    finally:
        first_server.stop()

    async with SqliteJournalStore(journal) as store:
        [pending] = await store.list_pending()
    assert asked.request_state.startswith(f"{pending.run_id}.")

    second_server = serve(facts, journal, "second")
    try:
        async with http_client(second_server.url, elicitation_callback=by_hand) as client:
            forged = asked.request_state[:-2] + ("AA" if asked.request_state[-2:] != "AA"
                                                 else "BB")
            with pytest.raises(MCPError, match="unknown or expired requestState") as refused:
                await client.session.call_tool("run_code", RUN_CODE, request_state=forged,
                                               input_responses={key: APPROVE})
            assert refused.value.error.code == INVALID_PARAMS
            assert served_facts(facts) == ["forecast Oslo"]

            done = await client.session.call_tool("run_code", RUN_CODE,
                                                  request_state=asked.request_state,
                                                  input_responses={key: APPROVE})
            assert isinstance(done, CallToolResult)
            assert not done.is_error, done.content
            assert done.structured_content is not None
            assert done.structured_content["result"] == {"high": 14.5,
                                                         "deleted": "deleted a.txt"}
            assert done.structured_content["logs"] == ["deleted: deleted a.txt"]
            # Each body ran exactly once: forecast before the kill, delete_file after it.
            assert served_facts(facts) == ["forecast Oslo", "deleted a.txt"]

            again = await client.session.call_tool("run_code", RUN_CODE,
                                                   request_state=asked.request_state,
                                                   input_responses={key: APPROVE})
            assert (again.structured_content, again.content) == (done.structured_content,
                                                                 done.content)
            assert served_facts(facts) == ["forecast Oslo", "deleted a.txt"]
    finally:
        assert second_server.stop() == 0, second_server.stderr
    async with SqliteJournalStore(journal) as store:
        run = await store.load_run(pending.run_id)
    assert run is not None and run.status == "done"
    assert [(c.tool, c.state) for c in run.calls] == [("forecast", "done"),
                                                      ("delete_file", "done")]
