"""The default journal store: one SQLite file at a path the user chooses.

::

    async with SqliteJournalStore("~/runs/journal.sqlite") as journal:
        await journal.record_run(RunRecord(run_id=..., program=..., ...))
        pending = await journal.list_pending()

Why it is safe when its process dies: every write is one transaction (``BEGIN IMMEDIATE``
… ``COMMIT``) in WAL mode, so a process killed (SIGKILL) mid-write leaves the file with
every committed write and none of the interrupted one. The writes the journal's promise
("never call a tool twice") rests on are also synced (``synchronous=FULL``: an fsync at
commit) and survive a power cut: a call's ``started`` mark, before its body runs, an
approval's question and answer, a claim, a run's end. A run's start, a call's ``issued``
and its outcome are not (``NORMAL``: one fsync a sub-call instead of three): the WAL is
one sequential file, so the next synced commit makes them durable too, and a power cut
before it loses at most a call's ``done``, which then reads as ``started``, in doubt,
never called again.

Threads: the API is async; each operation runs on a worker thread
(:func:`asyncio.to_thread`) over the store's one connection, one at a time (a lock), so
the event loop never waits on the disk. An operation whose caller is cancelled still
finishes its transaction. Several stores, in one process or several, may open one file:
SQLite serialises their writes (a writer waits up to ``busy_timeout`` seconds).

The schema (``meta`` names the format and its version; docs/approvals-durable.md explains
each column) is created when the file is new or empty, unless the store was made with
``create=False`` (then a missing or empty file is refused); a file that is not a journal,
or one written by a newer format, is refused with one line naming the path, and left as
it was; one written by an older format is upgraded in place when it is opened (format 2
added ``runs.scope_name``).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar, cast

from ..errors import JournalError
from ..json_value import JsonObject, JsonValue
from ..registry.policy import Approval
from .store import (
    ApprovalRecord,
    CallOutcome,
    CallRecord,
    CallState,
    JournaledRun,
    PendingApproval,
    RunRecord,
    RunStatus,
)

__all__ = ["FORMAT", "FORMAT_VERSION", "SqliteJournalStore"]

FORMAT = "dsh-jupyter journal"
FORMAT_VERSION = 2
"""2 added ``runs.scope_name``; a version 1 file is upgraded when it is opened."""

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    program TEXT NOT NULL,
    tools_fingerprint TEXT NOT NULL,
    call_id TEXT NOT NULL,
    scope TEXT,
    scope_name TEXT,
    host TEXT NOT NULL,
    status TEXT NOT NULL
        CHECK (status IN ('running', 'waiting', 'decided', 'done', 'failed')),
    created REAL NOT NULL,
    updated REAL NOT NULL,
    result TEXT
);
CREATE TABLE calls (
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    position INTEGER NOT NULL CHECK (position >= 1),
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('issued', 'started', 'done')),
    outcome TEXT,
    started REAL,
    ended REAL,
    PRIMARY KEY (run_id, position)
);
CREATE TABLE approvals (
    run_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    reason TEXT,
    asked REAL NOT NULL,
    decision TEXT,
    answered REAL,
    PRIMARY KEY (run_id, position),
    FOREIGN KEY (run_id, position) REFERENCES calls (run_id, position) ON DELETE CASCADE
);
CREATE INDEX runs_by_status ON runs (status, updated);
"""

_SECRET_KEY = "secret"
"""``meta`` key of the journal's secret (:meth:`SqliteJournalStore.secret`), hex."""
_SECRET_BYTES = 32

_T = TypeVar("_T")
_MOVE_AWAY = "move the file away or choose another path"


