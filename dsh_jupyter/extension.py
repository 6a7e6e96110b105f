"""The IPython extension: ``%load_ext dsh_jupyter``.

- ``%%run_code [REGISTRY] [--scope NAME] [--description TEXT] [--out VAR] [--skip REASON]``
  runs the cell as a run_code program against a registry from the user namespace (the
  only :class:`ToolRegistry` there, or the one named). Its run_code card is the cell's
  output from the start and updates in place (log lines, displays, sub-calls,
  approvals); its Stop button, or Kernel > Interrupt, stops the program and leaves
  the card saying so, with what the program printed. The outcome is the cell's value
  (``_``) and, with ``--out``, ``VAR``. ``--skip REASON`` runs nothing and prints
  ``skipped: REASON`` (an exported notebook skips a program the user stopped). Arguments
  are shell words; a value with a newline is written as bash's ``$'...'``
  (:mod:`._magic_line`).
- ``%dsh_sdk [REGISTRY] [--scope NAME]`` shows the SDK section the model would see.
- ``%dsh_approvals [REGISTRY]`` shows the approvals waiting in the registry's journal
  (:func:`~dsh_jupyter.widgets.show_pending`): after a kernel restart, re-run the setup
  cell, then this; a click resumes the run in this kernel.
- Interrupting a cell that awaits ``registry.execute(...)`` shows the stopped call's
  card and one line instead of a ``CancelledError`` traceback.
- A mistake in a magic's line or setup (no registry, a native one, several, a wrong
  name or scope, an unknown option) is IPython's ``UsageError``: one line saying what is
  wrong and how to fix it, with no traceback.

A cell magic is a synchronous function, but a run must await tools on the
kernel's own event loop. So the extension rewrites ``%%run_code`` cells into one
top-level ``await`` expression (IPython's autoawait runs it on the running loop;
nothing is nested, nothing blocks).
"""

from __future__ import annotations

import argparse
import asyncio
import html
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import TYPE_CHECKING, Any, NoReturn

from IPython.core.error import UsageError

from ._magic_line import split_line
from .abort import AbortController
from .codemode.run_code import CAPTURED_OUTPUT
from .events import SessionEvent
from .registry import ToolCall, ToolRegistry
from .registry.pipeline import cancelled_call
from .registry.results import ToolResult
from .registry.scope import AgentScope
from .widgets.run_code import USER_STOP, RunCodeCard

if TYPE_CHECKING:
    from .widgets.pending import PendingApprovals
    from .widgets.session import CallView, SessionView

MAGIC = "%%run_code"
_HELPER = "__dsh_jupyter_run_code__"
_counter = count(1)


@dataclass(frozen=True, slots=True)
class RunCodeOutcome:
    """What ``%%run_code`` returns: the run_code result plus its card (displayed as
    the cell's value; text fallbacks where no widget front end is present)."""

    result: ToolResult
    program: str
    description: str
    events: tuple[SessionEvent, ...] = ()
    registry: ToolRegistry | None = None
    stopped_by: str | None = None
    """``"the user"`` when the run was stopped (Stop button, Kernel > Interrupt)."""
    view: SessionView | None = field(default=None, repr=False, compare=False)
    """The live card's view (in a kernel): displaying the outcome shows that card."""

    @property
    def value(self) -> Any:
        """The program's return value (``None`` when it returned nothing or failed)."""
        if self.result.is_error or not isinstance(self.result.value, dict):
            return None
        return self.result.value.get("result")

    @property
    def logs(self) -> list[str]:
        """The lines the program printed (also of a failed or stopped run)."""
        error = self.result.error
        if error is not None:
            _, found, captured = error.message.partition(CAPTURED_OUTPUT)
            return captured.split("\n") if found and error.code == "CODE_RUN_FAILED" else []
        if not isinstance(self.result.value, dict):
            return []
        logs = self.result.value.get("logs")
        return [str(line) for line in logs] if isinstance(logs, list) else []

    @property
    def files(self) -> dict[str, bytes]:
        """The files the program wrote under ``outputs/`` that were collected, by name
        (``{"tables/a.csv": b"..."}``; see ``docs/run-files.md``). Empty for a failed run."""
        attachments = getattr(self.result, "attachments", ())
        return {file.name: file.data for file in attachments if file.data is not None}

    def __repr__(self) -> str:
        status = "failed" if self.result.is_error else "ok"
        return f"<run_code {status}: {self.description}>\n{self.result.text}"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        view = self.view
        if view is None:
            from .widgets import replay

            view = replay(self.events, registry=self.registry)
            if self.stopped_by is not None:
                for card in view.cards:
                    if isinstance(card, RunCodeCard):
                        card.finish_stopped(self.stopped_by)
        return view._repr_mimebundle_(include=include, exclude=exclude)


