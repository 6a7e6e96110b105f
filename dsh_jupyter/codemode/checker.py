"""The registry's program checker: ``ty server`` on a worker thread, and the SDK of each
scope it checks against (see :mod:`.check` for what a check reports, and
:mod:`.ty_server` for the server).

One :class:`ProgramChecker` per registry (:class:`~dsh_jupyter.codemode.mode.CodeMode`
makes it). The server starts with the first check (its start-up, tens of milliseconds,
is paid once) and stops with ``await registry.aclose()``; a check afterwards starts it
again. All work with the server runs on one worker thread, one check at a time, so the
event loop never waits on it; a server that fails is stopped, the program runs unchecked
with a :class:`ProgramCheckWarning`, and the next check starts a new server.
"""

from __future__ import annotations

import ast
import asyncio
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import DshWarning, RegistrationError
from ..registry.scope import RESERVED_NAME
from .check import (
    ProgramProblem,
    check_document,
    check_sdk,
    program_problems,
    sdk_module_name,
    syntax_problem,
)
from .sdk_python import SdkTool
from .ty_server import TY_INSTALL, Diagnostic, TyServer, TyServerError, find_ty

if TYPE_CHECKING:
    from ..registry.execution import ScopeView
    from ._view import CodeModeHost


CHECK_TIMEOUT_SECONDS = 10.0
"""How long a check waits for the server before it gives up on it (and the program runs
unchecked)."""


class ProgramCheckWarning(DshWarning):
    """A program could not be checked (the checker failed); it ran unchecked."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgramCheck:
    """What checking one program found. ``problems`` are empty for a program that passed
    (or, with ``unchecked`` saying why, one the checker could not check); ``seconds`` is
    the whole check, as the run waited for it."""

    problems: tuple[ProgramProblem, ...]
    seconds: float
    unchecked: str | None = None


def require_ty() -> str:
    """The ``ty`` executable, or a :class:`RegistrationError` saying how to install it."""
    executable = find_ty()
    if executable is None:
        raise RegistrationError(f"check_programs needs the ty type checker, which is not "
                                f"installed: {TY_INSTALL} (or put `ty` on PATH), or set "
                                f"check_programs='off'")
    return executable


class ProgramChecker:
    """Checks programs against the SDK their scope sees (see the module docstring)."""

    __slots__ = ("_executor", "_registry", "_sdks", "_server", "_version")

    def __init__(self, registry: CodeModeHost) -> None:
        self._registry = registry
        self._server: TyServer | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._sdks: dict[tuple[ScopeView | None, bool], tuple[str, str]] = {}
        self._version = -1

    @property
    def server_starts(self) -> int:
        """How many checker processes the current server object has started."""
        return self._server.starts if self._server is not None else 0

    async def check(self, program: str, scope: ScopeView | None, *, discovery: bool,
                    stateful: bool) -> ProgramCheck:
        """Check ``program`` against the SDK ``scope`` sees (discovery's, with ``search`` and
        ``describe``, when ``discovery``). On a ``stateful`` runtime a name the program
        does not define is taken to be an earlier run's."""
        start = time.perf_counter()
        try:
            tree = ast.parse(program)
        except SyntaxError as error:
            return ProgramCheck(problems=(syntax_problem(error),),
                                seconds=time.perf_counter() - start)
        if self._registry._version != self._version:
            self._sdks.clear()
            self._version = self._registry._version
        key = (scope, discovery)
        known = self._sdks.get(key)
        tools = None if known is not None else [
            SdkTool(name=d.name, description=d.description, parameters=d.parameters,
                    output=d.output.schema)
            for name, d in sorted(self._registry.visible(scope).items())
            if name != RESERVED_NAME]
        if self._server is None:
            self._server = TyServer(require_ty(), timeout=CHECK_TIMEOUT_SECONDS)
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="dsh-check")
        server, executor = self._server, self._executor
        assert executor is not None
        try:
            sdk, diagnostics = await asyncio.get_running_loop().run_in_executor(
                executor, _diagnostics, server, known, tools, discovery, program)
        except TyServerError as error:
            reason = f"the type checker failed ({error}); the program ran unchecked"
            warnings.warn(ProgramCheckWarning(reason), stacklevel=2)
            return ProgramCheck(problems=(), seconds=time.perf_counter() - start,
                                unchecked=reason)
        self._sdks[key] = sdk
        problems = program_problems(program, tree, diagnostics, stateful=stateful)
        return ProgramCheck(problems=problems, seconds=time.perf_counter() - start)

    async def aclose(self) -> None:
        """Stop the server (after the checks already queued); a later check starts one."""
        server, executor = self._server, self._executor
        self._server = self._executor = None
        if server is None or executor is None:
            return
        await asyncio.get_running_loop().run_in_executor(executor, server.close)
        executor.shutdown(wait=False)


def _diagnostics(server: TyServer, sdk: tuple[str, str] | None, tools: list[SdkTool] | None,
                 discovery: bool, program: str) -> tuple[tuple[str, str], list[Diagnostic]]:
    """On the worker thread: the SDK (rendered unless given) and the program's diagnostics."""
    if sdk is None:
        assert tools is not None
        text = check_sdk(tools, discovery=discovery)
        sdk = (sdk_module_name(text), text)
    name, text = sdk
    return sdk, server.diagnostics({name: text}, check_document(program, name))