class SqliteJournalStore:
    """A :class:`~.store.JournalStore` in one SQLite file (see the module docstring),
    and a :class:`~.store.JournalSecret` (its secret in ``meta``). Nothing touches the
    file before the first operation, which opens it (or ``async with``, which opens it at
    once); :meth:`aclose` (or leaving the ``async with``) closes it, and a later
    operation opens it again."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 5.0,
                 create: bool = True) -> None:
        """``create=False`` opens an existing journal only: a missing file is an error, not
        a new journal (what a reader such as ``dsh-jupyter approvals`` wants: a mistyped
        path must not leave an empty journal behind)."""
        self.path = Path(path).expanduser()
        self._busy_timeout = busy_timeout
        self._create = create
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._secret: bytes | None = None

    async def __aenter__(self) -> SqliteJournalStore:
        if self._db is not None:
            raise RuntimeError("this SqliteJournalStore is open already")
        await self._opened()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the file (a store that is not open has nothing to close)."""
        db, self._db = self._db, None
        if db is not None:
            await asyncio.to_thread(self._close, db)

    # Writes ------------------------------------------------------------------------------
    async def record_run(self, run: RunRecord) -> None:
        def write(db: sqlite3.Connection) -> None:
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)).fetchone():
                raise self._error(f"has a run {run.run_id} already: give each run a new id",
                                  "JOURNAL_CONFLICT")
            now = time.time()
            db.execute("INSERT INTO runs (run_id, program, tools_fingerprint, call_id, scope,"
                       " scope_name, host, status, created, updated) VALUES (?, ?, ?, ?, ?, ?,"
                       " ?, 'running', ?, ?)",
                       (run.run_id, run.program, run.tools_fingerprint, run.call_id, run.scope,
                        run.scope_name, run.host, run.created or now, now))
        await self._write(write, synced=False)

    async def record_call(self, run_id: str, position: int, tool: str,
                          arguments: JsonObject) -> None:
        def write(db: sqlite3.Connection) -> None:
            self._require_run(db, run_id)
            if db.execute("SELECT 1 FROM calls WHERE run_id = ? AND position = ?",
                          (run_id, position)).fetchone():
                raise self._error(f"has call {position} of run {run_id} already",
                                  "JOURNAL_CONFLICT")
            db.execute("INSERT INTO calls (run_id, position, tool, arguments, state)"
                       " VALUES (?, ?, ?, ?, 'issued')", (run_id, position, tool,
                                                          _dump(arguments)))
            self._touch(db, run_id)
        await self._write(write, synced=False)

    async def mark_started(self, run_id: str, position: int) -> None:
        await self._write(lambda db: self._move_call(
            db, run_id, position, "started", ("issued",),
            "started = ?", (time.time(),)))

    async def record_call_result(self, run_id: str, position: int,
                                 outcome: CallOutcome) -> None:
        await self._write(lambda db: self._move_call(
            db, run_id, position, "done", ("issued", "started"),
            "outcome = ?, ended = ?", (_dump(outcome.to_json(), sort_keys=False), time.time())),
            synced=False)

    async def mark_pending(self, run_id: str, position: int, reason: str | None) -> None:
        def write(db: sqlite3.Connection) -> None:
            status = self._require_run(db, run_id)
            if status != "running":
                raise self._error(f"cannot open an approval in run {run_id}: it is {status}, "
                                  "not running", "JOURNAL_CONFLICT")
            self._require_call(db, run_id, position)
            db.execute("INSERT INTO approvals (run_id, position, reason, asked)"
                       " VALUES (?, ?, ?, ?)", (run_id, position, reason, time.time()))
            self._touch(db, run_id, "waiting")
        await self._write(write)

    async def resolve(self, run_id: str, decision: Approval) -> ApprovalRecord:
        def write(db: sqlite3.Connection) -> ApprovalRecord:
            status = self._require_run(db, run_id)
            row = db.execute("SELECT position, reason, asked FROM approvals WHERE run_id = ?"
                             " AND decision IS NULL", (run_id,)).fetchone()
            if row is None or status != "waiting":
                raise self._error(f"has no approval waiting in run {run_id} (it is {status}):"
                                  " answered already?", "JOURNAL_ANSWERED")
            answered = time.time()
            db.execute("UPDATE approvals SET decision = ?, answered = ? WHERE run_id = ?"
                       " AND position = ?", (_dump(_approval_json(decision)), answered,
                                             run_id, row[0]))
            self._touch(db, run_id, "decided")
            return ApprovalRecord(position=row[0], reason=row[1], asked=row[2],
                                  decision=decision, answered=answered)
        return await self._write(write)

    async def claim(self, run_id: str, host: str) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            self._require_run(db, run_id)
            moved = db.execute("UPDATE runs SET status = 'running', host = ?, updated = ?"
                               " WHERE run_id = ? AND status = 'decided'",
                               (host, time.time(), run_id))
            return moved.rowcount == 1
        return await self._write(write)

    async def finish_run(self, run_id: str, status: Literal["done", "failed"],
                         result: JsonValue = None) -> None:
        def write(db: sqlite3.Connection) -> None:
            self._require_run(db, run_id)
            db.execute("UPDATE runs SET status = ?, result = ?, updated = ? WHERE run_id = ?",
                       (status, _dump(result, sort_keys=False), time.time(), run_id))
        await self._write(write)

    async def secret(self) -> bytes:
        """The journal's secret (:class:`~.store.JournalSecret`): 32 random bytes written
        to ``meta`` by the first store that asks, read back by every other."""
        if self._secret is not None:
            return self._secret

        def write(db: sqlite3.Connection) -> str:
            # One transaction: of two stores asking at once, the first writes, the second
            # reads what it wrote.
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                       (_SECRET_KEY, secrets.token_hex(_SECRET_BYTES)))
            row = db.execute("SELECT value FROM meta WHERE key = ?", (_SECRET_KEY,)).fetchone()
            return str(row[0])
        text = await self._write(write)
        try:
            secret = bytes.fromhex(text)
        except ValueError:
            secret = b""
        if len(secret) < _SECRET_BYTES:
            raise self._error(f"has a malformed secret in its meta table: {_MOVE_AWAY}",
                              "JOURNAL_UNREADABLE")
        self._secret = secret
        return secret

    # Reads -------------------------------------------------------------------------------
    async def load_run(self, run_id: str) -> JournaledRun | None:
        return await self._call(lambda db: self._load(db, run_id))

    async def list_pending(self) -> tuple[PendingApproval, ...]:
        def read(db: sqlite3.Connection) -> tuple[PendingApproval, ...]:
            rows = db.execute(
                "SELECT a.run_id, a.position, c.tool, c.arguments, a.reason, a.asked,"
                " r.scope, r.host, r.scope_name FROM approvals AS a"
                " JOIN calls AS c ON c.run_id = a.run_id AND c.position = a.position"
                " JOIN runs AS r ON r.run_id = a.run_id"
                " WHERE a.decision IS NULL AND r.status = 'waiting'"
                " ORDER BY a.asked, a.run_id").fetchall()
            return tuple(PendingApproval(run_id=r[0], position=r[1], tool=r[2],
                                         arguments=_object(r[3]), reason=r[4], asked=r[5],
                                         scope=r[6], host=r[7], scope_name=r[8])
                         for r in rows)
        return await self._call(read)

    # The connection ----------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        # Without create, mode=rw: SQLite opens the file only if it exists, and never makes it.
        target = self.path if self._create else f"{self.path.absolute().as_uri()}?mode=rw"
        try:
            db = sqlite3.connect(target, timeout=self._busy_timeout, isolation_level=None,
                                 check_same_thread=False, uri=not self._create)
        except sqlite3.Error as exc:
            if not self._create and not self.path.exists():
                raise self._error("does not exist: check the path (a journal is created by "
                                  "the process that records runs into it)",
                                  "JOURNAL_UNREADABLE") from None
            raise self._unreadable(exc) from None
        try:
            self._prepare(db)
        except BaseException as exc:
            db.close()
            if isinstance(exc, sqlite3.Error):
                raise self._unreadable(exc) from None
            raise
        return db

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Check the file, switch it to WAL and make the schema if it is new. Several
        stores opening one new file at once may find it locked while another switches or
        creates it (SQLite does not wait on its busy handler then): each step is retried
        until ``busy_timeout`` has passed."""
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                # Checked before anything is written: a file that is not a journal is left
                # as it was (switching it to WAL would change it).
                version = self._version(db)
                if not version and not self._create:
                    raise self._error("is empty, not a journal: check the path",
                                      "JOURNAL_UNREADABLE")
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = FULL")
                db.execute("PRAGMA foreign_keys = ON")
                if not version:
                    self._create_schema(db)
                elif version < FORMAT_VERSION:
                    self._upgrade(db)
                return
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)  # a worker thread: the event loop does not wait

    def _version(self, db: sqlite3.Connection) -> int:
        """The format version of a journal this version reads, 0 for an empty database; a
        file that is something else, or a newer format, is refused."""
        tables = {row[0] for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return 0
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall()) \
            if "meta" in tables else {}
        if meta.get("format") != FORMAT:
            raise self._error(f"is an SQLite database but not a {FORMAT}: {_MOVE_AWAY}",
                              "JOURNAL_UNREADABLE")
        version = meta.get("version", "")
        if not version.isdigit() or int(version) < 1:
            raise self._error(f"has no valid format version ({version!r}): {_MOVE_AWAY}",
                              "JOURNAL_UNREADABLE")
        if int(version) > FORMAT_VERSION:
            raise self._error(f"has format version {version}, newer than this "
                              f"dsh-jupyter's {FORMAT_VERSION}: upgrade dsh-jupyter, "
                              f"or {_MOVE_AWAY}", "JOURNAL_UNREADABLE")
        return int(version)

    def _upgrade(self, db: sqlite3.Connection) -> None:
        """Bring an older journal to this format, in place and in one transaction (each
        step only adds: a version 1 file gains ``runs.scope_name``, empty for its runs)."""
        db.execute("BEGIN IMMEDIATE")
        try:
            # Checked again under the write lock: another store may have upgraded it.
            if self._version(db) < 2:
                db.execute("ALTER TABLE runs ADD COLUMN scope_name TEXT")
            db.execute("UPDATE meta SET value = ? WHERE key = 'version'",
                       (str(FORMAT_VERSION),))
            db.execute("COMMIT")
        except BaseException:
            _roll_back(db)
            raise

    def _create_schema(self, db: sqlite3.Connection) -> None:
        # Checked again under the write lock: another store may have created it meanwhile.
        db.execute("BEGIN IMMEDIATE")
        try:
            if not self._version(db):
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                               (("format", FORMAT), ("version", str(FORMAT_VERSION))))
            db.execute("COMMIT")
        except BaseException:
            _roll_back(db)
            raise

    def _close(self, db: sqlite3.Connection) -> None:
        with self._lock:
            db.close()

    async def _opened(self) -> sqlite3.Connection:
        def open_once() -> sqlite3.Connection:
            with self._lock:
                if self._db is None:
                    self._db = self._open()
                return self._db
        db = self._db
        return db if db is not None else await asyncio.to_thread(open_once)

    async def _call(self, operation: Callable[[sqlite3.Connection], _T]) -> _T:
        db = await self._opened()
        return await asyncio.to_thread(self._locked, db, operation)

    async def _write(self, operation: Callable[[sqlite3.Connection], _T], *,
                     synced: bool = True) -> _T:
        """``operation`` in one transaction. ``synced=False`` commits without an fsync
        (``synchronous=NORMAL`` for this one commit): it survives its process being killed
        but not a power cut until the next synced commit, which, the WAL being one
        sequential file, makes it durable too (see the module docstring)."""
        def transaction(db: sqlite3.Connection) -> _T:
            if not synced:
                db.execute("PRAGMA synchronous = NORMAL")
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    value = operation(db)
                except BaseException:
                    _roll_back(db)
                    raise
                db.execute("COMMIT")
            finally:
                if not synced:
                    db.execute("PRAGMA synchronous = FULL")
            return value
        return await self._call(transaction)

    def _locked(self, db: sqlite3.Connection, operation: Callable[[sqlite3.Connection], _T]) -> _T:
        with self._lock:
            try:
                return operation(db)
            except sqlite3.Error as exc:
                raise self._unreadable(exc) from None

    # Helpers -----------------------------------------------------------------------------
    def _error(self, what: str, code: str) -> JournalError:
        return JournalError(f"the journal {self.path} {what}", code=code)

    def _unreadable(self, exc: sqlite3.Error) -> JournalError:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, sqlite3.IntegrityError):
            return self._error(f"refuses the write ({text})", "JOURNAL_CONFLICT")
        if _locked(exc):
            return self._error(f"stayed locked by another writer for {self._busy_timeout} s "
                               f"({text}): retry, or stop the process holding it",
                               "JOURNAL_BUSY")
        if "unable to open" in text:
            return self._error(f"cannot be opened ({text}): check that its folder exists and "
                               "is writable", "JOURNAL_UNREADABLE")
        return self._error(f"is unreadable ({text}): {_MOVE_AWAY}", "JOURNAL_UNREADABLE")

    def _require_run(self, db: sqlite3.Connection, run_id: str) -> RunStatus:
        row = db.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise self._error(f"has no run {run_id}: `dsh-jupyter approvals list` shows the "
                              "runs waiting", "JOURNAL_UNKNOWN_RUN")
        return cast(RunStatus, row[0])

    def _require_call(self, db: sqlite3.Connection, run_id: str, position: int) -> CallState:
        row = db.execute("SELECT state FROM calls WHERE run_id = ? AND position = ?",
                         (run_id, position)).fetchone()
        if row is None:
            raise self._error(f"has no call {position} in run {run_id}", "JOURNAL_UNKNOWN_RUN")
        return cast(CallState, row[0])

    def _move_call(self, db: sqlite3.Connection, run_id: str, position: int, state: CallState,
                   from_states: tuple[CallState, ...], columns: str,
                   values: tuple[object, ...]) -> None:
        self._require_run(db, run_id)
        now = self._require_call(db, run_id, position)
        if now not in from_states:
            # Starting a started call again is the double call the journal exists to stop.
            raise self._error(f"has call {position} of run {run_id} {now} already, it cannot "
                              f"become {state}", "JOURNAL_CONFLICT")
        db.execute(f"UPDATE calls SET state = ?, {columns} WHERE run_id = ? AND position = ?",
                   (state, *values, run_id, position))
        self._touch(db, run_id)

    @staticmethod
    def _touch(db: sqlite3.Connection, run_id: str, status: RunStatus | None = None) -> None:
        if status is None:
            db.execute("UPDATE runs SET updated = ? WHERE run_id = ?", (time.time(), run_id))
        else:
            db.execute("UPDATE runs SET status = ?, updated = ? WHERE run_id = ?",
                       (status, time.time(), run_id))

    def _load(self, db: sqlite3.Connection, run_id: str) -> JournaledRun | None:
        row = db.execute("SELECT run_id, program, tools_fingerprint, call_id, scope, host,"
                         " created, status, updated, result, scope_name FROM runs"
                         " WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        run = RunRecord(run_id=row[0], program=row[1], tools_fingerprint=row[2],
                        call_id=row[3], scope=row[4], scope_name=row[10], host=row[5],
                        created=row[6])
        calls = tuple(
            CallRecord(position=c[0], tool=c[1], arguments=_object(c[2]), state=c[3],
                       outcome=None if c[4] is None else CallOutcome.from_json(json.loads(c[4])),
                       started=c[5], ended=c[6])
            for c in db.execute("SELECT position, tool, arguments, state, outcome, started,"
                                " ended FROM calls WHERE run_id = ? ORDER BY position",
                                (run_id,)))
        approvals = tuple(
            ApprovalRecord(position=a[0], reason=a[1], asked=a[2],
                           decision=None if a[3] is None else _approval(json.loads(a[3])),
                           answered=a[4])
            for a in db.execute("SELECT position, reason, asked, decision, answered FROM"
                                " approvals WHERE run_id = ? ORDER BY position", (run_id,)))
        return JournaledRun(run=run, status=row[7], updated=row[8], calls=calls,
                            approvals=approvals,
                            result=None if row[9] is None else json.loads(row[9]))


def _locked(error: sqlite3.Error) -> bool:
    text = str(error)
    return "locked" in text or "busy" in text


def _roll_back(db: sqlite3.Connection) -> None:
    # SQLite may have rolled back already (an I/O error, a full disk): then there is
    # nothing to undo, and trying would hide the error that got us here.
    if db.in_transaction:
        db.execute("ROLLBACK")


def _dump(value: JsonValue, *, sort_keys: bool = True) -> str:
    """Compact JSON; keys sorted (arguments are compared as text) unless ``sort_keys`` is
    false: a call's outcome and a run's result keep their order, so a replayed call hands
    the program the dict it had, and a client given a result again (an MCP retry) reads
    the same text as the first time."""
    return json.dumps(value, sort_keys=sort_keys, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)


def _object(text: str) -> JsonObject:
    value = json.loads(text)
    assert isinstance(value, dict)
    return value


def _approval_json(approval: Approval) -> JsonObject:
    data: JsonObject = {"approved": approval.approved, "answered_by": approval.answered_by,
                        "note": approval.note}
    if approval.for_run:  # written only when set: a journal from before reads the same
        data["for_run"] = True
    return data


def _approval(data: JsonValue) -> Approval:
    assert isinstance(data, dict)
    note = data.get("note")
    return Approval(approved=bool(data["approved"]), answered_by=str(data["answered_by"]),
                    note=note if isinstance(note, str) else None,
                    for_run=data.get("for_run") is True)
