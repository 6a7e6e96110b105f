"""SqliteJournalStore on real files: what goes in comes back, two stores share a file,
the state machine refuses a second start or a second answer, and a file that is not a
journal is refused with one line naming it. (A process SIGKILLed mid-write:
tests/integration/durable/test_store_kill.py, the unit tier starts no process.)"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from dsh_jupyter.durable import (
    CallOutcome,
    JournalStore,
    PendingApproval,
    RunRecord,
    SqliteJournalStore,
)
from dsh_jupyter.durable.sqlite import FORMAT_VERSION
from dsh_jupyter.errors import JournalError
from dsh_jupyter.registry.policy import Approval

PROGRAM = "rows = await tools.read_csv({'path': 'a.csv'})\nawait tools.rm({'path': 'a.csv'})\n"


def a_run(run_id: str = "run-1", **fields: str) -> RunRecord:
    return RunRecord(run_id=run_id, program=PROGRAM, tools_fingerprint="sha256:abc",
                     call_id="call-9", scope=fields.get("scope"), host="12@box", created=100.0)


async def test_a_run_round_trips_with_its_calls_and_approval(tmp_path: Path) -> None:
    async with SqliteJournalStore(tmp_path / "journal.sqlite") as store:
        journal: JournalStore = store
        await journal.record_run(a_run(scope="agent-a"))
        await journal.record_call("run-1", 1, "read_csv", {"path": "a.csv", "n": [1, 2.5]})
        await journal.mark_started("run-1", 1)
        await journal.record_call_result("run-1", 1, CallOutcome(value={"rows": ["é", None]}))
        await journal.record_call("run-1", 2, "rm", {"path": "a.csv"})
        await journal.mark_pending("run-1", 2, "deletes a file")

        loaded = await journal.load_run("run-1")
        assert loaded is not None
        assert loaded.run == a_run(scope="agent-a")
        assert loaded.status == "waiting"
        first, second = loaded.calls
        assert (first.position, first.tool, first.state) == (1, "read_csv", "done")
        assert first.arguments == {"path": "a.csv", "n": [1, 2.5]}
        assert first.outcome == CallOutcome(value={"rows": ["é", None]})
        assert first.started is not None and first.ended is not None
        assert (second.state, second.outcome, second.started) == ("issued", None, None)
        assert loaded.open_approval is not None
        assert (loaded.open_approval.position, loaded.open_approval.reason) == (2, "deletes a file")

        [pending] = await journal.list_pending()
        assert pending == PendingApproval(
            run_id="run-1", position=2, tool="rm", arguments={"path": "a.csv"},
            reason="deletes a file", asked=pending.asked, scope="agent-a", host="12@box")

        answer = Approval(approved=True, answered_by="cli", note="ok by me")
        resolved = await journal.resolve("run-1", answer)
        assert (resolved.position, resolved.decision) == (2, answer)
        assert await journal.list_pending() == ()
        assert await journal.claim("run-1", "34@box") is True
        assert await journal.claim("run-1", "56@box") is False  # taken already

        await journal.mark_started("run-1", 2)
        await journal.record_call_result("run-1", 2, CallOutcome(error="no such file",
                                                                 code="TOOL_ERROR"))
        await journal.finish_run("run-1", "done", {"value": 3})
        done = await journal.load_run("run-1")
        assert done is not None
        assert (done.status, done.result, done.run.host) == ("done", {"value": 3}, "34@box")
        assert done.calls[1].outcome == CallOutcome(error="no such file", code="TOOL_ERROR")
        assert done.approvals[0].decision == answer and done.open_approval is None
        assert await journal.load_run("run-2") is None

    # And from a fresh store on the same file, after the first one closed.
    async with SqliteJournalStore(tmp_path / "journal.sqlite") as again:
        assert await again.load_run("run-1") == done


async def test_two_stores_on_one_file_see_each_others_writes(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    async with SqliteJournalStore(path) as host, SqliteJournalStore(path) as cli:
        await host.record_run(a_run())
        await host.record_call("run-1", 1, "rm", {"path": "a"})
        await host.mark_pending("run-1", 1, None)
        [pending] = await cli.list_pending()
        assert pending.run_id == "run-1"
        # Both answer at once: exactly one wins, the other is told it was answered.
        outcomes = await asyncio.gather(
            host.resolve("run-1", Approval(approved=True)),
            cli.resolve("run-1", Approval(approved=False, answered_by="cli")),
            return_exceptions=True)
        wins = [o for o in outcomes if not isinstance(o, BaseException)]
        losses = [o for o in outcomes if isinstance(o, JournalError)]
        assert len(wins) == 1 and len(losses) == 1
        assert losses[0].code == "JOURNAL_ANSWERED"
        loaded = await host.load_run("run-1")
        assert loaded is not None and loaded.status == "decided"
        assert loaded.approvals[0].decision == wins[0].decision


async def test_many_concurrent_writes_from_one_store_all_land(tmp_path: Path) -> None:
    async with SqliteJournalStore(tmp_path / "j.sqlite") as store:
        await store.record_run(a_run())
        await asyncio.gather(*(store.record_call("run-1", n, "t", {"n": n})
                               for n in range(1, 41)))
        loaded = await store.load_run("run-1")
        assert loaded is not None
        assert [c.arguments for c in loaded.calls] == [{"n": n} for n in range(1, 41)]


async def test_the_state_machine_refuses_a_second_start_or_answer(tmp_path: Path) -> None:
    async with SqliteJournalStore(tmp_path / "j.sqlite") as store:
        await store.record_run(a_run())
        await store.record_call("run-1", 1, "rm", {})
        await store.mark_started("run-1", 1)
        with pytest.raises(JournalError, match=r"call 1 of run run-1 started already") as twice:
            await store.mark_started("run-1", 1)  # the double call the journal stops
        assert twice.value.code == "JOURNAL_CONFLICT"
        await store.record_call_result("run-1", 1, CallOutcome(value=1))
        with pytest.raises(JournalError, match="done already"):
            await store.record_call_result("run-1", 1, CallOutcome(value=2))
        with pytest.raises(JournalError, match="no approval waiting") as early:
            await store.resolve("run-1", Approval(approved=True))
        assert early.value.code == "JOURNAL_ANSWERED"
        with pytest.raises(JournalError, match="has no run nope: `dsh-jupyter approvals list`"
                           ) as unknown:
            await store.resolve("nope", Approval(approved=True))
        assert unknown.value.code == "JOURNAL_UNKNOWN_RUN"
        with pytest.raises(JournalError, match="has call 1 of run run-1 already") as again:
            await store.record_call("run-1", 1, "ls", {})
        assert again.value.code == "JOURNAL_CONFLICT"
        with pytest.raises(JournalError, match="has no call 7 in run run-1"):
            await store.mark_started("run-1", 7)
        with pytest.raises(JournalError, match="has a run run-1 already") as duplicate:
            await store.record_run(a_run())
        assert duplicate.value.code == "JOURNAL_CONFLICT"
        # A refused write leaves nothing behind (its transaction is rolled back).
        loaded = await store.load_run("run-1")
        assert loaded is not None and loaded.calls[0].outcome == CallOutcome(value=1)


async def test_a_failed_write_is_rolled_back_whole(tmp_path: Path) -> None:
    async with SqliteJournalStore(tmp_path / "j.sqlite") as store:
        await store.record_run(a_run())
        await store.record_call("run-1", 1, "rm", {})
        await store.mark_pending("run-1", 1, "first")
        await store.record_call("run-1", 2, "rm", {})
        # A second approval while one is open: refused, and the run stays as it was.
        with pytest.raises(JournalError, match="it is waiting, not running") as second:
            await store.mark_pending("run-1", 2, "second")
        assert second.value.code == "JOURNAL_CONFLICT"
        loaded = await store.load_run("run-1")
        assert loaded is not None
        assert [a.reason for a in loaded.approvals] == ["first"]


@pytest.mark.parametrize(("content", "says"), [
    (b"this is my shopping list\n" * 100, "is unreadable (file is not a database): move the "
                                          "file away or choose another path"),
    (b"SQLite format 3\x00" + b"\xff" * 4000, "is unreadable"),
])
async def test_a_file_that_is_not_a_database_is_one_clear_line(
        tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "journal.sqlite"
    path.write_bytes(content)
    with pytest.raises(JournalError) as refused:
        async with SqliteJournalStore(path):
            pass
    message = str(refused.value)
    assert message.startswith(f"the journal {path} ")
    assert says in message and "\n" not in message
    assert refused.value.code == "JOURNAL_UNREADABLE"
    assert path.read_bytes() == content  # left as it was


async def test_another_sqlite_database_or_a_newer_journal_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    db.close()
    with pytest.raises(JournalError, match=rf"^the journal {other} is an SQLite database but "
                       r"not a dsh-jupyter journal: move the file away"):
        async with SqliteJournalStore(other):
            pass
    # Left as it was: still in its own journal mode (not switched to WAL), no files beside it.
    with sqlite3.connect(other) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    db.close()
    assert os.listdir(tmp_path) == ["app.sqlite"]

    newer = tmp_path / "newer.sqlite"
    async with SqliteJournalStore(newer):
        pass
    with sqlite3.connect(newer) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'version'", (str(FORMAT_VERSION + 1),))
    db.close()
    with pytest.raises(JournalError, match=rf"has format version {FORMAT_VERSION + 1}, newer "
                       rf"than this dsh-jupyter's {FORMAT_VERSION}: upgrade dsh-jupyter"):
        async with SqliteJournalStore(newer):
            pass


async def test_a_missing_folder_says_so(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "journal.sqlite"
    with pytest.raises(JournalError, match=r"cannot be opened \(unable to open database file\): "
                       "check that its folder exists and is writable"):
        async with SqliteJournalStore(path):
            pass
    assert not path.parent.exists()


@pytest.mark.parametrize("where", ["journal.sqlite", "no/such/journal.sqlite"])
async def test_without_create_a_missing_file_is_refused_and_not_made(
        tmp_path: Path, where: str) -> None:
    path = tmp_path / where
    with pytest.raises(JournalError) as missing:
        async with SqliteJournalStore(path, create=False):
            pass
    assert str(missing.value) == (f"the journal {path} does not exist: check the path (a "
                                  "journal is created by the process that records runs into it)")
    assert missing.value.code == "JOURNAL_UNREADABLE"
    assert os.listdir(tmp_path) == []


async def test_without_create_an_empty_file_is_refused_and_left_empty(tmp_path: Path) -> None:
    path = tmp_path / "typo.sqlite"
    path.touch()
    with pytest.raises(JournalError, match=rf"^the journal {path} is empty, not a journal: "
                       "check the path$"):
        async with SqliteJournalStore(path, create=False):
            pass
    assert path.read_bytes() == b""
    assert os.listdir(tmp_path) == [path.name]


async def test_without_create_an_existing_journal_opens(tmp_path: Path) -> None:
    path = tmp_path / "odd name?#%.sqlite"  # characters a file: URI must escape
    async with SqliteJournalStore(path) as host:
        await host.record_run(a_run())
        await host.record_call("run-1", 1, "rm", {"path": "a"})
        await host.mark_pending("run-1", 1, "deletes")
    async with SqliteJournalStore(path, create=False) as reader:
        [pending] = await reader.list_pending()
        assert pending.reason == "deletes"
        await reader.resolve("run-1", Approval(approved=True, answered_by="cli"))
    async with SqliteJournalStore(path) as host:
        loaded = await host.load_run("run-1")
        assert loaded is not None and loaded.status == "decided"


async def test_nothing_touches_the_file_before_the_first_operation(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    store = SqliteJournalStore(path)
    assert not path.exists()
    assert await store.list_pending() == ()  # opens it
    assert path.exists()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    db.close()
    await store.aclose()
    await store.aclose()  # closing twice is nothing
    await store.record_run(a_run())  # a later operation opens it again
    assert (await store.load_run("run-1")) is not None
    async with SqliteJournalStore(path) as other:
        assert (await other.load_run("run-1")) is not None
    await store.aclose()


async def test_concurrent_first_operations_open_the_file_once(tmp_path: Path) -> None:
    store = SqliteJournalStore(tmp_path / "journal.sqlite")
    await asyncio.gather(*(store.list_pending() for _ in range(8)))
    first = store._db
    assert first is not None
    await store.list_pending()
    assert store._db is first
    await store.aclose()


async def test_a_file_locked_by_another_writer_too_long_is_one_clear_line(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    async with SqliteJournalStore(path, busy_timeout=0.2) as store:
        await store.record_run(a_run())
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process, mid-write, for ever
        try:
            with pytest.raises(JournalError) as busy:
                await store.record_call("run-1", 1, "rm", {})
            assert str(busy.value) == (
                f"the journal {path} stayed locked by another writer for 0.2 s (database is "
                "locked): retry, or stop the process holding it")
            assert busy.value.code == "JOURNAL_BUSY"
            assert await store.list_pending() == ()  # reads go on under WAL
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await store.record_call("run-1", 1, "rm", {})  # and writes once it lets go


async def test_unsynced_writes_leave_the_connection_synced_for_the_next(tmp_path: Path) -> None:
    # issued and done commit without an fsync; started, a question, an answer, a claim
    # and a run's end with one (docs/approvals-durable.md): the pragma is per commit.
    async with SqliteJournalStore(tmp_path / "journal.sqlite") as store:
        conn = store._db
        assert conn is not None
        await store.record_run(a_run())
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
        await store.record_call("run-1", 1, "rm", {"path": "a"})
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)
        with pytest.raises(JournalError):
            await store.record_call("run-1", 1, "rm", {"path": "a"})  # refused, rolled back
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)
        await store.mark_started("run-1", 1)
        await store.record_call_result("run-1", 1, CallOutcome(value=1))
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)
        run = await store.load_run("run-1")
        assert run is not None and run.calls[0].state == "done"


async def test_the_journal_keeps_one_secret_for_every_store_on_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    first, second = SqliteJournalStore(path), SqliteJournalStore(path)
    try:
        # Both open first, one after the other (two stores opening a new file while the
        # other writes to it can meet "database is locked" at once, not after
        # busy_timeout: a limit of opening, not of secret()), then both ask at once.
        assert await first.load_run("none") is None and await second.load_run("none") is None
        a, b = await asyncio.gather(first.secret(), second.secret())
        assert a == b and len(a) == 32
        assert await first.secret() == a
    finally:
        await first.aclose()
        await second.aclose()
    async with SqliteJournalStore(path) as reopened:
        assert await reopened.secret() == a
    async with SqliteJournalStore(tmp_path / "other.sqlite") as other:
        assert await other.secret() != a


async def test_stores_opening_one_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    # The first to open a new file switches it to WAL and makes the schema; the others,
    # meanwhile, find it locked without SQLite's busy handler waiting: they retry.
    for attempt in range(30):
        path = tmp_path / f"journal-{attempt}.sqlite"
        stores = [SqliteJournalStore(path) for _ in range(6)]
        await asyncio.gather(*(store.record_run(a_run(f"run-{n}"))
                               for n, store in enumerate(stores)))
        assert [p.run_id for p in await stores[0].list_pending()] == []
        for store in stores:
            await store.aclose()


async def test_an_outcome_keeps_the_key_order_the_program_saw(tmp_path: Path) -> None:
    async with SqliteJournalStore(tmp_path / "journal.sqlite") as store:
        await store.record_run(a_run())
        await store.record_call("run-1", 1, "stat", {"z": 1, "a": 2})
        await store.record_call_result("run-1", 1, CallOutcome(value={"size": 3, "name": "a"}))
        run = await store.load_run("run-1")
    assert run is not None and run.calls[0].outcome is not None
    assert list(run.calls[0].outcome.value) == ["size", "name"]  # type: ignore[arg-type]


# The schema of format 1, as the first release wrote it (runs had no scope_name).
FORMAT_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, program TEXT NOT NULL, tools_fingerprint TEXT NOT NULL,
    call_id TEXT NOT NULL, scope TEXT, host TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'waiting', 'decided', 'done', 'failed')),
    created REAL NOT NULL, updated REAL NOT NULL, result TEXT);
CREATE TABLE calls (
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    position INTEGER NOT NULL CHECK (position >= 1), tool TEXT NOT NULL,
    arguments TEXT NOT NULL, state TEXT NOT NULL CHECK (state IN ('issued', 'started', 'done')),
    outcome TEXT, started REAL, ended REAL, PRIMARY KEY (run_id, position));
CREATE TABLE approvals (
    run_id TEXT NOT NULL, position INTEGER NOT NULL, reason TEXT, asked REAL NOT NULL,
    decision TEXT, answered REAL, PRIMARY KEY (run_id, position),
    FOREIGN KEY (run_id, position) REFERENCES calls (run_id, position) ON DELETE CASCADE);
CREATE INDEX runs_by_status ON runs (status, updated);
INSERT INTO meta VALUES ('format', 'dsh-jupyter journal'), ('version', '1');
INSERT INTO runs VALUES ('old-1', 'await tools.rm({})', 'sha256:abc', 'call-1', 'scope-1f',
                         '12@box', 'waiting', 100.0, 101.0, NULL);
INSERT INTO calls VALUES ('old-1', 1, 'rm', '{}', 'issued', NULL, NULL, NULL);
INSERT INTO approvals VALUES ('old-1', 1, 'rm deletes', 101.0, NULL, NULL);
"""


