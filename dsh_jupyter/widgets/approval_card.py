"""The approval card: the call that needs approval (the tool, its arguments unfolded,
the reason, where the call comes from), the choices while the calling cell awaits,
then what happened, in its title.

The wording of every state (``read_csv`` stands for the tool):

=================================  ==============================================
state                              title
=================================  ==============================================
waiting                            ``Approve read_csv?``
approved by a click                ``read_csv approved by you``
approved for the rest of the run   ``read_csv approved by you (approved all
                                   read_csv calls of this run)``
rejected by a click                ``read_csv rejected by you: <reason>``
answered by a policy               ``read_csv approved by policy 'approve' (no
                                   answer within 30 s)``
never answered (call stopped)      ``read_csv not answered: the run was stopped``
=================================  ==============================================

The one-line :meth:`ApprovalCard.summary` the call's own card shows reads the same
after ``approval:``, except that a policy's reason follows a colon (``approved by
policy 'approve': non-interactive``, as in the pipeline's denial message) and a
stopped call's cause is named (``not answered: the run was stopped (run_code
settled)``). In data a click is ``Approval(answered_by="user")``; only the card says
"you".

A journaled run's question (``ToolRegistry(journal=...)``) adds ``run <run_id> ·
journaled: survives a restart`` under the reason (``journaled: survives a restart`` in
the text fallbacks, which carry no ids).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..json_value import JsonValue
from ..registry.policy import ANSWERED_BY_ABORT, Approval
from . import _ipw
from .cards import Card
from .doc import Code, Doc, Field, Status, Text, Tone
from .render import html_blocks, html_header
from .text import json_text

ApprovalState = Literal["waiting", "approved", "rejected", "cancelled"]

CLIP_CHARS = 1_000
"""A string argument longer than this is clipped in the unfolded arguments."""
BY_USER = "user"
"""``Approval.answered_by`` of a click."""
BY_ABORT = ANSWERED_BY_ABORT
REASON_PLACEHOLDER = "reason (optional; the program receives it)"


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalChoice:
    """What a click chose: approve this call (``"approve"``), approve it and every later
    call of the same tool in the same run_code run (``"approve-run"``, offered for
    sub-calls only), or reject it (``"reject"``) with an optional ``reason`` that the
    program receives in its ``ToolCallError``."""

    action: Literal["approve", "approve-run", "reject"]
    reason: str | None = None


def describe(approval: Approval) -> str:
    """``approved by user``, ``rejected by policy 'reject': no widget front end``."""
    verb = "approved" if approval.approved else "rejected"
    note = f": {approval.note}" if approval.note else ""
    return f"{verb} by {approval.answered_by}{note}"


def journaled_line(run_id: str | None) -> str:
    """What a journaled question's card says of it (the widget names the run)."""
    line = "journaled: survives a restart"
    return f"run {run_id} · {line}" if run_id is not None else line


def run_note(name: str) -> str:
    """The note of an approval that covers every ``name`` call of one run."""
    return f"approved all {name} calls of this run"


