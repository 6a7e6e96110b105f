"""``ToolRegistry``: the registry core with Code Mode plugged in, as users make it.

:class:`~dsh_jupyter.registry.core.RegistryCore` holds tools, scopes, policies, listeners
and the pipeline; this adds Code Mode's settings (the constructor arguments below) and
plugs :class:`~dsh_jupyter.codemode.mode.CodeMode` into it. ``dsh_jupyter.ToolRegistry``
and ``dsh_jupyter.registry.ToolRegistry`` are this class.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..durable.sqlite import SqliteJournalStore
from ..errors import RegistrationError
from ..registry.core import RegistryCore
from ..registry.scope import Disposer
from ..runtime import as_code_runtime
from .check import CHECK_PROGRAMS, CheckPrograms
from .checker import require_ty
from .mode import CodeMode
from .model_text import DEFAULT_RUN_CODE_MAX_CHARS, check_max_chars
from .resume import resume_run

if TYPE_CHECKING:
    from types import TracebackType

    from ..abort import AbortSignal
    from ..durable.store import JournalStore
    from ..registry.execution import ScopeView
    from ..registry.policy import Approval, ApprovalService
    from ..registry.results import ToolResult
    from ..registry.scope import PresentationMode
    from ..runtime import CodeRuntime


class ToolRegistry(RegistryCore):
    """Tools, agent scopes, policies, and the execution pipeline.

    ``mode`` says how tools are presented (``native``, ``code``, ``both``, ``discovery``);
    the code modes run programs on ``code_runtime``, overlapping at most
    ``max_parallel_sub_calls`` concurrency-safe sub-calls. ``run_code_images=True`` makes
    a ``run_code`` result also carry the program's PNG and JPEG displays (its matplotlib
    figures, say) as image content for the model, at most four (see
    ``docs/code-mode.md``); off by default. ``run_code_max_chars`` caps the text of a
    ``run_code`` result the model reads (50,000 characters by default; ``None``: no cap):
    longer output keeps its head and tail around a note saying what was cut, while the
    value, the card and the session log keep all of it (see ``docs/code-mode.md``).
    ``check_programs`` type-checks each program
    against the SDK before any kernel is used: ``"error"`` fails a program with type
    errors as ``type-check`` (nothing runs), ``"warn"`` runs it and appends the problems
    to its result, ``"off"`` (the default) does neither; it needs the ``ty`` checker
    (``pip install 'dsh-jupyter[check]'``), whose server :meth:`aclose` stops.
    ``journal`` (a path, or a :class:`~dsh_jupyter.durable.JournalStore`) journals every
    ``run_code`` run, so one that waits for an approval survives a restart of this process:
    :meth:`resume` takes it up again (see ``docs/approvals-durable.md``); off by default.

    ::

        registry = ToolRegistry()

        @registry.tool
        async def add(a: int, b: int) -> int:
            return a + b

        result = await registry.execute(ToolCall(call_id="c1", name="add",
                                                 arguments={"a": 1, "b": 2}))
        assert result.value == 3
    """

    def __init__(
        self,
        *,
        mode: PresentationMode = "native",
        max_parallel_sub_calls: int = 10,
        code_runtime: CodeRuntime | None = None,
        approval: ApprovalService | None = None,
        run_code_images: bool = False,
        run_code_max_chars: int | None = DEFAULT_RUN_CODE_MAX_CHARS,
        check_programs: CheckPrograms = "off",
        journal: JournalStore | str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(mode=mode, approval=approval)
        if (isinstance(max_parallel_sub_calls, bool) or not isinstance(max_parallel_sub_calls, int)
                or max_parallel_sub_calls < 1):
            raise RegistrationError(
                f"max_parallel_sub_calls must be a positive integer (1 runs sub-calls one at a "
                f"time), got {max_parallel_sub_calls!r}")
        if not isinstance(run_code_images, bool):
            raise RegistrationError(f"run_code_images must be True or False, got "
                                    f"{run_code_images!r}")
        self.run_code_images = run_code_images
        self._run_code_max_chars = check_max_chars(run_code_max_chars)
        self.max_parallel_sub_calls = max_parallel_sub_calls
        self._journal: JournalStore | None = None
        self._own_journal = False
        self._code_runtime: CodeRuntime | None = None
        self.code_runtime = code_runtime
        self.journal = journal
        self._check_programs: CheckPrograms = "off"
        self.check_programs = check_programs
        code_mode = CodeMode(self)
        self._code_mode = code_mode
        self._checker = code_mode.checker
        self._resumptions = code_mode.resumptions

    @property
    def journal(self) -> JournalStore | None:
        """Where ``run_code`` runs are journaled (``ToolRegistry(journal=...)``), else
        ``None``. ``await registry.journal.list_pending()`` lists the runs waiting for an
        approval."""
        return self._journal

    @journal.setter
    def journal(self, journal: JournalStore | str | os.PathLike[str] | None) -> None:
        runtime = self._code_runtime
        if journal is not None and runtime is not None and runtime.info.stateful:
            raise RegistrationError(_STATEFUL_JOURNAL)
        self._journal, self._own_journal = _journal_store(journal)

    def attach_journal(self, store: JournalStore) -> Disposer:
        """Journal ``run_code`` runs in ``store`` from now on, as ``journal=`` would have;
        the disposer detaches it. For a registry made elsewhere (``serve-mcp --journal``
        serves a ``--tools`` registry). The registry does not close ``store``: its opener
        does. Refused when the registry has a journal already or a stateful runtime."""
        if self._journal is not None:
            raise RegistrationError("this registry has a journal already: use it, or make "
                                    "the registry without journal=")
        if isinstance(store, str | os.PathLike):
            raise RegistrationError("attach_journal takes a store, SqliteJournalStore(path) "
                                    "say (its opener closes it); a path goes to "
                                    "ToolRegistry(journal=...)")
        self.journal = store

        def detach() -> None:
            if self._journal is store:
                self._journal = None
        return Disposer(detach, "attach a journal")

    async def resume(self, run_id: str, decision: Approval | None = None, *,
                     agent: ScopeView | None = None,
                     signal: AbortSignal | None = None) -> ToolResult:
        """Take up the journaled run ``run_id``, paused on an approval whose host stopped,
        with ``decision`` (``None``: the one recorded already, by ``dsh-jupyter approvals
        approve`` say); returns its ``run_code`` result. Its program runs again in a fresh
        kernel; the calls it had made are answered from the journal (their tools are not
        called again), the one that paused gets ``decision``, and the rest run live. Give
        the registry the same tools (a run whose tools changed fails as
        ``journal-tools-changed``) and, for a run made in a scope, that scope as ``agent``.
        Raises :class:`~dsh_jupyter.errors.JournalError` when the run cannot be resumed."""
        return await resume_run(self, self._resumptions, run_id, decision,
                                agent=agent, signal=signal)

    @property
    def check_programs(self) -> CheckPrograms:
        """Whether ``run_code`` type-checks a program before it runs: ``"off"``,
        ``"warn"`` or ``"error"`` (see the class docstring and ``docs/code-mode.md``)."""
        return self._check_programs

    @check_programs.setter
    def check_programs(self, value: CheckPrograms) -> None:
        if value not in CHECK_PROGRAMS:
            raise RegistrationError(f"check_programs must be one of "
                                    f"{', '.join(map(repr, CHECK_PROGRAMS))}, got {value!r}")
        if value != "off":
            require_ty()
        self._check_programs = value

    async def aclose(self) -> None:
        """Stop what the registry started for itself: the type checker's server of
        ``check_programs`` (a later checked program starts it again). A registry that
        started none has nothing to stop."""
        await self._checker.aclose()
        if self._own_journal and isinstance(self._journal, SqliteJournalStore):
            await self._journal.aclose()

    async def __aenter__(self) -> ToolRegistry:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    @property
    def run_code_max_chars(self) -> int | None:
        """The most characters of a ``run_code`` result's text the model reads (its logs
        and rendered result together; a failure's message and captured output likewise);
        ``None``: no cap. Set it any time: the next result is cut to the new cap. Not
        ``KernelRuntimeConfig.max_output_bytes``, the transport cap over which a run fails:
        this one only shortens what the model reads."""
        return self._run_code_max_chars

    @run_code_max_chars.setter
    def run_code_max_chars(self, max_chars: int | None) -> None:
        self._run_code_max_chars = check_max_chars(max_chars)

    @property
    def code_runtime(self) -> CodeRuntime | None:
        """Runs ``run_code`` programs (``None`` until one is attached). A runtime written
        before :class:`~dsh_jupyter.runtime.RunRequest` is adapted, with a deprecation
        warning (:func:`~dsh_jupyter.runtime.as_code_runtime`)."""
        return self._code_runtime

    @code_runtime.setter
    def code_runtime(self, runtime: CodeRuntime | None) -> None:
        adapted = None if runtime is None else as_code_runtime(runtime)
        if adapted is not None and adapted.info.stateful and self._journal is not None:
            raise RegistrationError(_STATEFUL_JOURNAL)
        self._code_runtime = adapted


_STATEFUL_JOURNAL = (
    "a journaled registry runs programs on fresh kernels only: a stateful runtime's kept "
    "state is not in the journal, so a resume could not replay it (use KernelRuntime() "
    "without stateful=True, or drop journal=)")


def _journal_store(journal: JournalStore | str | os.PathLike[str] | None
                   ) -> tuple[JournalStore | None, bool]:
    """The store ``journal`` names, and whether the registry made it (then it closes it)."""
    if journal is None:
        return None, False
    if isinstance(journal, str | os.PathLike):
        return SqliteJournalStore(journal), True
    for method in ("record_run", "record_call", "mark_started", "record_call_result",
                   "mark_pending", "resolve", "claim", "finish_run", "load_run", "list_pending"):
        if not callable(getattr(journal, method, None)):
            raise RegistrationError(f"journal must be a path or a JournalStore (a "
                                    f"SqliteJournalStore, say); {type(journal).__name__} has no "
                                    f"{method}()")
    return journal, False