async def test_a_format_1_journal_is_upgraded_in_place_and_keeps_its_runs(
        tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(FORMAT_1)
    db.close()
    # Two stores open it at once (two processes after an upgrade): both get it upgraded once.
    first, second = SqliteJournalStore(path), SqliteJournalStore(path)
    pending, old = await asyncio.gather(first.list_pending(), second.load_run("old-1"))
    assert [(p.run_id, p.tool, p.scope, p.scope_name) for p in pending] == [
        ("old-1", "rm", "scope-1f", None)]
    assert old is not None and old.run.scope == "scope-1f" and old.run.scope_name is None
    assert old.open_approval is not None and old.open_approval.reason == "rm deletes"
    # A new run keeps its scope's name; the old one can still be answered.
    await first.record_run(replace(a_run("run-2", scope="scope-2a"), scope_name="analyst"))
    loaded = await second.load_run("run-2")
    assert loaded is not None and loaded.run.scope_name == "analyst"
    await second.resolve("old-1", Approval(approved=True))
    await first.aclose()
    await second.aclose()
    with sqlite3.connect(path) as db:
        version = db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
        columns = [row[1] for row in db.execute("PRAGMA table_info(runs)")]
    db.close()
    assert version == (str(FORMAT_VERSION),) and FORMAT_VERSION == 2
    assert columns.count("scope_name") == 1
