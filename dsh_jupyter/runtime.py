"""The code runtime seam, as data: a :class:`RunRequest` in, a :class:`CodeRunResult` out,
and a :class:`RuntimeInfo` saying what the runtime is and supports.

A runtime knows nothing about tools. A request carries a program (the body of an async
function), its :class:`Bindings` (the names the program may call, how to call one, and
how to tell them the run is over), a signal, and what else the run needs as plain
fields: the session it belongs to, each binding's argument dict, helper methods, and an
observer of its output. Inside the program each binding is reachable as
``tools.<name>(args)`` and ``tools["<name>"](args)``; a call that raises
:class:`BindingError` makes the program's call raise ``ToolCallError`` (carrying the
binding name and the message). ``run`` reports every outcome as data: it raises only
for misuse::

    result = await runtime.run(RunRequest(program, FunctionBindings({"add": add})))

The end of a run is part of the contract: when the program has ended, for any reason
(result, failure, abort, disposal), the runtime calls ``bindings.close(reason)`` once,
then waits for the calls still in flight before it returns. ``close`` must make those
calls stop (a call still queued fails, a running one sees its signal), or the run would
wait for them until they end on their own.

The request's fields:

- ``observer`` (an :class:`OutputObserver`): told each completed log line, and each rich
  display of the program (``display(obj)``, a matplotlib figure), while the program
  runs, in order. It is a view for people (live cards); the result still carries every
  log line the run kept, and its displays.
- ``helpers``: bindings offered as methods of ``tools`` with positional arguments
  (discovery's ``tools.search("words")``); a runtime that does not know them still
  offers them as plain bindings (``tools["tools.search"]({"query": "words"})``).
- ``signatures``: the argument dict each binding takes, so a program that calls one
  wrongly (``tools.add(1, 2)``) is told how to call it. A program calls such a binding
  with one dict (or with keywords, which become the dict); anything else raises
  ``TypeError`` in the program and calls nothing. A binding without a signature takes
  any one JSON value (``tools.double(21)``).
- ``session``: which conversation the run belongs to. A *stateful* runtime
  (``info.stateful``) runs the programs of one session key in one interpreter, so their
  top-level names persist; a run without a key, and every run of a stateless runtime,
  starts fresh.

Before 0.2 these were optional faces of the bindings object (:class:`SessionBindings`,
:class:`SignatureBindings`, :class:`HelperBindings`, :class:`OutputObserver`), sniffed
by every runtime; :meth:`RunRequest.from_bindings` still reads them, in one place, for
bindings written that way.
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from .abort import AbortController, AbortSignal
from .json_value import JsonValue

__all__ = ["Binding", "BindingError", "Bindings", "CodeRunFailure", "CodeRunResult", "CodeRuntime",
           "Display", "FailureKind", "FunctionBindings", "HelperBindings", "OutputObserver",
           "RunFact", "RunFile", "RunRequest", "RuntimeInfo", "RuntimeInputs",
           "SessionBindings", "SignatureBindings", "as_code_runtime", "binding_helpers",
           "binding_session", "binding_signatures", "input_names", "runtime_is_stateful"]

FailureKind = Literal[
    "exception", "timeout", "abort", "kernel-exit", "invalid-output", "output-limit",
    "call-limit", "session-limit", "memory-limit", "process-limit", "workspace-limit",
    "file-limit", "type-check", "journal-divergence", "journal-in-doubt",
    "journal-tools-changed", "journal-unavailable",
]
FAILURE_KINDS: tuple[FailureKind, ...] = (
    "exception", "timeout", "abort", "kernel-exit", "invalid-output", "output-limit",
    "call-limit", "session-limit", "memory-limit", "process-limit", "workspace-limit",
    "file-limit", "type-check", "journal-divergence", "journal-in-doubt",
    "journal-tools-changed", "journal-unavailable",
)
"""Every :data:`FailureKind`. A runtime reports all but ``type-check`` and the
``journal-*`` kinds: Code Mode's own, for a program its type check rejected before any
runtime saw it (``ToolRegistry(check_programs="error")``), and for a journaled run that
could not go on (``ToolRegistry(journal=...)``, docs/approvals-durable.md)."""

RunFact: TypeAlias = str | bool | int | float
"""One fact a runtime reports about how it ran a program (:attr:`CodeRunResult.facts`)."""

Binding = Callable[[JsonValue], Awaitable[JsonValue]]
"""An async callable taking lossless JSON arguments and resolving to a JSON value."""


@runtime_checkable
class Bindings(Protocol):
    """What a run's program may call, and the end of that run (see the module docstring)."""

    @property
    def names(self) -> Collection[str]:
        """The names ``tools`` offers the program."""
        ...

    async def call(self, name: str, args: JsonValue) -> JsonValue:
        """Run one call of the program (``name`` is one of :attr:`names`); raise
        :class:`BindingError` to fail it with a message the program reads."""
        ...

    def close(self, reason: str) -> None:
        """The program has ended: stop what is in flight. Called once per run."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Display:
    """One rich output of a program: a MIME bundle as Jupyter sends it (``text/plain``
    almost always; ``image/png`` base64; ``text/html``...), checked to be a JSON object
    of MIME types to strings (any JSON for ``*json`` types) but otherwise as the
    program sent it: untrusted. ``after_logs`` is how many log lines the program had
    completed when it displayed this (to show both in order)."""

    data: Mapping[str, JsonValue] = field(repr=False)
    metadata: Mapping[str, JsonValue] = field(repr=False)
    after_logs: int

    def __repr__(self) -> str:  # not the payload: images are base64 kilobytes
        return f"<Display {', '.join(sorted(self.data))} after_logs={self.after_logs}>"


@runtime_checkable
class OutputObserver(Protocol):
    """Told a program's output while it runs (:attr:`RunRequest.observer`)."""

    def on_log(self, line: str) -> None:
        """A completed log line (one entry of the result's ``logs``)."""
        ...

    def on_display(self, display: Display) -> None:
        """A rich output, within the run's display budget."""
        ...


