"""Export a session log to a notebook a person can read, edit and re-run.

::

    nb = export_notebook("session.jsonl", "session.ipynb",
                         tools="dsh_jupyter.demo.tools:sample_registry")

The cells, in order (docs/sessions.md shows one):

- a title (the task, when and with which model the session was recorded);
- the setup: ``%load_ext dsh_jupyter`` and where the registry comes from. With
  ``tools="MODULE:ATTR"`` a cell that opens it as ``dsh-jupyter run --tools`` does
  (:func:`~dsh_jupyter.sessions.open_session_registry`); without, a cell that raises
  and says what to fill in: a notebook that cannot know its tools fails at the top, on
  purpose, instead of at its first program. When the programs asked for approvals, a
  papermill parameter cell first says who answers them now (``approvals``, see
  :mod:`.approvals`), and the setup lists the recorded answers;
- per model turn a markdown cell: what the model wrote, its native calls as a table
  (tool, arguments, outcome, approval), and approvals its programs' calls asked for;
- per ``run_code`` program a ``%%run_code --description ...`` cell holding the exact
  program, its recorded card as the cell's output (``text/plain``, which holds no time
  and no id, and ``text/html``). A failed program's cell needs no ``raises-exception``
  tag: ``%%run_code`` reports a failure as the cell's value, it does not raise. A
  program that was stopped keeps that kind and is skipped (``--skip``) when run again;
- a line per run end, and with ``tools`` a last cell that closes what the setup opened.

The same log gives the same bytes (cell ids are numbered, nothing reads the clock).
``values=False`` leaves out what calls carried (native arguments and results, approval
notes) and the recorded outputs; programs stay, they are the point. Values are never
added: the notebook shows at most what the log already held. Every recorded string is
escaped for where it stands (:mod:`._markdown`, :mod:`dsh_jupyter._magic_line`).
"""

from __future__ import annotations

import datetime
import importlib
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .._magic_line import quote_argument
from ..events import SessionEvent, ToolResultEvent, read_session
from ..json_value import JsonValue
from . import _markdown as md
from .approvals import APPROVALS, ApprovalsMode
from .turns import (
    Approval,
    NativeCall,
    Program,
    Run,
    RunEnd,
    Session,
    Turn,
    compact_json,
    read_turns,
    stop_of,
)

if TYPE_CHECKING:
    import nbformat

__all__ = ["EXPORT_FORMAT", "export_notebook", "load_events"]

EXPORT_FORMAT = "dsh-jupyter-export/1"
CLIP = 60
_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_DENIED = ("DENIED", "BLOCKED")
_CODE_MODES = ("code", "both", "discovery")
_KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def export_notebook(events: Iterable[SessionEvent] | str | os.PathLike[str],
                    path: str | os.PathLike[str] | None, *, tools: str | None = None,
                    values: bool = True, approvals: str = "ask") -> nbformat.NotebookNode:
    """The session ``events`` as a validated notebook, written to ``path`` unless ``None``.

    ``events`` are the events themselves or a JSON Lines log's path.
    ``tools`` is ``MODULE:ATTR`` naming the registry to re-run the programs against (a
    registry, a function returning one, or an async context manager yielding one);
    without it the setup cell says what to fill in. ``values=False`` leaves out argument
    and result values and recorded outputs. ``approvals`` is who answers the approvals
    the programs ask for when the notebook runs (``"ask"``, ``"replay"`` the recorded
    answers, ``"deny"``; see :mod:`~dsh_jupyter.sessions.approvals`): the default of the
    notebook's ``approvals`` parameter. Raises ``ValueError`` for a log that is not a
    session (empty, not JSON Lines, no dsh-jupyter events), a malformed ``tools`` or an
    unknown ``approvals``.
    """
    nbf = _nbformat()
    if tools is not None and not _SPEC.fullmatch(tools):
        raise ValueError(f"tools must be MODULE:ATTR (e.g. mypackage.tools:registry), "
                         f"got {tools!r}")
    if approvals not in APPROVALS:
        raise ValueError(f"approvals must be 'ask', 'replay' or 'deny', got {approvals!r}")
    source: str | None = None
    if isinstance(events, str | os.PathLike):
        source = os.fspath(events)
        events = load_events(source)
    session = read_turns(events)
    if session.events == 0:
        raise ValueError("no events to export: the session is empty")
    cells = _Cells(values=values)
    cells.markdown(_title(session, source, values))
    cells.setup(tools, _recorded_mode(session), scopes=session.scopes,
                stateful=session.stateful, approvals=approvals,
                recorded=_recorded_answers(session, values))
    several = len(session.runs) > 1
    for item in session.items:
        if isinstance(item, Run):
            if several:
                cells.markdown(f"## Run {md.code(item.start['run_id'])}: "
                               f"{md.text(_one_line(item.start['task'], 80))}")
        elif isinstance(item, RunEnd):
            cells.markdown(_run_end(item))
        else:
            cells.turn(item)
    if tools is not None:
        cells.code("await resources.aclose()  # stop the kernels and tools the setup opened",
                   tag="dsh-teardown")
    nb = nbf.v4.new_notebook(cells=cells.cells, metadata={
        "kernelspec": dict(_KERNELSPEC),
        "language_info": {"name": "python"},
        "dsh_jupyter": {"format": EXPORT_FORMAT, "source": source, "tools": tools,
                        "values": values, "approvals": approvals,
                        "runs": [r["run_id"] for r in session.runs],
                        "programs": len(session.programs)}})
    _number_code_cells(nb.cells)
    nbf.validate(nb)
    if path is not None:
        nbf.write(nb, os.fspath(path))
    return cast("nbformat.NotebookNode", nb)


