"""What a served registry with a journal adds to the 2026-era approval round
(``serve-mcp --journal PATH``; docs/approvals-durable.md, "The surfaces").

A ``run_code`` run of a journaled registry that waits for an approval is journaled
(:mod:`dsh_jupyter.codemode.journal`). The server hands the client a ``requestState``
naming that run, signed so that it still holds after a restart and cannot be made for
another run:

- :func:`sign_state` makes ``<run_id>.<mac>``, the MAC an HMAC-SHA256 of the run id under
  the journal's secret (:class:`~dsh_jupyter.durable.JournalSecret`), base64url without
  padding; :func:`state_run` checks one and returns its run id, ``None`` for anything
  else (a state of no journal run, a bad MAC, a MAC of another journal);
- :func:`approval_key` names the question of the approval at a position, the same
  before and after a restart, so a retry's answer is matched to the approval the run
  waits for now, not to an older one;
- :class:`ServedJournal` reads the journal as the server needs it: the approval a served
  call waits for, a run by id, and a finished run's result as the call's result
  (:func:`recorded_result`), so a retry after the answer got lost runs nothing again;
- :func:`journal_decision` reads a retry's answer to the approval a journaled run waits
  for, :func:`question_again` asks it again from the journal, :func:`not_resumable` says
  why a run can be neither.

:mod:`~dsh_jupyter.mcp.serve_calls` does the rounds: it signs the state of a journaled
run it parks, and takes up a retry whose state names a run it no longer holds (the server
restarted, or the run's parking expired) from the journal.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, ElicitResult, InputRequiredResult

from ..codemode.registry import ToolRegistry
from ..codemode.run_code import model_failure, run_code_limit
from ..durable.host import current_host, host_state
from ..durable.store import ApprovalRecord, JournaledRun, JournalSecret, JournalStore
from ..errors import CodeRunFailedError
from ..registry.policy import Approval
from ..registry.results import ToolResult, ToolSuccess, failure, text_content
from ..registry.scope import RESERVED_NAME, AgentScope
from .serve_questions import approval_of, approval_question, approval_request

__all__ = ["ServedJournal", "approval_key", "journal_decision", "not_resumable",
           "question_again", "recorded_result", "served_secret", "sign_state", "state_run"]

_log = logging.getLogger(__name__)

_CONTEXT = b"dsh-jupyter mcp requestState v1\x00"
"""Prefixed to the run id before it is signed: a MAC made for anything else with the same
secret is never a valid state."""


def sign_state(secret: bytes, run_id: str) -> str:
    """The ``requestState`` of journal run ``run_id``: ``<run_id>.<mac>``."""
    return f"{run_id}.{_mac(secret, run_id)}"


def state_run(secret: bytes, state: str) -> str | None:
    """The run id ``state`` names when its MAC is right under ``secret``, else ``None``."""
    run_id, dot, mac = state.rpartition(".")
    if not dot or not run_id or not mac:
        return None
    expected = _mac(secret, run_id).encode("ascii")
    if not hmac.compare_digest(expected, mac.encode("utf-8", "replace")):
        return None
    return run_id


def _mac(secret: bytes, run_id: str) -> str:
    digest = hmac.new(secret, _CONTEXT + run_id.encode("utf-8", "surrogatepass"),
                      hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def approval_key(position: int) -> str:
    """The ``inputRequests`` key of the question of the approval at ``position``."""
    return f"approve-call-{position}"


async def served_secret(store: JournalStore) -> bytes:
    """The secret states are signed with: the journal's own
    (:class:`~dsh_jupyter.durable.JournalSecret`), or, for a store without one, a secret
    of this process (its states are then not recognised after a restart; the runs stay
    in the journal for ``registry.resume``)."""
    if isinstance(store, JournalSecret):
        return await store.secret()
    _log.warning("the journal %s keeps no secret (no secret() method): requestStates hold "
                 "until this server stops, the runs they name stay in the journal",
                 type(store).__name__)
    return secrets.token_bytes(32)


class ServedJournal:
    """A served registry's journal and the secret its states are signed with."""

    def __init__(self, store: JournalStore, secret: bytes) -> None:
        self.store = store
        self._secret = secret

    def state(self, run_id: str) -> str:
        return sign_state(self._secret, run_id)

    def run_id(self, state: str) -> str | None:
        return state_run(self._secret, state)

    async def waiting(self, call_id: str, run_id: str | None) -> tuple[str, int] | None:
        """The run and the position of the approval that the served call ``call_id`` waits
        for, recorded by this process (``run_id`` when the run is known already, as for
        a resumed one); ``None`` when the call is not a journaled run (a native tool, or
        ``run_code``'s own approval, asked before its run starts). The journal records
        the question before the approval service is asked, so it is there to be found."""
        host = current_host()
        for pending in await self.store.list_pending():
            if pending.host != host or (run_id is not None and pending.run_id != run_id):
                continue
            if run_id is None:
                run = await self.store.load_run(pending.run_id)
                if run is None or run.run.call_id != call_id:
                    continue
            return pending.run_id, pending.position
        return None

    async def load(self, run_id: str) -> JournaledRun | None:
        return await self.store.load_run(run_id)


