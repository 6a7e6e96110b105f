"""The registry an exported notebook re-runs its programs against.

An exported notebook's setup cell opens ``MODULE:ATTR`` the way ``dsh-jupyter run
--tools`` does (a registry or a scope, a function returning one, or an async context
manager yielding one), then makes it able to run programs: a registry in ``native``
mode gets the session's mode, one without a code runtime gets a
:class:`~dsh_jupyter.kernel.KernelRuntime` (stateful when the session's was), and the
scopes the programs ran in are made where missing, and approvals are answered as
``approvals`` says (:mod:`.approvals`); all undone with the block::

    resources = AsyncExitStack()
    registry = await resources.enter_async_context(
        open_session_registry("dsh_jupyter.demo.tools:sample_registry"))
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Literal

from ..errors import RegistrationError
from ..json_value import JsonValue
from ..loading import ToolsSpecError, open_registry
from ..registry import ToolRegistry
from ..registry.policy import ApprovalService
from .approvals import (
    ApprovalsMode,
    DenyApprovals,
    RecordedApproval,
    ReplayedApprovals,
    check_mode,
    nobody_to_ask,
)

__all__ = ["open_session_registry"]


@asynccontextmanager
async def open_session_registry(
        spec: str, *, mode: Literal["code", "both", "discovery"] = "code",
        scopes: Iterable[str] = (), stateful: bool = False, approvals: ApprovalsMode = "ask",
        recorded_approvals: Iterable[RecordedApproval | Mapping[str, JsonValue]] = (),
) -> AsyncIterator[ToolRegistry]:
    """``MODULE:ATTR`` as a registry that runs ``%%run_code`` cells, for the block.

    ``scopes``: the scopes the session's programs ran in (``%%run_code --scope NAME``);
    each one the registry lacks is made (a plain scope: it sees what the registry offers),
    and disposed with the block. ``stateful``: the runtime made for a registry without one
    keeps a kernel per conversation, as the recorded session's did (a registry that has its
    own runtime keeps it). ``approvals``: who answers the approvals the programs ask for
    (:mod:`.approvals`): ``"ask"`` the user, with the approval card in a notebook (the
    registry's own service, if it has one) and a denial saying how to opt in where nobody
    can click; ``"replay"`` the ``recorded_approvals`` (the session's answers, as the
    export writes them); ``"deny"`` nobody. A bad spec raises
    :class:`~dsh_jupyter.errors.RegistrationError` saying what was wrong (the CLI's own
    message, as one line)."""
    approvals = check_mode(approvals)
    replayed = ReplayedApprovals(recorded_approvals)  # checked before anything is opened

    async with AsyncExitStack() as stack:
        try:
            registry = await stack.enter_async_context(open_registry(spec))
        except ToolsSpecError as exc:
            raise RegistrationError(f"cannot open the session's tools: {exc}") from None
        if registry.mode == "native":
            registry.mode = mode
        if registry.code_runtime is None:
            from ..kernel import KernelRuntime, KernelRuntimeConfig, StatefulConfig

            config = KernelRuntimeConfig(stateful=StatefulConfig() if stateful else None)
            registry.code_runtime = await stack.enter_async_context(KernelRuntime(config))
            stack.callback(setattr, registry, "code_runtime", None)
        for name in scopes:
            if registry.find_scope(name) is None:
                stack.callback(registry.scope(name).dispose)
        service = _approval_service(registry, approvals, replayed)
        if service is not registry.approval:
            stack.callback(setattr, registry, "approval", registry.approval)
            registry.approval = service
        yield registry


def _approval_service(registry: ToolRegistry, approvals: ApprovalsMode,
                      replayed: ReplayedApprovals) -> ApprovalService | None:
    if approvals == "replay":
        return replayed
    if approvals == "deny":
        return DenyApprovals()
    if registry.approval is not None:
        return registry.approval  # it asks its own way
    from ..widgets import NotebookApprovals

    return NotebookApprovals(policy=nobody_to_ask)