def load_events(path: str | os.PathLike[str]) -> list[SessionEvent]:
    """The events of a JSON Lines session log, or ``ValueError`` saying why it is none."""
    where = Path(path)
    if where.is_dir():
        raise ValueError(f"{where} is a directory, not a session log (.jsonl)")
    try:
        lines = [line for line in where.read_text(encoding="utf-8").splitlines()
                 if line.strip()]
    except FileNotFoundError:
        raise ValueError(f"no session log at {where}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not a session log: not UTF-8 text") from None
    if not lines:
        raise ValueError(f"{where} is empty: a session log has one JSON event per line")
    found = read_session(where)  # raises ValueError naming a line that is not JSON
    if not found:
        raise ValueError(f"{where} is not a session log: none of its {len(lines)} lines is a "
                         "dsh-jupyter event (JsonlSessionWriter writes them)")
    return found


class _Cells:
    """The cells so far, numbered for stable ids."""

    def __init__(self, *, values: bool) -> None:
        self.values = values
        self.cells: list[Any] = []

    def _add(self, cell: Any, tag: str | None) -> Any:
        cell.id = f"c{len(self.cells) + 1:03d}"
        if tag is not None:
            cell.metadata["tags"] = [tag]
        self.cells.append(cell)
        return cell

    def markdown(self, text: str, tag: str | None = None) -> None:
        self._add(_nbformat().v4.new_markdown_cell(text), tag)

    def code(self, text: str, tag: str | None = None, outputs: list[Any] | None = None,
             metadata: dict[str, Any] | None = None) -> None:
        cell = self._add(_nbformat().v4.new_code_cell(text, outputs=outputs or []), tag)
        if metadata:
            cell.metadata["dsh_jupyter"] = metadata

    def setup(self, tools: str | None, mode: str, *, scopes: list[str], stateful: bool,
              approvals: ApprovalsMode, recorded: list[dict[str, JsonValue]]) -> None:
        options = f"mode={mode!r}"
        if scopes:
            options += f", scopes={scopes!r}"
        if stateful:
            options += ", stateful=True"
        if tools is None:
            self.markdown(_PLACEHOLDER_NOTE + (_STATEFUL_NOTE if stateful else ""))
            self.code(_PLACEHOLDER_CODE.replace('"mypackage.tools:registry"',
                                                f'"mypackage.tools:registry", {options}'),
                      tag="dsh-setup")
            return
        runtime = ("a stateful `KernelRuntime` (the session's programs shared a kernel per "
                   "conversation: a program may use what an earlier one defined)" if stateful
                   else "a fresh `KernelRuntime`")
        where = ("Each program below runs again in its conversation's kernel" if stateful
                 else "Each program below runs again in a fresh kernel")
        made = (f" The scopes the programs ran in ({', '.join(md.code(s) for s in scopes)}) are "
                "made where the registry has none of that name." if scopes else "")
        # A session whose programs asked for approvals (or an export that chose how they
        # are answered) gets a papermill parameter saying who answers them now.
        asks = bool(recorded) or approvals != "ask"
        self.markdown(f"## Setup\n\nThe tools come from `{tools}`, opened as `dsh-jupyter run "
                      f"--tools` opens them, in `{mode}` mode if the registry offers no "
                      f"`run_code`, with {runtime} if it has no code runtime.{made} "
                      f"{where} against them." + (_APPROVALS_NOTE if asks else ""))
        answers = ""
        if asks:
            self.code(_APPROVALS_PARAMETER.format(approvals=approvals), tag="parameters")
            options += ", approvals=approvals,\n    recorded_approvals=RECORDED_APPROVALS"
            listed = "".join(f"    {answer!r},\n" for answer in recorded)
            answers = ("# The answers the programs' approvals got in the session (replayed "
                       'only with approvals = "replay").\n'
                       f"RECORDED_APPROVALS = [\n{listed}]\n")
        self.code("%load_ext dsh_jupyter\n"
                  "from contextlib import AsyncExitStack\n\n"
                  "from dsh_jupyter.sessions import open_session_registry\n\n"
                  f"{answers}"
                  "resources = AsyncExitStack()\n"
                  f"registry = await resources.enter_async_context(\n"
                  f"    open_session_registry({tools!r}, {options}))", tag="dsh-setup")

    def turn(self, turn: Turn) -> None:
        text = _turn_markdown(turn, values=self.values)
        if turn.step is not None or text != "### Calls":  # a lone program needs no heading
            self.markdown(text)
        for program in turn.programs:
            if program.code is not None:
                self.program(program)

    def program(self, program: Program) -> None:
        line = "%%run_code" + _option("description", program.description)
        if program.scope is not None:
            line += _option("scope", program.scope)
        metadata: dict[str, Any] = {"call_id": program.call_id,
                                    # a program's approvals are its sub-calls'
                                    "outcome": _outcome(program.result, [])}
        stopped = program.stopped
        if stopped is not None:
            # Run again, it would run in full (a polling loop up to its budget): skipped,
            # with a note saying why, until the user removes the option.
            line += _option("skip", f"{stopped.describe()} in the recorded session")
            metadata["stopped"] = {"reason": stopped.reason,
                                   "seconds": round(stopped.seconds, 1)}
        outputs = []
        if self.values and program.result is not None:
            outputs.append(_nbformat().v4.new_output(
                "execute_result", data=_card_bundle(program), execution_count=None))
        self.code(f"{line}\n{program.code}", outputs=outputs, metadata=metadata)


