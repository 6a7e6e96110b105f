"""``dsh-jupyter approvals`` with real hosts: a process running a journaled program on a
real kernel waits for an approval nobody in it answers. Approved from the command line
while the host runs, the host picks the decision up and finishes the run; rejected after
the host was SIGKILLed, the command says the run must be resumed, and ``resume(run_id)``
(no decision: the recorded one) in a new process finishes it, the rejected call not run.
Each tool body appends a line to a file, so the test counts what ran."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_jupyter.durable import SqliteJournalStore

pytestmark = pytest.mark.timeout(180)

SUPPORT = Path(__file__).resolve().parents[2] / "support"
HOST = SUPPORT / "journal_host.py"

PROGRAM = """
await tools.read({"path": "a.txt"})
try:
    print(await tools.rm({"path": "a.txt"}))
except ToolCallError as error:
    print("refused:", error)
return await tools.read({"path": "b.txt"})
"""


async def _start(journal: Path, counts: Path, *more: str) -> asyncio.subprocess.Process:
    """A host whose run waits for rm's approval (its own question is never answered)."""
    host = await asyncio.create_subprocess_exec(
        sys.executable, str(HOST), str(journal), str(counts), "start", PROGRAM, *more,
        stdout=asyncio.subprocess.PIPE, start_new_session=True)
    assert host.stdout is not None
    line = await asyncio.wait_for(host.stdout.readline(), 120)
    assert line == b"WAITING\n", line
    return host


async def _cli(*args: str, counts: Path | None = None) -> tuple[int, str, str]:
    """``dsh-jupyter approvals ARGS``; given ``counts``, with ``--tools journal_host:tools``
    importable and counting into it."""
    env = {name: value for name, value in os.environ.items() if name != "DSH_JOURNAL"}
    if counts is not None:
        env["DSH_TEST_COUNTS"] = str(counts)
    done = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dsh_jupyter.cli", "approvals", *args, env=env,
        cwd=SUPPORT if counts is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(done.communicate(), 120)
    assert done.returncode is not None
    return done.returncode, out.decode(), err.decode()


async def _killed_while_waiting(journal: Path, counts: Path, *more: str) -> str:
    """A host SIGKILLed (with its kernels) while its run waits: the run's id."""
    host = await _start(journal, counts, *more)
    os.killpg(host.pid, signal.SIGKILL)
    await host.wait()
    return await _only_run_waiting(journal)


async def _resumed_in_a_new_host(journal: Path, counts: Path, run_id: str,
                                 *more: str) -> dict[str, Any]:
    """``registry.resume(run_id)`` in a new host process: its result."""
    resumed = await asyncio.create_subprocess_exec(
        sys.executable, str(HOST), str(journal), str(counts), "resume", run_id, *more,
        stdout=asyncio.subprocess.PIPE)
    out_bytes, _ = await asyncio.wait_for(resumed.communicate(), 120)
    assert resumed.returncode == 0, out_bytes
    result: dict[str, Any] = json.loads(out_bytes.decode().splitlines()[-1])
    return result


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def _only_run_waiting(journal: Path) -> str:
    code, out, err = await _cli("list", "--journal", str(journal), "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert (row["tool"], row["arguments"], row["reason"]) == ("rm", {"path": "a.txt"},
                                                              "rm deletes")
    return str(row["run_id"])