@runtime_checkable
class HelperBindings(Protocol):
    """Before :attr:`RunRequest.helpers`: bindings that name helper methods on ``tools``
    (read by :meth:`RunRequest.from_bindings`)."""

    @property
    def helpers(self) -> Mapping[str, str]:
        """``{method: binding name}``, e.g. ``{"search": "tools.search"}``: ``tools.search(
        "words", limit=5)`` calls binding ``tools.search`` with ``{"query": "words",
        "limit": 5}`` (the kernel module knows each helper's parameters). Each binding
        name is one of :attr:`Bindings.names`; each method shadows a tool's attribute
        name (that tool stays reachable as ``tools["search"]``)."""
        ...


@runtime_checkable
class SessionBindings(Protocol):
    """Before :attr:`RunRequest.session`: bindings that say the session their run belongs
    to (read by :meth:`RunRequest.from_bindings`)."""

    @property
    def session_key(self) -> str | None:
        """A stable key of the run's conversation (``None``: a one-off run). A stateful
        runtime gives each key its own interpreter, shared by no other key: the key must
        be unique to the conversation, never derived from anything two could share."""
        ...


@runtime_checkable
class SignatureBindings(Protocol):
    """Before :attr:`RunRequest.signatures`: bindings that say each binding's argument
    dict (read by :meth:`RunRequest.from_bindings`)."""

    @property
    def signatures(self) -> Mapping[str, str]:
        """``{binding name: its argument dict, one line}`` in the runtime's language, e.g.
        ``{"add": '{"a": int, "b": int}'}``: a program that calls ``add`` wrongly reads
        ``await tools.add({"a": int, "b": int})``. A name left out reads ``{...}``."""
        ...


def binding_signatures(bindings: Bindings) -> dict[str, str]:
    """The signatures ``bindings`` declare (see :class:`SignatureBindings`), else ``{}``."""
    if not isinstance(bindings, SignatureBindings):
        return {}
    names = set(bindings.names)
    return {name: text for name, text in sorted(bindings.signatures.items())
            if name in names and isinstance(text, str)}


def binding_session(bindings: Bindings) -> str | None:
    """The session key ``bindings`` declare (see :class:`SessionBindings`), else ``None``."""
    if not isinstance(bindings, SessionBindings):
        return None
    key = bindings.session_key
    return key if isinstance(key, str) and key else None


def runtime_is_stateful(runtime: object) -> bool:
    """Whether ``runtime`` keeps a session's state between runs (``info.stateful``; for a
    runtime written before :class:`RuntimeInfo`, its ``stateful`` property)."""
    info = getattr(runtime, "info", None)
    if isinstance(info, RuntimeInfo):
        return info.stateful
    return getattr(runtime, "stateful", False) is True


