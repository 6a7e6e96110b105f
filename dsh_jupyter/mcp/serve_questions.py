"""The approval question a served registry asks an MCP client, as MCP shapes: its text
(:func:`approval_question`), its elicitation form (:data:`APPROVAL_SCHEMA`,
:func:`approval_request`), and the :class:`~dsh_jupyter.registry.policy.Approval` an
answer means (:func:`approval_of`). Shared by the live rounds
(:mod:`~dsh_jupyter.mcp.serve_calls`) and the rounds the journal answers after a restart
(:mod:`~dsh_jupyter.mcp.serve_journal`), so both ask and read alike.

Imports the MCP SDK: :mod:`~dsh_jupyter.mcp.serve` imports this module when serving starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult

from ..registry.policy import Approval

__all__ = ["APPROVAL_SCHEMA", "approval_of", "approval_question", "approval_request"]

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve",
                               "description": "Let this tool call run", "default": True}},
}
"""The form an approval elicitation asks for; ``accept`` approves unless ``approve`` is false."""


def approval_question(name: str, arguments: Mapping[str, Any], reason: str | None) -> str:
    """``Allow the tool call name({...})?`` (arguments cut at 500 characters), then the
    policy's reason on a line of its own."""
    shown = json.dumps(arguments, ensure_ascii=False)
    if len(shown) > 500:
        shown = shown[:500] + "…"
    why = f"\n{reason}" if reason else ""
    return f"Allow the tool call {name}({shown})?{why}"


def approval_request(message: str) -> ElicitRequest:
    """The question as a 2026-era input request (an elicitation form)."""
    return ElicitRequest(params=ElicitRequestFormParams(message=message,
                                                        requested_schema=APPROVAL_SCHEMA))


def approval_of(answer: ElicitResult) -> Approval:
    """What the client's answer decides: accept approves (unless ``approve`` is false);
    decline and cancel reject. ``answered_by`` is ``user``."""
    if answer.action == "accept":
        if (answer.content or {}).get("approve", True) is False:
            return Approval(approved=False, answered_by="user",
                            note="not approved in the MCP client")
        return Approval(approved=True, answered_by="user")
    if answer.action == "decline":
        return Approval(approved=False, answered_by="user", note="declined in the MCP client")
    return Approval(approved=False, answered_by="user", note="dismissed in the MCP client")