async def test_approved_from_the_command_line_a_live_host_goes_on(tmp_path: Path) -> None:
    journal, counts = tmp_path / "runs.sqlite", tmp_path / "bodies.txt"
    host = await _start(journal, counts)
    try:
        run_id = await _only_run_waiting(journal)
        code, out, err = await _cli("list", "--journal", str(journal))
        assert code == 0, err
        assert out.splitlines()[1].endswith(f"{host.pid}@{socket.gethostname()} (alive)")

        code, out, err = await _cli("approve", run_id, "--journal", str(journal))
        assert code == 0, err
        assert out.startswith(f"approved call 2 (rm) of run {run_id}; its host {host.pid}@")
        assert "is running: it picks the decision up" in out

        assert host.stdout is not None
        ended = json.loads(await asyncio.wait_for(host.stdout.readline(), 120))
        assert ended["is_error"] is False, ended
        assert await asyncio.wait_for(host.wait(), 60) == 0
    finally:
        if host.returncode is None:
            os.killpg(host.pid, signal.SIGKILL)
            await host.wait()
    assert _lines(counts) == ["read a.txt", "rm a.txt", "read b.txt"]
    async with SqliteJournalStore(journal) as store:
        run = await store.load_run(run_id)
    assert run is not None and run.status == "done"
    decision = run.approvals[0].decision
    assert decision is not None and (decision.approved, decision.answered_by) == (True, "cli")


async def test_rejected_after_the_host_died_the_run_resumes_without_the_call(
        tmp_path: Path) -> None:
    journal, counts = tmp_path / "runs.sqlite", tmp_path / "bodies.txt"
    run_id = await _killed_while_waiting(journal, counts)

    code, out, err = await _cli("reject", run_id, "--journal", str(journal),
                                "--note", "keep a.txt")
    assert code == 0, err
    assert out.endswith(f" is gone: resume the run with the same tools and this journal, in "
                        f'Python: await registry.resume("{run_id}")\n')

    result = await _resumed_in_a_new_host(journal, counts, run_id)
    assert result["is_error"] is False, result
    assert "refused: rm deletes (rejected by cli: keep a.txt)" in result["text"]
    assert _lines(counts) == ["read a.txt", "read b.txt"]  # rm never ran; a.txt read once


async def test_approved_with_tools_after_the_host_died_the_command_resumes_it(
        tmp_path: Path) -> None:
    journal, counts = tmp_path / "runs.sqlite", tmp_path / "bodies.txt"
    run_id = await _killed_while_waiting(journal, counts)

    code, out, err = await _cli("approve", run_id, "--journal", str(journal),
                                "--tools", "journal_host:tools", counts=counts)
    assert code == 0, (out, err)
    assert out.startswith(f"approved call 2 (rm) of run {run_id}; resuming it here with "
                          "journal_host:tools\nrun_code ok:\n"), out
    assert "removed a.txt" in out and "<b.txt>" in out
    assert _lines(counts) == ["read a.txt", "rm a.txt", "read b.txt"]  # each once
    async with SqliteJournalStore(journal) as store:
        run = await store.load_run(run_id)
    assert run is not None and run.status == "done"

    # Again: the run is over, nothing is resumed or called.
    code, _, again = await _cli("approve", run_id, "--journal", str(journal))
    assert code == 1 and "was answered already" in again and "the run is done" in again
    assert _lines(counts) == ["read a.txt", "rm a.txt", "read b.txt"]


async def test_a_run_made_in_a_scope_resumes_only_in_that_scope(tmp_path: Path) -> None:
    journal, counts = tmp_path / "runs.sqlite", tmp_path / "bodies.txt"
    run_id = await _killed_while_waiting(journal, counts, "in=analyst")

    # The command's tools make no scope 'analyst': the decision is recorded, the resume
    # refused in one line, and nothing runs with the registry's own (wider) policies.
    code, _, err = await _cli("approve", run_id, "--journal", str(journal),
                              "--tools", "journal_host:tools", counts=counts)
    assert code == 1
    assert err == (
        f"dsh-jupyter approvals: run {run_id} was made in scope 'analyst', which this process "
        "does not have: create that scope (with its tools and policies) before resuming, or "
        "name the scope to resume in (agent=, --scope)\n")
    assert _lines(counts) == ["read a.txt"]

    # A host that makes the scope again resumes the run in it: its policy holds.
    result = await _resumed_in_a_new_host(journal, counts, run_id, "in=analyst")
    assert result["is_error"] is True and "b.txt is not analyst's" in result["text"], result
    assert _lines(counts) == ["read a.txt", "rm a.txt"]  # b.txt never read
