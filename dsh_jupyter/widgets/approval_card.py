"""The approval card: what needs approval and why, Approve / Reject buttons while
the calling cell awaits, then who answered (the user, or which policy and why)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from ..json_value import JsonValue
from ..registry.policy import Approval
from . import _ipw
from .cards import Card
from .doc import Code, Doc, Field, Status, Text
from .text import json_text

ApprovalState = Literal["waiting", "approved", "rejected", "cancelled"]


def describe(approval: Approval) -> str:
    """``approved by user``, ``rejected by policy 'reject': no widget front end``."""
    verb = "approved" if approval.approved else "rejected"
    note = f": {approval.note}" if approval.note else ""
    return f"{verb} by {approval.answered_by}{note}"


class ApprovalCard(Card):
    """One pending ``Ask``. ``on_answer`` receives True (Approve) or False (Reject)."""

    kind = "approval"
    track_views = True

    def __init__(self, *, name: str, arguments: JsonValue, reason: str | None) -> None:
        super().__init__()
        self.name = name
        self.arguments = arguments
        self.reason = reason
        self.answer: Approval | None = None
        self.cancelled = False
        self.on_answer: Callable[[bool], None] | None = None
        self._buttons: Any = None

    @property
    def state(self) -> ApprovalState:
        if self.answer is not None:
            return "approved" if self.answer.approved else "rejected"
        return "cancelled" if self.cancelled else "waiting"

    def summary(self) -> Field:
        """One line for the card this approval belongs to."""
        if self.answer is not None:
            return Field(label="approval", value=describe(self.answer),
                         tone="ok" if self.answer.approved else "error")
        if self.cancelled:
            return Field(label="approval", value="cancelled before an answer", tone="muted")
        return Field(label="approval", value=f"waiting — {self.reason or 'approval needed'}")

    def _document(self) -> Doc:
        state: Status = self.state
        blocks: list[Text | Field | Code] = []
        if self.reason:
            blocks.append(Text(text=self.reason))
        if self.arguments not in ({}, None):
            blocks.append(Code(text=json_text(self.arguments), label="arguments",
                               collapsible=True, open=False))
        if state != "waiting":
            blocks.append(self.summary())
        return Doc(title=f"Approve {self.name}?", kind=self.kind, status=state,
                   blocks=tuple(blocks))

    def _parts(self) -> list[Any]:
        w = _ipw.ipywidgets()
        approve = w.Button(description="Approve", button_style="success", icon="check")
        reject = w.Button(description="Reject", button_style="danger", icon="times")
        approve.add_class("dsh-approve")
        reject.add_class("dsh-reject")
        approve.on_click(lambda _button: self._clicked(True))
        reject.on_click(lambda _button: self._clicked(False))
        self._buttons = w.HBox([approve, reject])
        self._buttons.layout.display = "flex" if self.state == "waiting" else "none"
        return [*super()._parts(), self._buttons]

    def _frame(self) -> Any:
        return _ipw.ipywidgets().Layout(border="1px solid #d4a72c", padding="4px 10px",
                                        margin="4px 0")

    def _clicked(self, approved: bool) -> None:
        if self.state == "waiting" and self.on_answer is not None:
            self.on_answer(approved)

    def answered(self, approval: Approval) -> None:
        self.answer = approval
        self._changed()

    def cancel(self) -> None:
        if self.answer is None:
            self.cancelled = True
            self._changed()

    def _changed(self) -> None:
        super()._changed()
        if self._buttons is not None and self.state != "waiting":
            for button in self._buttons.children:
                button.disabled = True
            self._buttons.layout.display = "none"
