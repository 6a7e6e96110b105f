"""``dsh-jupyter approvals``: the approvals journaled runs wait for, answered from a shell.

::

    dsh-jupyter approvals list --journal runs.sqlite [--json]
    dsh-jupyter approvals approve RUN_ID --journal runs.sqlite [--note TEXT]
    dsh-jupyter approvals reject RUN_ID --journal runs.sqlite [--note TEXT]

--journal may be left out when the DSH_JOURNAL environment variable names the journal.
list shows one line per run waiting: its run id, the call that asks (position, tool,
arguments), the reason, how long ago it asked, and its host (the process running it)
with whether that process is alive. approve and reject record the answer (answered by
"cli") and say what happens next: a host that is alive picks the decision up at once; a
run whose host is gone waits to be resumed, in Python with the same tools and journal.

Exit status 0 when it was done; 1, with one line saying why, when the journal does not
exist or is not one, the run is unknown or was answered already, or the file stayed
locked; 2 for bad arguments. Nothing here creates a journal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .._help import plain_help
from .._safe_text import escape_text
from ..errors import JournalError
from ..json_value import JsonObject, JsonValue
from ..registry.policy import Approval
from .host import HostState, host_state
from .sqlite import SqliteJournalStore
from .store import ApprovalRecord, JournaledRun, PendingApproval

__all__ = ["ENV_JOURNAL", "add_arguments", "answered_line", "decision_line", "format_age",
           "pending_json", "pending_table", "run_command"]

ENV_JOURNAL = "DSH_JOURNAL"
ARGUMENTS_CHARS = 48
REASON_CHARS = 40
_PREFIX = "dsh-jupyter approvals"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``approvals``' subcommands to ``parser`` (its subcommand parser)."""
    parser.description = plain_help(__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    env = os.environ.get(ENV_JOURNAL) or None
    journal = argparse.ArgumentParser(add_help=False)
    journal.add_argument("--journal", type=Path, metavar="PATH", default=env,
                         required=env is None,
                         help=f"the journal (an SQLite file) the runs are recorded in "
                              f"(default: the {ENV_JOURNAL} environment variable)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list", parents=[journal], help="the runs waiting for an approval, oldest first",
        description="One line per run waiting for an approval, oldest first: run id, call "
                    "(position, tool, arguments), reason, age, host and whether it is alive.")
    listing.add_argument("--json", action="store_true",
                         help="print a JSON array, one object per run waiting")
    for action, done in (("approve", "approved"), ("reject", "rejected")):
        answer = actions.add_parser(
            action, parents=[journal], help=f"{action} the call a run waits on",
            description=f"Record the answer to the approval run RUN_ID waits on ({done}, "
                        "answered by cli), and say what happens next: its host picks it up, "
                        "or the run must be resumed.")
        answer.add_argument("run_id", metavar="RUN_ID",
                            help="the run's id, as approvals list shows it")
        answer.add_argument("--note", default=None, metavar="TEXT",
                            help="a note recorded with the decision")
        if action == "approve":
            answer.add_argument("--all-in-run", action="store_true",
                                help="also approve the run's later calls of the same tool "
                                     "(as the card's \"Approve all <tool> calls in this "
                                     "run\")")
        answer.add_argument("--tools", default=None, metavar="MODULE:ATTR",
                            help="the run's tools (as `dsh-jupyter run --tools` names them): "
                                 "when the run's host is gone, resume the run here, in a "
                                 "fresh kernel, and print its result")
        answer.add_argument("--scope", default=None, metavar="NAME",
                            help="with --tools: the agent scope to resume in (default: the tools' "
                                 "scope of the name the run was made in)")


def run_command(options: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run ``dsh-jupyter approvals`` with parsed ``options``; returns the exit status."""
    out = out or sys.stdout
    try:
        if options.action == "list":
            return asyncio.run(_list(options.journal, as_json=options.json, out=out))
        return asyncio.run(_answer(options.journal, options.run_id,
                                   approved=options.action == "approve", note=options.note,
                                   for_run=getattr(options, "all_in_run", False),
                                   tools=options.tools, scope=options.scope, out=out))
    except JournalError as error:
        print(f"{_PREFIX}: {error}", file=sys.stderr)
        return 1


async def _list(path: Path, *, as_json: bool, out: TextIO) -> int:
    async with SqliteJournalStore(path, create=False) as journal:
        pending = await journal.list_pending()
    states = [host_state(each.host) for each in pending]
    if as_json:
        json.dump(pending_json(pending, states), out, indent=2)
        out.write("\n")
    elif not pending:
        print(f"nothing is waiting for an approval in {path}", file=out)
    else:
        print(pending_table(pending, states, now=time.time()), file=out)
    return 0


async def _answer(path: Path, run_id: str, *, approved: bool, note: str | None,
                  for_run: bool = False, tools: str | None = None, scope: str | None = None,
                  out: TextIO) -> int:
    async with SqliteJournalStore(path, create=False) as journal:
        try:
            record = await journal.resolve(run_id, Approval(
                approved=approved, answered_by="cli", note=note, for_run=for_run))
        except JournalError as error:
            if error.code != "JOURNAL_ANSWERED":
                raise
            # Say who answered, and how: the store's line only knows there is no question.
            run = await journal.load_run(run_id)
            said = None if run is None else answered_line(run, now=time.time())
            print(f"{_PREFIX}: {said or error}", file=sys.stderr)
            return 1
        run = await journal.load_run(run_id)
    assert run is not None  # resolve found it, and runs are never removed
    state = host_state(run.run.host)
    if tools is None or state == "alive":
        print(decision_line(run_id, record, tool=_tool_at(run, record.position),
                            host=run.run.host, state=state), file=out)
        return 0
    print(f"{_decision(record)} call {record.position} ({_cell(_tool_at(run, record.position))})"
          f" of run {_cell(run_id)}; resuming it here with {_cell(tools)}", file=out)
    return await _resume_here(path, run_id, tools, scope, out)


async def _resume_here(path: Path, run_id: str, spec: str, scope: str | None,
                       out: TextIO) -> int:
    """Resume ``run_id`` on the tools ``spec`` names, in a fresh kernel of this process,
    and print its result: 0 when the run succeeded, 1 when it failed."""
    from ..kernel import KernelRuntime
    from ..loading import ToolsSpecError, open_registry

    try:
        async with open_registry(spec) as registry:
            own = registry.journal
            made = SqliteJournalStore(path, create=False) if own is None else None
            if made is not None:
                registry.journal = made
            elif not _same_file(getattr(own, "path", path), path):
                raise ToolsSpecError(f"{spec!r} journals to {getattr(own, 'path', own)}, not "
                                     f"{path}: pass that journal, or a registry without one")
            if registry.mode == "native":
                registry.mode = "code"
            agent = registry.find_scope(scope) if scope is not None else None
            if scope is not None and agent is None:
                raise ToolsSpecError(f"{spec!r} has no scope {scope!r}")
            async with KernelRuntime() as runtime:
                if registry.code_runtime is None:
                    registry.code_runtime = runtime
                try:
                    result = await registry.resume(run_id, agent=agent)
                finally:
                    await registry.aclose()
                    if made is not None:
                        await made.aclose()
    except ToolsSpecError as error:
        print(f"{_PREFIX}: {error}", file=sys.stderr)
        return 2
    status = "failed" if result.is_error else "ok"
    print(f"run_code {status}:\n{result.text}", file=out)
    return 1 if result.is_error else 0


def _same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


# Formatting (pure) -------------------------------------------------------------------------
def pending_table(pending: Sequence[PendingApproval], states: Sequence[HostState], *,
                  now: float) -> str:
    """The runs waiting as a table, one line each, every cell on one line and inert in a
    terminal (control characters escaped), long arguments and reasons shortened."""
    rows = [("RUN", "CALL", "TOOL", "ARGUMENTS", "REASON", "ASKED", "HOST")]
    for each, state in zip(pending, states, strict=True):
        rows.append((_cell(each.run_id), str(each.position), _cell(each.tool),
                     _cell(_json_line(each.arguments), ARGUMENTS_CHARS),
                     _cell(each.reason, REASON_CHARS) if each.reason else "-",
                     format_age(now - each.asked), f"{_cell(each.host) or '?'} ({state})"))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    return "\n".join(  # the last column is not padded: no spaces at the ends of lines
        "  ".join([*(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)),
                   row[-1]]) for row in rows)


def pending_json(pending: Sequence[PendingApproval],
                 states: Sequence[HostState]) -> list[JsonValue]:
    """The runs waiting as JSON: the store's fields (``asked`` in seconds since the epoch)
    and ``host_state``."""
    rows: list[JsonValue] = []
    for each, state in zip(pending, states, strict=True):
        row: JsonObject = {
            "run_id": each.run_id, "position": each.position, "tool": each.tool,
            "arguments": each.arguments, "reason": each.reason, "asked": each.asked,
            "scope": each.scope, "scope_name": each.scope_name, "host": each.host,
            "host_state": state}
        rows.append(row)
    return rows


def format_age(seconds: float) -> str:
    """How long ago, roughly: ``just now``, ``42 s ago``, ``3 min ago``, ``5 h ago``,
    ``2 d ago`` (whole units, rounded down; a time in the future is ``just now``)."""
    whole = int(seconds)
    if whole < 1:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if whole >= size:
            return f"{whole // size} {unit} ago"
    return f"{whole} s ago"


def decision_line(run_id: str, record: ApprovalRecord, *, tool: str, host: str,
                  state: HostState) -> str:
    """The one line ``approve`` and ``reject`` print: what was recorded, and what happens
    next for a host that is ``alive``, ``gone`` or ``unknown``."""
    covers = (f" and every later {_cell(tool)} call"
              if record.decision is not None and record.decision.for_run else "")
    said = (f"{_decision(record)} call {record.position} ({_cell(tool)}){covers} of run "
            f"{_cell(run_id)}")
    if record.decision is not None and record.decision.note:
        said += f", note {_quoted(record.decision.note)}"
    host = _cell(host) or "?"
    resume = ("resume the run with the same tools and this journal, in Python: "
              f"await registry.resume({_quoted(run_id)})")
    if state == "alive":  # a run stopped in a process that goes on stays waiting too
        return (f"{said}; its host {host} is running: it picks the decision up if the run "
                f"still waits there, else resume the run in that process: await "
                f"registry.resume({_quoted(run_id)})")
    if state == "gone":
        return f"{said}; its host {host} is gone: {resume}"
    return (f"{said}; its host {host} cannot be checked from here: if it still runs it "
            f"picks the decision up, else {resume}")


def answered_line(run: JournaledRun, *, now: float) -> str | None:
    """Why a run has no approval to answer, when it was answered: by whom, how and when
    (``None`` when none of its approvals was answered)."""
    answered = [each for each in run.approvals if each.decision is not None]
    if not answered:
        return None
    last = answered[-1]
    assert last.decision is not None
    said = (f"run {_cell(run.run.run_id)} was answered already: call {last.position} "
            f"({_cell(_tool_at(run, last.position))}) {_decision(last)} by "
            f"{_cell(last.decision.answered_by)} "
            f"{format_age(now - (last.answered or now))}")
    if last.decision.note:
        said += f", note {_quoted(last.decision.note)}"
    return f"{said}; the run is {run.status}"


def _decision(record: ApprovalRecord) -> str:
    return "approved" if record.decision is not None and record.decision.approved \
        else "rejected"


def _tool_at(run: JournaledRun, position: int) -> str:
    return next((call.tool for call in run.calls if call.position == position), "?")


def _quoted(text: str) -> str:
    return _cell(json.dumps(text, ensure_ascii=False))


def _json_line(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False)


def _cell(text: str | None, limit: int | None = None) -> str:
    """``text`` on one line, inert in a terminal, at most ``limit`` characters."""
    line = " ".join(escape_text(text or "").split())
    if limit is not None and len(line) > limit:
        return line[:limit - 1] + "…"
    return line
