"""The registry an exported notebook re-runs its programs against.

An exported notebook's setup cell opens ``MODULE:ATTR`` the way ``dsh-jupyter run
--tools`` does (a registry or a scope, a function returning one, or an async context
manager yielding one), then makes it able to run programs: a registry in ``native``
mode gets the session's mode, and one without a code runtime gets a fresh
:class:`~dsh_jupyter.kernel.KernelRuntime`, closed with the block::

    resources = AsyncExitStack()
    registry = await resources.enter_async_context(
        open_session_registry("dsh_jupyter.demo.tools:sample_registry"))
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Literal

from ..errors import RegistrationError
from ..registry import ToolRegistry

__all__ = ["open_session_registry"]


@asynccontextmanager
async def open_session_registry(
        spec: str, *, mode: Literal["code", "both", "discovery"] = "code",
) -> AsyncIterator[ToolRegistry]:
    """``MODULE:ATTR`` as a registry that runs ``%%run_code`` cells, for the block.

    A bad spec raises :class:`~dsh_jupyter.errors.RegistrationError` saying what was
    wrong (the CLI's own message, as one line)."""
    from ..cli import open_registry

    async with AsyncExitStack() as stack:
        try:
            registry = await stack.enter_async_context(open_registry(spec))
        except SystemExit as exc:  # the CLI's resolution reports misuse by exiting
            raise RegistrationError(f"cannot open the session's tools: {exc}") from None
        if registry.mode == "native":
            registry.mode = mode
        if registry.code_runtime is None:
            from ..kernel import KernelRuntime

            registry.code_runtime = await stack.enter_async_context(KernelRuntime())
            stack.callback(setattr, registry, "code_runtime", None)
        yield registry
