"""A journal survives its process being SIGKILLed: a real child process writes through
SqliteJournalStore and is killed, and a fresh store on the file reads the committed
writes only (the promise durable runs rest on: docs/approvals-durable.md)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from dsh_jupyter.durable import CallOutcome, SqliteJournalStore

pytestmark = pytest.mark.timeout(60)

# The child: record a run, then either stop between two writes, inside a transaction it
# never commits, or write call after call until it is killed. It prints a line after
# each commit, and "in" once inside the uncommitted transaction.
CHILD = r"""
import asyncio, sys, time
from dsh_jupyter.durable import CallOutcome, RunRecord, SqliteJournalStore

async def main(path, how):
    async with SqliteJournalStore(path) as store:
        await store.record_run(RunRecord(run_id="r", program="p", tools_fingerprint="f",
                                         call_id="c", host="child"))
        await store.record_call("r", 1, "rm", {"path": "a"})
        await store.mark_started("r", 1)
        print("committed 1", flush=True)
        if how == "between":
            time.sleep(600)
        elif how == "inside":
            def hang(db):
                db.execute("UPDATE calls SET state = 'done', outcome = '{\"value\": 1}'"
                           " WHERE position = 1")
                db.execute("INSERT INTO calls (run_id, position, tool, arguments, state)"
                           " VALUES ('r', 2, 'rm', '{}', 'issued')")
                print("in", flush=True)
                time.sleep(600)
            await store._write(hang)
        else:
            await store.record_call_result("r", 1, CallOutcome(value=1))
            n = 2
            while True:
                await store.record_call("r", n, "t", {"n": n, "pad": "x" * 2000})
                print(f"committed {n}", flush=True)
                n += 1

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def _run_and_kill(path: Path, how: str, until: str) -> list[str]:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(path), how, stdout=asyncio.subprocess.PIPE)
    assert child.stdout is not None
    lines: list[str] = []
    try:
        while not lines or lines[-1] != until:
            line = await asyncio.wait_for(child.stdout.readline(), 30)
            assert line, f"the child ended early after {lines}"
            lines.append(line.decode().strip())
        os.kill(child.pid, signal.SIGKILL)
        assert await child.wait() == -signal.SIGKILL
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    # Whatever it printed after the kill was ordered: take the rest, it is committed too.
    lines.extend(line.decode().strip() for line in (await child.stdout.read()).splitlines())
    return lines


async def test_killed_between_two_writes_keeps_the_first(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    await _run_and_kill(path, "between", "committed 1")
    async with SqliteJournalStore(path) as store:
        run = await store.load_run("r")
        assert run is not None and run.status == "running"
        [call] = run.calls
        assert (call.state, call.outcome) == ("started", None)  # in doubt: never run again


async def test_killed_inside_a_transaction_keeps_none_of_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    await _run_and_kill(path, "inside", "in")
    async with SqliteJournalStore(path) as store:
        run = await store.load_run("r")
        assert run is not None
        assert [(c.position, c.state) for c in run.calls] == [(1, "started")]
        # The dead writer's lock went with it: the next write goes through at once.
        await store.record_call_result("r", 1, CallOutcome(value="after"))
        again = await store.load_run("r")
        assert again is not None and again.calls[0].outcome == CallOutcome(value="after")


async def test_killed_while_writing_leaves_a_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    lines = await _run_and_kill(path, "loop", "committed 40")
    last = int(lines[-1].split()[1])
    async with SqliteJournalStore(path) as store:
        run = await store.load_run("r")
        assert run is not None
        positions = [c.position for c in run.calls]
        # Every committed call is there, whole; at most the one in flight besides.
        assert positions[:last] == list(range(1, last + 1))
        assert len(positions) in (last, last + 1)
        assert all(c.arguments == {"n": c.position, "pad": "x" * 2000}
                   for c in run.calls[1:])
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