APPROVALS = "%dsh_approvals"
_USAGE = {MAGIC: f"{MAGIC} [REGISTRY] [--scope NAME] [--description TEXT] [--out VAR] "
                 "[--skip REASON]",
          "%dsh_sdk": "%dsh_sdk [REGISTRY] [--scope NAME]",
          APPROVALS: f"{APPROVALS} [REGISTRY]"}


class _Parser(argparse.ArgumentParser):
    """A magic's arguments; a mistake is one ``UsageError`` line (argparse would print its
    usage and raise ``SystemExit``, which IPython shows with a traceback)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}; usage: {_USAGE.get(self.prog, self.prog)}")


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, add_help=False)
    parser.add_argument("registry", nargs="?")
    if prog == APPROVALS:
        return parser
    parser.add_argument("--scope")
    parser.add_argument("--description", default="Run the cell's program")
    parser.add_argument("--out")
    parser.add_argument("--skip", metavar="REASON")
    return parser


def _options(prog: str, line: str) -> argparse.Namespace:
    try:
        words = split_line(line)
    except ValueError as error:  # No closing quotation, ...
        raise UsageError(f"{prog}: {error} in {line.strip()!r}") from None
    return _parser(prog).parse_args(words)


def find_registry(namespace: dict[str, Any], name: str | None, *,
                  prog: str = MAGIC) -> ToolRegistry:
    """The registry named ``name`` in ``namespace``, or the only one there; ``UsageError``
    (one line, no traceback in IPython) saying what to do when there is none to take."""
    registries = {key: value for key, value in namespace.items()
                  if isinstance(value, ToolRegistry) and not key.startswith("_")}
    if name is not None:
        found = namespace.get(name)
        if not isinstance(found, ToolRegistry):
            raise UsageError(f"{prog}: {name!r} is not a ToolRegistry in the notebook namespace "
                             f"(registries: {', '.join(sorted(registries)) or 'none'})")
        return found
    if len(registries) == 1:
        return next(iter(registries.values()))
    if not registries:
        raise UsageError(f"{prog}: no ToolRegistry in the notebook namespace; create one "
                         "first: registry = ToolRegistry(mode='code', code_runtime=...)")
    # %%run_code can only use a registry that runs code: suggest only those.
    names = sorted(key for key, registry in registries.items()
                   if prog != MAGIC or _runs_code(registry))
    if not names:
        raise UsageError(f"{prog}: none of the registries ({', '.join(sorted(registries))}) "
                         "can run code; create one with ToolRegistry(mode='code', "
                         "code_runtime=...)")
    choices = " or ".join(f"{prog} {name}" for name in names)
    raise UsageError(f"{prog}: several registries ({', '.join(sorted(registries))}); "
                     f"name one: {choices}")


def _runs_code(registry: ToolRegistry) -> bool:
    return registry.mode_for() != "native" and registry.code_runtime is not None


def _find_scope(registry: ToolRegistry, name: str | None, prog: str) -> AgentScope | None:
    if name is None:
        return None
    scope = registry.find_scope(name)
    if scope is None:
        raise UsageError(f"{prog}: no scope named {name!r}; scopes: "
                         f"{', '.join(s.name for s in registry.scopes) or '(none)'}")
    return scope


async def run_cell(namespace: dict[str, Any], line: str,
                   cell: str) -> RunCodeOutcome | None:
    """Run ``cell`` as a run_code program (what a rewritten ``%%run_code`` cell awaits);
    with ``--skip REASON``, say that it is skipped and why, and run nothing (``None``)."""
    options = _options(MAGIC, line)
    if options.skip is not None:
        print(f"skipped: {options.skip} (remove --skip from the first line to run it)")
        if options.out:
            namespace[options.out] = None
        return None
    registry = find_registry(namespace, options.registry)
    scope = _find_scope(registry, options.scope, MAGIC)
    if registry.mode_for(scope) == "native":
        raise UsageError(f"{MAGIC} needs Code Mode, but this registry presents its tools "
                         "natively: create it with ToolRegistry(mode='code' or 'both', "
                         "code_runtime=...)")
    if registry.code_runtime is None:
        raise UsageError(f"{MAGIC}: the registry has no code runtime to run the cell in: set "
                         "registry.code_runtime (a KernelRuntime from dsh_jupyter.kernel)")
    arguments = {"code": cell, "description": options.description}
    stop = AbortController()
    loop = asyncio.get_running_loop()
    call = ToolCall(call_id=f"cell-{next(_counter)}", name="run_code", agent=scope,
                    arguments=arguments, signal=stop.signal)
    events: list[SessionEvent] = []
    undo = registry.on_event(events.append)
    def on_stop() -> None:  # a click may arrive outside the loop's thread
        loop.call_soon_threadsafe(stop.abort, USER_STOP)

    live = _live_view(registry, call, scope, arguments, on_stop)
    stopped_by: str | None = None
    try:
        result = await registry.execute(call)
    except asyncio.CancelledError as error:
        stopped = cancelled_call(error)
        task = asyncio.current_task()
        if stopped is None or stopped.call_id != call.call_id or task is None:
            raise
        task.uncancel()  # Kernel > Interrupt: the run is stopped, the cell ends normally
        result, stopped_by = stopped.result, "the user"
    finally:
        undo()
        if live is not None:
            live.dispose()
    if stop.signal.aborted:
        stopped_by = "the user"
    mine = tuple(e for e in events if e.get("call_id") == call.call_id
                 or e.get("parent_call_id") == call.call_id
                 or str(e.get("call_id", "")).startswith(f"{call.call_id}:code:"))
    outcome = RunCodeOutcome(result=result, program=cell, description=options.description,
                             events=mine, registry=registry, stopped_by=stopped_by, view=live)
    if live is not None:
        if stopped_by is not None and isinstance(live.main, RunCodeCard):
            live.main.finish_stopped(stopped_by)
        # The live card becomes the cell's value: the same widget, now with the text
        # fallbacks (papermill, nbval and nbconvert keep those; see _live_view).
        from IPython.display import clear_output

        clear_output(wait=True)
    if options.out:
        namespace[options.out] = outcome
    return outcome


def _live_view(registry: ToolRegistry, call: ToolCall, scope: AgentScope | None,
               arguments: dict[str, Any], stop: Callable[[], None]) -> CallView | None:
    """Show the call's card as the cell's output now (only inside an IPython kernel).

    While the program runs the output is the widget alone; when it ends, the output is
    cleared and the outcome (the same widget, with its text fallbacks) becomes the
    cell's value. A front end without widgets (papermill, nbval, nbconvert) thus keeps
    one final card, and nbval, which neither clears nor updates outputs, compares
    that card and nothing else (a widget view is not compared)."""
    from .widgets import _ipw
    from .widgets.session import CallView

    if not _ipw.in_kernel():
        return None
    view = CallView(registry, call.call_id, call.name, arguments, agent=scope, stop=stop)
    from IPython.display import display

    display({_ipw.WIDGET_MIME: _ipw.widget_view(view.widget)}, raw=True)
    return view


def _rewrite(lines: list[str]) -> list[str]:
    """Input transformer: a ``%%run_code`` cell becomes one top-level await."""
    if not lines or not lines[0].startswith(MAGIC):
        return lines
    first = lines[0].rstrip("\n")
    line = first[len(MAGIC):].strip()
    if first[len(MAGIC):][:1] not in ("", " ", "\t"):
        return lines  # some other magic that merely starts with the same letters
    # IPython ends every cell with a newline: the program is the cell as written (so an
    # exported program runs again byte for byte, and its card counts its own lines).
    body = "".join(lines[1:]).removesuffix("\n")
    return [f"await {_HELPER}(globals(), {line!r}, {body!r})\n"]


def sdk_text(namespace: dict[str, Any], line: str) -> str:
    options = _options("%dsh_sdk", line)
    registry = find_registry(namespace, options.registry, prog="%dsh_sdk")
    from .codemode.prompt import sdk_section

    scope = _find_scope(registry, options.scope, "%dsh_sdk")
    language = None if registry.code_runtime is not None else "python"
    return sdk_section(registry, scope, language=language).text


def sdk_bundle(namespace: dict[str, Any], line: str) -> dict[str, str]:
    """``%dsh_sdk``'s output: the text itself (``text/plain``), and for a front end a
    framed, foldable block, so its headings do not mix with the notebook's own."""
    text = sdk_text(namespace, line)
    size = len(text.encode("utf-8"))
    page = ("<details open style='border:1px solid var(--jp-border-color2, #ccc);"
            "border-radius:4px;padding:2px 8px'><summary><b>SDK section the model sees</b> "
            f"({size:,} bytes)</summary><pre style='white-space:pre-wrap;margin:4px 0'>"
            f"{html.escape(text)}</pre></details>")
    return {"text/plain": text, "text/html": page}