def _number_code_cells(cells: list[Any]) -> None:
    """Execution counts as if run top to bottom: nbval rejects a cell with outputs that
    says it never ran, and the recorded outputs are what running it gave."""
    code = [cell for cell in cells if cell.cell_type == "code"]
    for number, cell in enumerate(code, start=1):
        cell.execution_count = number
        for output in cell.outputs:
            if output.output_type == "execute_result":
                output.execution_count = number


def _recorded_answers(session: Session, values: bool) -> list[dict[str, JsonValue]]:
    """The answers the programs' sub-calls got, in order, for ``approvals="replay"``
    (without arguments and notes when values are left out: then they match by tool)."""
    answers: list[dict[str, JsonValue]] = []
    for program in session.programs:
        for approval in program.approvals:
            if approval.approved is None or approval.answered_by in (None, "abort", "error"):
                continue  # never answered, or the call stopped first: not a decision
            answer: dict[str, JsonValue] = {"tool": approval.tool}
            if values:
                answer["arguments"] = approval.arguments
            answer |= {"approved": approval.approved, "answered_by": approval.answered_by}
            if values and approval.note:
                answer["note"] = approval.note
            answers.append(answer)
    return answers


def _nbformat() -> Any:
    """nbformat, imported when a notebook is made (it is untyped; so is this)."""
    return importlib.import_module("nbformat")