class ApprovalCard(Card):
    """One pending ``Ask``: the tool, its arguments, the reason and (when a host sets
    ``origin``) where the call comes from, e.g. ``from 'Summarize the sales data' · call
    2 of 3``. ``on_answer`` receives the :class:`ApprovalChoice` of a
    click; ``sub_call`` offers "Approve all <tool> calls in this run". ``run_id`` names
    the journaled run the question belongs to (``ToolRegistry(journal=...)``): the card
    says so, since the question outlives the kernel (:func:`~.pending.show_pending`)."""

    kind = "approval"
    track_views = True

    def __init__(self, *, name: str, arguments: JsonValue, reason: str | None,
                 sub_call: bool = False, run_id: str | None = None) -> None:
        super().__init__()
        self.name = name
        self.run_id = run_id
        self.arguments = arguments
        self.reason = reason
        self.sub_call = sub_call
        self.answer: Approval | None = None
        self.cancelled = False
        self.on_answer: Callable[[ApprovalChoice], None] | None = None
        self._origin: str | None = None
        self._controls: Any = None
        self._inputs: tuple[Any, ...] = ()
        self._reason_field: Any = None
        shown, clipped = _clip_strings(arguments, CLIP_CHARS)
        self._arguments_text = json_text(shown)
        self._all_arguments_text = json_text(arguments) if clipped else None

    @property
    def origin(self) -> str | None:
        """Where the call comes from, shown under the reason (set by the host)."""
        return self._origin

    @origin.setter
    def origin(self, value: str | None) -> None:
        self._origin = value
        self._changed()

    @property
    def state(self) -> ApprovalState:
        if self.answer is None:
            return "cancelled" if self.cancelled else "waiting"
        if self.answer.answered_by == BY_ABORT:
            return "cancelled"
        return "approved" if self.answer.approved else "rejected"

    # Wording ---------------------------------------------------------------------
    def _stopped(self) -> str:
        return f"not answered: the {'run' if self.sub_call else 'call'} was stopped"

    def _outcome(self, *, title: bool) -> str:
        """What happened, for the title or (``title=False``) the summary line."""
        answer = self.answer
        if answer is None or answer.answered_by == BY_ABORT:
            cause = "cancelled" if answer is None else answer.note
            return self._stopped() if title or not cause else f"{self._stopped()} ({cause})"
        by_user = answer.answered_by == BY_USER
        if not by_user and not title:
            return describe(answer)  # the pipeline's wording, as saved notebooks show it
        head = (f"{'approved' if answer.approved else 'rejected'} by "
                f"{'you' if by_user else answer.answered_by}")
        if not answer.note:
            return head
        # The user's reason for a rejection follows a colon; any other note is an aside.
        rejected_by_user = by_user and not answer.approved
        return f"{head}: {answer.note}" if rejected_by_user else f"{head} ({answer.note})"

    def title(self) -> str:
        if self.state == "waiting":
            return f"Approve {self.name}?"
        return f"{self.name} {self._outcome(title=True)}"

    def summary(self) -> Field:
        """One line for the card this approval belongs to."""
        state = self.state
        if state == "waiting":
            return Field(label="approval", value=f"waiting — {self.reason or 'approval needed'}")
        tone: Tone = "ok" if state == "approved" else "error" if state == "rejected" else "muted"
        return Field(label="approval", value=self._outcome(title=False), tone=tone)

    # The document ----------------------------------------------------------------
    def _document(self, *, live: bool = False) -> Doc:
        """The card; ``live`` (the widget) names the journaled run too: ids stay out of the
        text fallbacks, which must be deterministic (as trace ids do)."""
        state: Status = self.state
        blocks: list[Text | Field | Code] = []
        if self.reason:
            blocks.append(Text(text=self.reason))
        if self._origin:
            blocks.append(Text(text=self._origin, tone="muted"))
        if self.run_id is not None:
            blocks.append(Text(text=journaled_line(self.run_id if live else None),
                               tone="muted"))
        if self.arguments not in ({}, None):
            blocks.append(Code(text=self._arguments_text, label="arguments"))
        if self._all_arguments_text is not None:
            blocks.append(Code(text=self._all_arguments_text, label="all arguments",
                               collapsible=True, open=False))
        return Doc(title=self.title(), kind=self.kind, status=state, blocks=tuple(blocks))

    # The widget ------------------------------------------------------------------
    def _widget_html(self) -> str:
        doc = self._document(live=True)
        return html_header(doc, timing=True) + html_blocks(doc.blocks, timing=True)

    def _parts(self) -> list[Any]:
        w = _ipw.ipywidgets()
        approve = w.Button(description="Approve", button_style="success", icon="check")
        approve.add_class("dsh-approve")
        approve.on_click(lambda _button: self._clicked(ApprovalChoice(action="approve")))
        controls = [approve]
        if self.sub_call:
            approve_run = w.Button(description=f"Approve all {self.name} calls in this run",
                                   button_style="success", icon="check-double",
                                   layout=w.Layout(width="auto", flex="0 0 auto"))
            approve_run.add_class("dsh-approve-run")
            approve_run.on_click(
                lambda _button: self._clicked(ApprovalChoice(action="approve-run")))
            controls.append(approve_run)
        reject = w.Button(description="Reject", button_style="danger", icon="times")
        reject.add_class("dsh-reject")
        reject.on_click(lambda _button: self._clicked(
            ApprovalChoice(action="reject", reason=self._reason_field.value.strip() or None)))
        self._reason_field = w.Text(placeholder=REASON_PLACEHOLDER,
                                    layout=w.Layout(width="auto", flex="1 0 20em"))
        self._reason_field.add_class("dsh-reject-reason")
        # Reject and its reason stay together when the row wraps.
        rejecting = w.HBox([reject, self._reason_field], layout=w.Layout(flex="1 0 auto"))
        self._controls = w.HBox([*controls, rejecting], layout=w.Layout(flex_flow="row wrap"))
        self._inputs = (*controls, reject, self._reason_field)
        self._controls.add_class("dsh-approval-controls")
        self._controls.layout.display = "flex" if self.state == "waiting" else "none"
        return [*super()._parts(), self._controls]

    def _frame(self) -> Any:
        return _ipw.ipywidgets().Layout(border="1px solid #d4a72c", padding="4px 10px",
                                        margin="4px 0")

    def _clicked(self, choice: ApprovalChoice) -> None:
        if self.state == "waiting" and self.on_answer is not None:
            self.on_answer(choice)

    def answered(self, approval: Approval) -> None:
        self.answer = approval
        self._changed()

    def cancel(self) -> None:
        if self.answer is None:
            self.cancelled = True
            self._changed()

    def _changed(self) -> None:
        super()._changed()
        if self._controls is not None and self.state != "waiting":
            for control in self._inputs:
                control.disabled = True
            self._controls.layout.display = "none"


def _clip_strings(value: JsonValue, limit: int, depth: int = 0) -> tuple[JsonValue, bool]:
    """``value`` with every string longer than ``limit`` cut to ``limit`` characters plus
    ``… (N more characters)``, and whether any was. Deeper than 64 levels values stay
    as they are (the renderer still clips the text as a whole)."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value, False
        return f"{value[:limit]}… ({len(value) - limit} more characters)", True
    if depth >= 64:
        return value, False
    if isinstance(value, dict):
        items = {key: _clip_strings(item, limit, depth + 1) for key, item in value.items()}
        return ({key: item for key, (item, _) in items.items()},
                any(clipped for _, clipped in items.values()))
    if isinstance(value, list):
        pairs = [_clip_strings(item, limit, depth + 1) for item in value]
        return [item for item, _ in pairs], any(clipped for _, clipped in pairs)
    return value, False
