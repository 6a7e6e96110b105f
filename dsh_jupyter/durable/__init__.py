"""Durable Code Mode: runs journaled so an approval survives a restart
(docs/approvals-durable.md).

This package holds the journal: its records and the store's contract
(:mod:`.store`), and the default store, one SQLite file (:mod:`.sqlite`). Nothing
here runs at import; a store touches its file only inside ``async with``.
"""

from .sqlite import SqliteJournalStore
from .store import (
    ApprovalRecord,
    CallOutcome,
    CallRecord,
    CallState,
    JournaledRun,
    JournalStore,
    PendingApproval,
    RunRecord,
    RunStatus,
)

__all__ = [
    "ApprovalRecord",
    "CallOutcome",
    "CallRecord",
    "CallState",
    "JournalStore",
    "JournaledRun",
    "PendingApproval",
    "RunRecord",
    "RunStatus",
    "SqliteJournalStore",
]
