"""A run waiting for an approval survives its host being SIGKILLed: a real host process
runs a program on a real kernel with a journal; the test kills it (SIGKILL, its whole
process group: kernels too) while the program's second call waits for approval; a new
process resumes the run from the journal, approves, and the run completes with each tool
body executed exactly once (each body appends a line to a file; the test counts them).

A program that asks for something else when it runs again (a fresh random name) fails
``journal-divergence`` on resume, with no tool called again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from dsh_jupyter.durable import SqliteJournalStore

pytestmark = pytest.mark.timeout(180)

HOST = Path(__file__).resolve().parents[2] / "support" / "journal_host.py"

PROGRAM = """
first = await tools.read({"path": "a.txt"})
print("read", first)
removed = await tools.rm({"path": "a.txt"})
print(removed)
return await tools.read({"path": "b.txt"})
"""


async def _host(*args: str) -> asyncio.subprocess.Process:
    """A host (tests/support/journal_host.py) in a process group of its own."""
    return await asyncio.create_subprocess_exec(
        sys.executable, str(HOST), *args, stdout=asyncio.subprocess.PIPE,
        start_new_session=True)


DIVERGING = """
import uuid
await tools.read({"path": f"{uuid.uuid4()}.txt"})
await tools.rm({"path": "a.txt"})
"""


async def _start_and_kill(journal: Path, counts: Path, program: str = PROGRAM,
                          until: bytes = b"WAITING\n") -> str:
    """Run ``program`` in a host until it prints ``until`` (its ``rm`` waits), SIGKILL
    the host's process group, and return the waiting run's id."""
    host = await _host(str(journal), str(counts), "start", program)
    assert host.stdout is not None
    line = await asyncio.wait_for(host.stdout.readline(), 120)
    assert line == until, line
    os.killpg(host.pid, signal.SIGKILL)
    await host.wait()
    assert host.returncode == -signal.SIGKILL
    async with SqliteJournalStore(journal) as store:
        (pending,) = await store.list_pending()
    assert pending.tool == "rm" and pending.arguments == {"path": "a.txt"}
    return pending.run_id


IN_DOUBT = """
import asyncio
send = asyncio.ensure_future(tools.send({"to": "bob"}))
await asyncio.sleep(0.5)  # send's body is running when rm asks
await tools.rm({"path": "a.txt"})
await send
"""


async def test_a_call_whose_body_ran_when_the_host_died_is_never_called_again(
        tmp_path: Path) -> None:
    journal, counts = tmp_path / "journal.sqlite", tmp_path / "bodies.txt"
    host = await _host(str(journal), str(counts), "start", IN_DOUBT)
    assert host.stdout is not None
    seen = {await asyncio.wait_for(host.stdout.readline(), 120) for _ in range(2)}
    assert seen == {b"WAITING\n", b"SENDING\n"}  # rm waits, send's body runs
    os.killpg(host.pid, signal.SIGKILL)
    await host.wait()
    async with SqliteJournalStore(journal) as store:
        (pending,) = await store.list_pending()
    assert _lines(counts) == ["send bob"]
    result = await _resume(journal, counts, pending.run_id)
    assert result["is_error"] is True
    assert str(result["text"]).startswith(
        'Error: code run failed (journal-in-doubt): tools.send({"to": "bob"}) was running when '
        "the run stopped and its outcome is unknown; it is not called again"), result
    assert _lines(counts) == ["send bob"]  # neither send nor rm ran again


async def _resume(journal: Path, counts: Path, run_id: str) -> dict[str, object]:
    host = await _host(str(journal), str(counts), "resume", run_id, "approve")
    out, _ = await asyncio.wait_for(host.communicate(), 120)
    assert host.returncode == 0, out
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_a_killed_host_s_run_resumes_with_each_body_run_once(tmp_path: Path) -> None:
    journal, counts = tmp_path / "journal.sqlite", tmp_path / "bodies.txt"
    run_id = await _start_and_kill(journal, counts)
    assert _lines(counts) == ["read a.txt"]  # rm waited; the host died

    result = await _resume(journal, counts, run_id)
    assert result["is_error"] is False, result
    assert result["value"] == {"logs": ["read <a.txt>", "removed a.txt"], "result": "<b.txt>"}
    assert _lines(counts) == ["read a.txt", "rm a.txt", "read b.txt"]  # once each

    async with SqliteJournalStore(journal) as store:
        run = await store.load_run(run_id)
    assert run is not None and run.status == "done"
    assert [(c.tool, c.state) for c in run.calls] == [
        ("read", "done"), ("rm", "done"), ("read", "done")]
    assert run.approvals[0].decision is not None and run.approvals[0].decision.note == "ok"


async def test_a_resumed_program_that_diverges_calls_no_tool(tmp_path: Path) -> None:
    journal, counts = tmp_path / "journal.sqlite", tmp_path / "bodies.txt"
    run_id = await _start_and_kill(journal, counts, DIVERGING)
    (first,) = _lines(counts)
    result = await _resume(journal, counts, run_id)
    assert result["is_error"] is True
    text = str(result["text"])
    assert text.startswith("Error: code run failed (journal-divergence): call 1 asks "
                           'tools.read({"path": "'), text
    assert text.endswith("which this run did not make before it paused; no tool was called "
                         "again")
    assert _lines(counts) == [first]  # neither read nor rm ran again
    async with SqliteJournalStore(journal) as store:
        run = await store.load_run(run_id)
    assert run is not None and run.status == "failed"
