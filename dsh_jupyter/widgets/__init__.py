"""Notebook cards for tool calls, run_code programs and approvals.

Importing this package imports no ipywidgets: widgets are built when a card is
displayed (or its ``widget`` attribute is read), so nothing registers comm
targets at import. See ``docs/widgets.md``.
"""

from .approval_card import ApprovalCard
from .approvals import ApprovalHost, ApprovalPolicy, NotebookApprovals
from .cards import Card, ToolCard
from .displays import display_block
from .pending import PendingApprovals, show_pending
from .run_code import RunCodeCard, SubCallCard
from .session import LiveView, SessionView, replay, tool_card

__all__ = [
    "ApprovalCard",
    "ApprovalHost",
    "ApprovalPolicy",
    "Card",
    "LiveView",
    "NotebookApprovals",
    "PendingApprovals",
    "RunCodeCard",
    "SessionView",
    "SubCallCard",
    "ToolCard",
    "display_block",
    "replay",
    "show_pending",
    "tool_card",
]