def pending_approvals(namespace: dict[str, Any], line: str) -> PendingApprovals:
    """``%dsh_approvals``'s value: the waiting approvals of the registry the line names
    (or the only one), read from its journal in a task on the running loop."""
    options = _options(APPROVALS, line)
    registry = find_registry(namespace, options.registry, prog=APPROVALS)
    from .widgets.pending import show_pending

    return show_pending(registry)


def show_stopped(shell: Any, etype: type[BaseException], value: BaseException, tb: Any,
                 tb_offset: int | None = None) -> None:
    """IPython's handler for a ``CancelledError`` ending a cell: a call stopped by
    Kernel > Interrupt shows its card and one line; anything else its traceback."""
    from IPython.display import display

    stopped = cancelled_call(value)
    if stopped is None:
        stb = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
        shell._showtraceback(etype, value, stb)
        return
    from .widgets import tool_card

    shell._last_traceback = []  # ipykernel reads it for the error reply; nothing to show
    card = tool_card(stopped.name, stopped.arguments, result=stopped.result,
                     duration=stopped.seconds)
    if isinstance(card, RunCodeCard):
        card.finish_stopped("the user")
    display(card)
    print(f"Stopped by the user after {stopped.seconds:.1f} s: {stopped.name} "
          f"({stopped.call_id}).")


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%run_code``, ``%dsh_sdk`` and ``%dsh_approvals`` (called by ``%load_ext
    dsh_jupyter``), and the handler that shows a call stopped by Kernel > Interrupt as its
    card."""
    from IPython.display import display

    ipython.user_ns[_HELPER] = run_cell
    if not ipython.custom_exceptions:  # never displace another extension's handler
        ipython.set_custom_exc((asyncio.CancelledError,), show_stopped)
    transformers = ipython.input_transformers_cleanup
    if _rewrite not in transformers:
        transformers.insert(0, _rewrite)

    def run_code_magic(line: str, cell: str) -> None:
        # Reached only where the input transformer did not run (e.g. run_cell_magic()).
        raise RuntimeError("%%run_code must be the first line of a cell run by IPython "
                           "(it is rewritten into a top-level await)")

    def dsh_sdk(line: str) -> None:
        display(sdk_bundle(ipython.user_ns, line), raw=True)

    def dsh_approvals(line: str) -> PendingApprovals:
        return pending_approvals(ipython.user_ns, line)

    ipython.register_magic_function(run_code_magic, "cell", "run_code")
    ipython.register_magic_function(dsh_sdk, "line", "dsh_sdk")
    ipython.register_magic_function(dsh_approvals, "line", "dsh_approvals")


def unload_ipython_extension(ipython: Any) -> None:
    transformers = ipython.input_transformers_cleanup
    if _rewrite in transformers:
        transformers.remove(_rewrite)
    ipython.user_ns.pop(_HELPER, None)
    if ipython.custom_exceptions == (asyncio.CancelledError,):
        ipython.set_custom_exc((), None)