def _card_bundle(program: Program) -> dict[str, str]:
    """The program's card replayed from its events: what ``%%run_code`` shows."""
    from ..widgets import replay

    bundle = replay(program.events)._repr_mimebundle_(include=("text/plain", "text/html"))
    return {"text/plain": bundle["text/plain"], "text/html": bundle["text/html"]}


def _title(session: Session, source: str | None, values: bool) -> str:
    runs = session.runs
    first = runs[0] if runs else None
    if first is not None and len(runs) == 1:
        heading = f"# Session: {md.text(_one_line(first['task'], 80))}"
    else:
        heading = "# Session" + (f" of {len(runs)} runs" if runs else "")
    facts = []
    if session.first_time is not None:
        when = datetime.datetime.fromtimestamp(session.first_time, datetime.UTC)
        facts.append(f"recorded {when:%Y-%m-%d %H:%M} UTC")
    models = sorted({r["model"] for r in runs})
    modes = sorted({r["mode"] for r in runs})
    if models:
        facts.append("model " + ", ".join(md.code(m) for m in models))
    if modes:
        facts.append("mode " + ", ".join(md.code(m) for m in modes))
    if source is not None:
        facts.append(f"log {md.code(Path(source).name)}")
    turns = [i for i in session.items if isinstance(i, Turn)]
    natives = sum(len(t.native) for t in turns)
    lines = [heading, "", " · ".join(facts) + ("." if facts else "")]
    if first is not None and len(runs) == 1:
        lines += ["", "**Task:**", "",
                  *(f"> {md.text(t)}" for t in first["task"].splitlines())]
    lines += ["", f"{_plural(sum(t.step is not None for t in turns), 'model turn')}, "
                  f"{_plural(natives, 'native call')}, {_plural(len(session.programs), 'program')}"
                  ". Each program is a `%%run_code` cell with its recorded card as output; "
                  "run the notebook to run them again."]
    if not values:
        lines += ["", "*Exported without values (`--no-values`): tool arguments, results, "
                      "approval notes and recorded outputs are left out; the programs and what "
                      "the model wrote are kept.*"]
    return "\n".join(lines)


def _turn_markdown(turn: Turn, *, values: bool) -> str:
    lines = [f"### Step {turn.step}" if turn.step is not None else "### Calls"]
    if turn.text:
        lines += ["", md.text(turn.text.strip())]
    native: list[NativeCall | Program] = [*turn.native,
                                          *(p for p in turn.programs if p.code is None)]
    if native:
        header = "| tool | arguments | outcome | result | approval |" if values \
            else "| tool | arguments | outcome | approval |"
        lines += ["", header, "|---" * header.count(" | ") + "|---|"]
        for call in native:
            name = call.name if isinstance(call, NativeCall) else "run_code"
            cells = [md.cell_code(name), _arguments(call.arguments, values),
                     md.cell(_outcome(call.result, call.approvals))]
            if values:
                cells.append(_result_text(call))
            cells.append(_approvals(call.approvals, values, named=False))
            lines.append("| " + " | ".join(cells) + " |")
    programs = turn.programs
    if programs and not turn.text and not native and turn.step is not None:
        lines += ["", f"The model ran {_plural(len(programs), 'program')}."]
    for program in programs:
        asked = _approvals(program.approvals, values)
        if asked:
            lines += ["", f"Approvals in *{md.cell(program.description)}*: {asked}"]
    return "\n".join(lines)


def _arguments(arguments: Any, values: bool) -> str:
    if not values:
        keys = ", ".join(arguments) if isinstance(arguments, dict) else "…"
        return md.cell_code("{" + keys + "}")
    return md.cell_code(_clip(compact_json(arguments)))


def _result_text(call: NativeCall | Program) -> str:
    result = call.result
    if result is None:
        return ""
    error = result.get("error")
    if error is not None:
        return md.cell(_clip(error["message"]))
    text = "".join(str(part.get("text", "")) for part in result["content"]
                   if part.get("type") == "text")
    return md.cell_code(_clip(text)) if text else ""