def recorded_result(registry: ToolRegistry, scope: AgentScope | None,
                    journaled: JournaledRun) -> ToolResult:
    """A finished run's ``run_code`` result, rebuilt from what its host recorded: the
    value rendered as run_code renders it, or the failure with its message (cut to the
    model cap as a live one is). Nothing runs."""
    recorded = journaled.result
    if journaled.status == "done":
        definition = registry.get(RESERVED_NAME, scope)
        if definition is None:  # served in another mode now: the value as JSON
            return ToolSuccess(value=recorded, content=text_content(json.dumps(recorded)))
        rendered = definition.output.render({}, recorded)
        content = text_content(rendered) if isinstance(rendered, str) else tuple(rendered)
        meta = (definition.output.presentation_meta({}, recorded)
                if definition.output.presentation_meta is not None else None)
        return ToolSuccess(value=recorded, content=content, meta=meta)
    message = recorded.get("message") if isinstance(recorded, dict) else None
    if not isinstance(message, str):
        message = f"run {journaled.run.run_id} failed"
    result: ToolResult = failure(message, CodeRunFailedError.default_code)
    cut = model_failure(result, run_code_limit(registry))
    return result if cut is None else result.with_content(cut)


def journal_decision(pending: ApprovalRecord,
                     responses: Mapping[str, Any]) -> Approval | None:
    """The retry's answer to the journaled approval ``pending`` (under
    :func:`approval_key`), ``None`` when it has none."""
    key = approval_key(pending.position)
    response = responses.get(key)
    if response is None:
        return None
    if not isinstance(response, ElicitResult):
        raise MCPError(INVALID_PARAMS, f"{key}: expected an elicitation result")
    return approval_of(response)


def question_again(journaled: JournaledRun, pending: ApprovalRecord,
                   state: str) -> InputRequiredResult:
    """The question of ``pending``, rebuilt from the journal, under the same ``state``."""
    call = next((c for c in journaled.calls if c.position == pending.position), None)
    message = (approval_question(call.tool, call.arguments, pending.reason)
               if call is not None
               else f"Allow call {pending.position} of run {journaled.run.run_id}?")
    return InputRequiredResult(
        input_requests={approval_key(pending.position): approval_request(message)},
        request_state=state)


def not_resumable(journaled: JournaledRun) -> str:
    """Why a run that is neither ended nor waiting for an answer cannot be taken up."""
    run_id, host = journaled.run.run_id, journaled.run.host
    if host != current_host() and host_state(host) == "alive":
        return f"run {run_id} is running in another server process ({host}): retry later"
    return (f"run {run_id} stopped while it ran, with no approval waiting: it cannot be "
            "resumed (its calls' bodies may have run)")