def binding_helpers(bindings: Bindings) -> dict[str, str]:
    """The helpers ``bindings`` declare (see :class:`HelperBindings`), else ``{}``."""
    if not isinstance(bindings, HelperBindings):
        return {}
    names = set(bindings.names)
    return {str(method): str(binding) for method, binding in sorted(bindings.helpers.items())
            if binding in names}


class FunctionBindings:
    """:class:`Bindings` from a mapping of names to async callables. :attr:`signal` fires
    when the run closes them, so a callable can stop work the program no longer awaits::

        bindings = FunctionBindings({"search": search})
        result = await runtime.run(RunRequest(program, bindings))

    ``session`` (before :attr:`RunRequest.session`) names the run's session for
    :meth:`RunRequest.from_bindings`; prefer ``RunRequest(..., session="name")``.
    """

    def __init__(self, functions: Mapping[str, Binding], *, session: str | None = None) -> None:
        if session is not None and (not isinstance(session, str) or not session):
            raise ValueError(f"session must be a non-empty string or None, not {session!r}")
        self._functions = dict(functions)
        self._end = AbortController()
        self._session = session

    @property
    def session_key(self) -> str | None:
        """The session named at construction, if any."""
        return self._session

    @property
    def names(self) -> Collection[str]:
        return tuple(self._functions)

    @property
    def signal(self) -> AbortSignal:
        """Fires (with the reason) when the run closes these bindings."""
        return self._end.signal

    async def call(self, name: str, args: JsonValue) -> JsonValue:
        function = self._functions.get(name)
        if function is None:
            raise BindingError(f"no tool named {name!r}")
        return await function(args)

    def close(self, reason: str) -> None:
        self._end.abort(reason)