def _outcome(result: ToolResultEvent | None, approvals: list[Approval]) -> str:
    if stop_of(result) is not None:
        return "stopped"
    if any(a.approved is False for a in approvals):
        return "denied"
    if result is None:
        return "no result"
    if not result["is_error"]:
        return "ok"
    error = result.get("error")
    code = error["code"] if error is not None else None
    if code in _DENIED:
        return "denied"
    return f"error {code}" if code else "error"


def _approvals(approvals: list[Approval], values: bool, *, named: bool = True) -> str:
    parts = []
    for approval in approvals:
        asked = f"asked ({approval.reason})" if approval.reason else "asked"
        if approval.approved is None:
            answer = "unanswered"
        else:
            answer = ("approved" if approval.approved else "denied") \
                + (f" by {approval.answered_by}" if approval.answered_by else "")
            if values and approval.note:
                answer += f": {approval.note}"
        said = md.cell(f"{asked}, {answer}")
        parts.append(f"{md.cell_code(approval.tool)} {said}" if named else said)
    return "; ".join(parts)


def _run_end(item: RunEnd) -> str:
    end = item.end
    text = (f"**Run ended:** {md.text(end['stop'])} after {_plural(end['steps'], 'step')} "
            f"({_plural(end['tool_calls'], 'tool call')}, "
            f"{_plural(end['sub_calls'], 'sub-call')}).")
    error = end.get("error")
    if error is not None:
        text += (f" {md.text(error.get('code') or 'error')}: "
                 f"{md.text(_one_line(error['message']))}")
    return text


def _recorded_mode(session: Session) -> str:
    """The mode to give a native registry: the session's, when it offered run_code (and
    is a mode: the log's word is not trusted into the setup code)."""
    modes = [r["mode"] for r in session.runs if r["mode"] in _CODE_MODES]
    return modes[0] if modes else "code"


def _one_line(text: str, limit: int = 200) -> str:
    return _clip(" ".join(text.split()), limit)


def _clip(text: str, limit: int = CLIP) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _option(name: str, value: str) -> str:
    """`` --name VALUE`` for the magic's line, exactly ``value`` however it reads (one
    line, quoted; ``--name=VALUE`` when it starts with a dash)."""
    joint = "=" if value.startswith("-") else " "
    return f" --{name}{joint}{quote_argument(value)}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


_PLACEHOLDER_NOTE = """\
## Setup: name the tools

This notebook was exported without `--tools`, so it does not know where the session's \
tools come from. Replace the cell below with code that sets `registry` to them, for \
example with `open_session_registry("mypackage.tools:registry")` (a registry, a function \
returning one, or an async context manager yielding one), or export again with \
`dsh-jupyter export SESSION.jsonl -o NOTEBOOK.ipynb --tools MODULE:ATTR`. Until then \
running the notebook stops at that cell."""

_APPROVALS_NOTE = """

The session's programs asked for approvals. The next cell (a papermill parameter) says who \
answers them now: `"ask"` shows the approval card in the call's card, as in the session; \
where nobody can click (papermill, nbval) the call is denied and says how to opt in. \
`"replay"` gives the answers recorded in the session (listed in the setup cell) to the \
same calls with the same arguments: `papermill NOTEBOOK OUT -p approvals replay`. \
`"deny"` denies them all."""

_APPROVALS_PARAMETER = """\
# Who answers the approvals the programs ask for: "ask", "replay" or "deny".
approvals = {approvals!r}"""

_STATEFUL_NOTE = (" The session ran on a stateful runtime (a program may use what an "
                  "earlier one of its conversation defined): keep `stateful=True`.")

_PLACEHOLDER_CODE = """\
%load_ext dsh_jupyter
# Fill in where the session's tools come from, e.g.:
#   from contextlib import AsyncExitStack
#   from dsh_jupyter.sessions import open_session_registry
#   resources = AsyncExitStack()
#   registry = await resources.enter_async_context(
#       open_session_registry("mypackage.tools:registry"))
raise RuntimeError("this notebook does not name its tools: replace this cell with code that "
                   "sets `registry`, or export with --tools MODULE:ATTR")"""
