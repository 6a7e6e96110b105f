"""How an exported notebook answers the approvals its programs ask for again.

A recorded session holds the user's answers, but a re-run cannot assume them: the
program, the tools or their arguments may have changed, and an approval is a decision
about one call. So ``open_session_registry(..., approvals=...)`` says who answers:

- ``"ask"`` (the default): the approval card, with its buttons, in the call's card in a
  notebook (:class:`~dsh_jupyter.widgets.NotebookApprovals`), unless the registry has an
  approval service of its own. Where nobody can click (papermill, nbval, a script) the
  call is denied at once (after ``frontend_timeout`` in a kernel), and the denial says
  how to opt in to replaying: it is one line, in the program's error and the card;
- ``"replay"``: the answers recorded in the session, for the same tool with the same
  arguments, in the order given (:class:`ReplayedApprovals`); a call the recording did
  not answer is denied. Headless, this is the opt-in: ``papermill ... -p approvals
  replay``, or export with ``dsh-jupyter export --approvals replay``;
- ``"deny"``: every approval is denied.

::

    open_session_registry("mypackage.tools:registry", approvals="replay",
                          recorded_approvals=[{"tool": "rm", "arguments": {"path": "a"},
                                               "approved": True, "answered_by": "user"}])
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ..errors import RegistrationError
from ..json_value import JsonValue
from ..registry.execution import ToolExecution
from ..registry.policy import Approval

__all__ = ["APPROVALS", "OPT_IN", "ApprovalsMode", "DenyApprovals", "RecordedApproval",
           "ReplayedApprovals", "check_mode", "nobody_to_ask"]

ApprovalsMode: TypeAlias = Literal["ask", "replay", "deny"]
APPROVALS: tuple[ApprovalsMode, ...] = ("ask", "replay", "deny")
REPLAYED_BY = "the recorded session"
"""``Approval.answered_by`` of a replayed answer."""
OPT_IN = ("nobody can answer here: to replay the answers recorded in the session, run "
          'with approvals = "replay" (papermill NOTEBOOK OUT -p approvals replay)')


def check_mode(approvals: str) -> ApprovalsMode:
    """``approvals`` when it is one of :data:`APPROVALS`, else a clear error."""
    for mode in APPROVALS:
        if approvals == mode:
            return mode
    raise RegistrationError(f"approvals must be 'ask', 'replay' or 'deny', got {approvals!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedApproval:
    """One answer from the session: a call of ``tool`` with ``arguments`` (``None`` when
    the export left values out: then any call of the tool matches, in order)."""

    tool: str
    arguments: JsonValue = None
    approved: bool
    answered_by: str = "user"
    note: str | None = None

    @classmethod
    def from_json(cls, value: Mapping[str, JsonValue]) -> RecordedApproval:
        tool, approved = value.get("tool"), value.get("approved")
        by, note = value.get("answered_by", "user"), value.get("note")
        if not isinstance(tool, str) or not isinstance(approved, bool) \
                or not isinstance(by, str) or not (note is None or isinstance(note, str)):
            raise RegistrationError("a recorded approval is {'tool': str, 'arguments': ..., "
                                    f"'approved': bool, 'answered_by': str}}, got {value!r}")
        return cls(tool=tool, arguments=value.get("arguments"), approved=approved,
                   answered_by=by, note=note)


class ReplayedApprovals:
    """An :class:`~dsh_jupyter.registry.ApprovalService` that answers each ``Ask`` with
    the first recorded answer not yet used for the same tool and the same arguments."""

    def __init__(self, recorded: Iterable[RecordedApproval | Mapping[str, JsonValue]]) -> None:
        self._left = [answer if isinstance(answer, RecordedApproval)
                      else RecordedApproval.from_json(answer) for answer in recorded]

    async def request(self, execution: ToolExecution, reason: str | None) -> Approval:
        wanted = _canonical(execution.arguments)
        for index, answer in enumerate(self._left):
            if answer.tool == execution.name and (
                    answer.arguments is None or _canonical(answer.arguments) == wanted):
                del self._left[index]
                said = f"{answer.answered_by} {'approved' if answer.approved else 'rejected'} it"
                return Approval(approved=answer.approved, answered_by=REPLAYED_BY,
                                note=f"{said}: {answer.note}" if answer.note else said)
        return Approval(approved=False, answered_by=REPLAYED_BY,
                        note=f"it has no answer for this {execution.name} call (not asked "
                             "then, or with other arguments)")


class DenyApprovals:
    """An approval service that denies every ``Ask`` (``approvals="deny"``)."""

    async def request(self, execution: ToolExecution, reason: str | None) -> Approval:
        return Approval(approved=False, answered_by="approvals='deny'",
                        note="the notebook denies every approval")


def nobody_to_ask(execution: ToolExecution, reason: str | None) -> Approval:
    """The policy of ``approvals="ask"`` where nobody can click: deny, saying how to
    opt in to replaying the recorded answers."""
    return Approval(approved=False, note=OPT_IN)


nobody_to_ask.__name__ = "approvals='ask'"  # the card and the denial name the policy so


def _canonical(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
