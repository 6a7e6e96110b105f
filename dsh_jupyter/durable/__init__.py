"""Durable Code Mode: runs journaled so an approval survives a restart
(docs/approvals-durable.md).

This package holds the journal: its records and the store's contract
(:mod:`.store`), the default store, one SQLite file (:mod:`.sqlite`), and what a
resumed run does with each call it makes again (:mod:`.replay`). Nothing
here runs at import; a store touches its file only inside ``async with``.
"""

from .replay import Answered, Decided, Live, Match, Replay, Stop, StopKind, tools_fingerprint
from .sqlite import SqliteJournalStore
from .store import (
    ApprovalRecord,
    CallOutcome,
    CallRecord,
    CallState,
    JournaledRun,
    JournalSecret,
    JournalStore,
    PendingApproval,
    RunRecord,
    RunStatus,
)

__all__ = [
    "Answered",
    "ApprovalRecord",
    "CallOutcome",
    "CallRecord",
    "CallState",
    "Decided",
    "JournalSecret",
    "JournalStore",
    "JournaledRun",
    "Live",
    "Match",
    "PendingApproval",
    "Replay",
    "RunRecord",
    "RunStatus",
    "SqliteJournalStore",
    "Stop",
    "StopKind",
    "tools_fingerprint",
]
