"""``dsh-jupyter approvals`` in a real process, on a real journal written through
SqliteJournalStore: runs waiting are listed, answered once (the store then holds the
decision), and every journal it cannot use is one line on stderr and exit status 1."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_jupyter.durable import JournaledRun, RunRecord, SqliteJournalStore
from dsh_jupyter.durable.host import current_host
from dsh_jupyter.json_value import JsonObject
from dsh_jupyter.registry.policy import Approval

pytestmark = pytest.mark.timeout(60)

CLI = [sys.executable, "-m", "dsh_jupyter.cli", "approvals"]


def cli(*args: str, journal: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if name != "DSH_JOURNAL"}
    if journal is not None:
        env["DSH_JOURNAL"] = str(journal)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=50, env=env)


def a_gone_host() -> str:
    """The host of a process that ran and was reaped."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True, timeout=50)
    return f"{done.stdout.strip()}@{current_host().partition('@')[2]}"


async def wait(path: Path, run_id: str, host: str, tool: str, arguments: JsonObject,
               reason: str | None) -> None:
    """A run whose second call waits for an approval, as its host would journal it."""
    async with SqliteJournalStore(path) as journal:
        await journal.record_run(RunRecord(run_id=run_id, program="...", call_id="call-1",
                                           tools_fingerprint="sha256:0", host=host))
        await journal.record_call(run_id, 1, "ls", {})
        await journal.mark_started(run_id, 1)
        await journal.record_call(run_id, 2, tool, arguments)
        await journal.mark_pending(run_id, 2, reason)


async def load(path: Path, run_id: str) -> JournaledRun:
    async with SqliteJournalStore(path) as journal:
        run = await journal.load_run(run_id)
    assert run is not None
    return run


async def made(path: Path) -> None:
    """A journal as a host makes it, with nothing recorded yet."""
    async with SqliteJournalStore(path):
        pass


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    """Three runs waiting: hosted by this test's process (alive), by a process that has
    ended (gone), and on another machine."""
    path = tmp_path / "runs.sqlite"
    asyncio.run(wait(path, "run-alive", current_host(), "rm", {"path": "a.csv"},
                     "deletes a file"))
    asyncio.run(wait(path, "run-gone", a_gone_host(), "send_mail", {"to": "boss"}, None))
    asyncio.run(wait(path, "run-far", "12@another-machine.example", "write_file",
                     {"path": "b"}, "writes"))
    return path


def test_list_shows_each_run_waiting_and_its_host(journal: Path) -> None:
    done = cli("list", "--journal", str(journal))
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.splitlines()
    assert header.split() == ["RUN", "CALL", "TOOL", "ARGUMENTS", "REASON", "ASKED", "HOST"]
    assert [line.split()[:3] for line in lines] == [
        ["run-alive", "2", "rm"], ["run-gone", "2", "send_mail"], ["run-far", "2", "write_file"]]
    alive, gone, far = lines
    assert '{"path": "a.csv"}' in alive and "deletes a file" in alive
    assert alive.endswith(f"{current_host()} (alive)")
    assert gone.endswith("(gone)") and far.endswith("12@another-machine.example (unknown)")
    assert all("s ago" in line or "just now" in line for line in lines)

    as_json = cli("list", "--json", journal=journal)  # the path from DSH_JOURNAL
    assert as_json.returncode == 0, as_json.stderr
    rows = json.loads(as_json.stdout)
    assert [(row["run_id"], row["host_state"]) for row in rows] == [
        ("run-alive", "alive"), ("run-gone", "gone"), ("run-far", "unknown")]
    assert rows[0]["arguments"] == {"path": "a.csv"} and rows[1]["reason"] is None