class BindingError(Exception):
    """Raised by a binding to fail the program's call with ``message``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeRunFailure:
    kind: FailureKind
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeRunResult:
    """What a run produced. ``value`` is ``None`` when the program returned nothing
    (or ``None``); ``logs`` holds one entry per completed output line."""

    logs: tuple[str, ...] = ()
    value: JsonValue = None
    failure: CodeRunFailure | None = None
    displays: tuple[Display, ...] = ()
    """Rich outputs within the display budget, in the order the program showed them
    (over the budget, the last is a note saying later ones are not shown)."""
    displays_dropped: int = 0
    """How many displays were not kept because the run passed its display budget."""
    files: tuple[RunFile, ...] = ()
    """Files the program wrote under ``outputs/`` in its working directory, in name order:
    collected (with their bytes) or listed with why not (see :class:`RunFile`)."""
    files_omitted: int = 0
    """Files not even listed (a program that wrote thousands; see ``kernel.files``)."""
    facts: Mapping[str, RunFact] = field(default_factory=dict)
    """How the runtime ran the program, for traces and diagnostics (never shown to the
    model); Code Mode records them on the run's span as ``dsh.<key>``. ``KernelRuntime``
    reports where the kernel came from (``kernel.source``: ``"pool"`` or ``"cold"``),
    ``kernel.launcher`` (``"fork"``, ``"stock"``, ``"gateway"``), ``kernel.confined``,
    ``kernel.wait_ms`` (from asking for a kernel to having it) and its budgets
    (``budget.wall_seconds``, ``budget.compute_seconds``, ``budget.max_output_bytes``);
    in a stateful session also ``session.run_index`` (1 for the run that started the
    session's kernel), ``session.new`` (this run started it) and
    ``session.compute_seconds`` (CPU the kernel has used so far)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFile:
    """A file a program wrote under ``outputs/`` (see ``dsh_jupyter.kernel.files``).
    ``name`` is its path below ``outputs/`` (``"plot.png"``, ``"tables/a.csv"``);
    ``mime_type`` is guessed from the name, never from the bytes. ``data`` holds its
    bytes when it was collected; otherwise ``data`` is ``None`` and ``not_collected``
    says why (over a cap, a symbolic link, ...) and ``size`` is what the listing said.

    A runtime hands its files out with ``name`` escaped (bytes that are not UTF-8, control
    and bidi characters, and backslashes written ``\\xff``, ``\\x1b``, ``\\u202e``,
    ``\\\\``: one name, one text, see ``docs/run-files.md``) and ``raw_name`` the path's
    bytes as the file system has them; ``None`` until then."""

    name: str
    size: int
    mime_type: str
    data: bytes | None = field(default=None, repr=False)
    not_collected: str | None = None
    raw_name: bytes | None = None

    @property
    def collected(self) -> bool:
        return self.data is not None

    def __repr__(self) -> str:  # not the bytes
        state = "collected" if self.data is not None else f"not collected: {self.not_collected}"
        return f"<RunFile {self.name!r} {self.size} bytes {self.mime_type} ({state})>"


@runtime_checkable
class RuntimeInputs(Protocol):
    """Before :class:`RuntimeInfo`: a runtime's read-only input files (now
    ``info.inputs``)."""

    @property
    def input_names(self) -> tuple[str, ...]:
        """Paths below ``inputs/``, a directory's ending in ``/``; ``()`` without inputs."""
        ...


def input_names(runtime: object) -> tuple[str, ...]:
    """The inputs ``runtime`` declares (``info.inputs``; for a runtime written before
    :class:`RuntimeInfo`, its :class:`RuntimeInputs` face), else ``()``."""
    info = getattr(runtime, "info", None)
    if isinstance(info, RuntimeInfo):
        return info.inputs
    if not isinstance(runtime, RuntimeInputs):
        return ()
    return tuple(str(name) for name in runtime.input_names)


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeInfo:
    """What a runtime is and supports, as data (Code Mode reads it for the SDK it renders
    and the prompt it writes; deployments for how contained a run is).

    - ``language``: selects the SDK renderer (``"python"``);
    - ``isolation``: how contained a run is (``"kernel"``, ``"in-process"``);
    - ``stateful``: runs with the same :attr:`RunRequest.session` share their top-level
      names (the prompt tells the model);
    - ``inputs``: read-only files every run finds below ``inputs/`` (a directory's name
      ends in ``/``; the prompt lists them);
    - ``files``: files a program writes below ``outputs/`` come back in
      :attr:`CodeRunResult.files`;
    - ``remote``: programs run on another machine (a Jupyter Gateway's kernels).
    """

    language: str = "python"
    isolation: str
    stateful: bool = False
    inputs: tuple[str, ...] = ()
    files: bool = False
    remote: bool = False


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One program to run, and everything the run needs (see the module docstring):
    ``RunRequest(program, bindings, signal, session=..., signatures=..., helpers=...,
    observer=...)``. Checked when made: a mistake raises ``TypeError``/``ValueError``
    saying which field."""

    program: str
    bindings: Bindings
    signal: AbortSignal = field(default_factory=AbortSignal.never)
    _: KW_ONLY
    session: str | None = None
    """The run's conversation: on a stateful runtime, runs with the same key share one
    interpreter, used by no other key (so the key must be unique to the conversation,
    never derived from anything two could share). ``None``: a one-off run."""
    signatures: Mapping[str, str] = field(default_factory=dict)
    """``{binding name: its argument dict, one line}`` in the runtime's language, e.g.
    ``{"add": '{"a": int, "b": int}'}``: a program that calls ``add`` wrongly reads
    ``await tools.add({"a": int, "b": int})``. A name left out takes any one JSON value."""
    helpers: Mapping[str, str] = field(default_factory=dict)
    """``{method: binding name}``, e.g. ``{"search": "tools.search"}``: ``tools.search(
    "words", limit=5)`` calls binding ``tools.search`` with ``{"query": "words",
    "limit": 5}`` (the kernel module knows each helper's parameters). Each method shadows a
    tool's attribute name (that tool stays reachable as ``tools["search"]``)."""
    observer: OutputObserver | None = None
    """Told the program's output while it runs (see :class:`OutputObserver`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.program, str):
            raise TypeError(f"RunRequest.program must be a str (the program's text), not "
                            f"{type(self.program).__name__}")
        if not isinstance(self.signal, AbortSignal):
            raise TypeError(f"RunRequest.signal must be an AbortSignal "
                            f"(AbortSignal.never() for none), not {type(self.signal).__name__}")
        if self.session is not None and (not isinstance(self.session, str) or not self.session):
            raise ValueError(f"RunRequest.session must be a non-empty string or None, not "
                             f"{self.session!r}")
        names = set(self.bindings.names)
        for method, binding in self.helpers.items():
            if not isinstance(method, str) or binding not in names:
                raise ValueError(f"RunRequest.helpers maps {method!r} to {binding!r}, which is "
                                 f"not one of the bindings' names")
        for name, text in self.signatures.items():
            if name not in names or not isinstance(text, str):
                raise ValueError(f"RunRequest.signatures gives {name!r} {text!r}: each key must "
                                 f"be one of the bindings' names and each value a str")

    @classmethod
    def from_bindings(cls, program: str, bindings: Bindings,
                      signal: AbortSignal | None = None) -> RunRequest:
        """A request whose session, signatures, helpers and observer are read from the
        optional faces of ``bindings`` (:class:`SessionBindings`, :class:`SignatureBindings`,
        :class:`HelperBindings`, :class:`OutputObserver`): for bindings written before
        :class:`RunRequest` carried them as fields."""
        return cls(program, bindings, AbortSignal.never() if signal is None else signal,
                   session=binding_session(bindings), signatures=binding_signatures(bindings),
                   helpers=binding_helpers(bindings),
                   observer=bindings if isinstance(bindings, OutputObserver) else None)


@runtime_checkable
class CodeRuntime(Protocol):
    """Runs model-written programs: ``info`` says what it is and supports (read once per
    use, never sniffed), ``run`` runs one :class:`RunRequest` and reports every outcome as
    a :class:`CodeRunResult`. ``KernelRuntime`` (``dsh_jupyter.kernel``) runs each
    program in a fresh confined kernel; ``InProcessRuntime`` (``dsh_jupyter.kernel`` too)
    in this process, unconfined, for tests and trusted programs."""

    @property
    def info(self) -> RuntimeInfo: ...

    async def run(self, request: RunRequest) -> CodeRunResult: ...


def as_code_runtime(runtime: object) -> CodeRuntime:
    """``runtime`` as a :class:`CodeRuntime`. One written before :class:`RunRequest` and
    :class:`RuntimeInfo` (``language``, ``isolation`` and ``run(program, bindings,
    signal)``) is wrapped, with a ``DeprecationWarning`` naming what to change; anything
    else raises ``TypeError`` saying what a runtime needs."""
    if isinstance(getattr(runtime, "info", None), RuntimeInfo) and callable(
            getattr(runtime, "run", None)):
        return runtime  # type: ignore[return-value]  # info and run are what the seam reads
    if all(hasattr(runtime, name) for name in ("language", "isolation", "run")):
        warnings.warn(
            f"{type(runtime).__name__} is a code runtime written before dsh-jupyter 0.2: give "
            f"it an `info` property (a RuntimeInfo) and `async def run(self, request: "
            f"RunRequest)`; it is adapted for now", DeprecationWarning, stacklevel=3)
        return _LegacyRuntime(runtime)
    raise TypeError(f"a code runtime needs an `info` property (a RuntimeInfo) and `async def "
                    f"run(self, request: RunRequest) -> CodeRunResult`; "
                    f"{type(runtime).__name__} has neither (use KernelRuntime from "
                    f"dsh_jupyter.kernel)")


class _LegacyRuntime:
    """A runtime written before :class:`RunRequest`, seen through the current seam: the
    request's fields become the bindings' optional faces again."""

    def __init__(self, runtime: Any) -> None:
        self.wrapped = runtime
        self.info = RuntimeInfo(language=str(runtime.language), isolation=str(runtime.isolation),
                                stateful=getattr(runtime, "stateful", False) is True,
                                inputs=input_names(runtime))

    async def run(self, request: RunRequest) -> CodeRunResult:
        result: CodeRunResult = await self.wrapped.run(
            request.program, _FacedBindings(request), request.signal)
        return result


class _FacedBindings:
    """A request's bindings with its fields as the optional faces a legacy runtime reads."""

    def __init__(self, request: RunRequest) -> None:
        self._request = request
        self.names = request.bindings.names
        self.session_key = request.session
        self.signatures = request.signatures
        self.helpers = request.helpers

    async def call(self, name: str, args: JsonValue) -> JsonValue:
        return await self._request.bindings.call(name, args)

    def close(self, reason: str) -> None:
        self._request.bindings.close(reason)

    def on_log(self, line: str) -> None:
        if self._request.observer is not None:
            self._request.observer.on_log(line)

    def on_display(self, display: Display) -> None:
        if self._request.observer is not None:
            self._request.observer.on_display(display)