def test_approve_records_the_decision_once(journal: Path) -> None:
    done = cli("approve", "run-alive", "--journal", str(journal), "--note", "fine by me")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f'approved call 2 (rm) of run run-alive, note "fine by me"; its '
                           f"host {current_host()} is running: it picks the decision up if "
                           "the run still waits there, else resume the run in that process: "
                           'await registry.resume("run-alive")\n')
    run = asyncio.run(load(journal, "run-alive"))
    assert run.status == "decided"
    assert run.approvals[0].decision == Approval(approved=True, answered_by="cli",
                                                 note="fine by me")

    again = cli("approve", "run-alive", "--journal", str(journal))
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.startswith("dsh-jupyter approvals: run run-alive was answered "
                                   "already: call 2 (rm) approved by cli ")
    assert again.stderr.endswith('note "fine by me"; the run is decided\n')
    assert asyncio.run(load(journal, "run-alive")).approvals[0].decision == Approval(
        approved=True, answered_by="cli", note="fine by me")  # the first answer stands

    listed = cli("list", "--journal", str(journal))
    assert "run-alive" not in listed.stdout and "run-gone" in listed.stdout


def test_approve_all_in_run_records_an_approval_for_the_runs_later_calls(
        journal: Path) -> None:
    done = cli("approve", "run-gone", "--all-in-run", journal=journal)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("approved call 2 (send_mail) and every later send_mail "
                                  "call of run run-gone; its host ")
    run = asyncio.run(load(journal, "run-gone"))
    assert run.approvals[0].decision == Approval(approved=True, answered_by="cli",
                                                 for_run=True)


def test_reject_records_it_and_says_a_gone_run_must_be_resumed(journal: Path) -> None:
    done = cli("reject", "run-gone", "--note", "not today", journal=journal)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('rejected call 2 (send_mail) of run run-gone, note "not '
                                  'today"; its host ')
    assert done.stdout.endswith(" is gone: resume the run with the same tools and this "
                                'journal, in Python: await registry.resume("run-gone")\n')
    run = asyncio.run(load(journal, "run-gone"))
    assert run.approvals[0].decision == Approval(approved=False, answered_by="cli",
                                                 note="not today")

    far = cli("approve", "run-far", journal=journal)
    assert far.returncode == 0, far.stderr
    assert "its host 12@another-machine.example cannot be checked from here" in far.stdout


def test_an_empty_journal_says_nothing_is_waiting(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    asyncio.run(made(path))
    done = cli("list", "--journal", str(path))
    assert (done.returncode, done.stdout) == (
        0, f"nothing is waiting for an approval in {path}\n")
    assert json.loads(cli("list", "--json", journal=path).stdout) == []


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("dsh-jupyter approvals: the journal ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    return done.stderr


def test_an_unknown_run_is_one_line(journal: Path) -> None:
    said = one_line_error(cli("approve", "no-such-run", "--journal", str(journal)))
    assert f"{journal} has no run no-such-run: `dsh-jupyter approvals list`" in said


def test_a_missing_journal_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "typo.sqlite"
    for args in (["list"], ["approve", "r1"], ["reject", "r1"]):
        said = one_line_error(cli(*args, "--journal", str(path)))
        assert f"{path} does not exist: check the path" in said
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_a_journal_is_left_as_it_was(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("my shopping list\n" * 100)
    said = one_line_error(cli("list", "--journal", str(text)))
    assert "is unreadable (file is not a database): move the file away" in said
    assert text.read_text() == "my shopping list\n" * 100

    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    db.close()
    before = other.read_bytes()
    said = one_line_error(cli("approve", "r1", "--journal", str(other)))
    assert "is an SQLite database but not a dsh-jupyter journal" in said
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sqlite", "notes.txt"]


def test_a_journal_locked_by_a_writer_is_one_line(journal: Path) -> None:
    holder = sqlite3.connect(journal, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a host mid-write, for longer than busy_timeout
    try:
        said = one_line_error(cli("approve", "run-alive", "--journal", str(journal)))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "stayed locked by another writer for 5.0 s (database is locked): retry" in said
    assert asyncio.run(load(journal, "run-alive")).status == "waiting"
