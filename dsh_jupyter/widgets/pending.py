"""The approvals waiting in a registry's journal, after a restart: :func:`show_pending`.

::

    registry = ToolRegistry(mode="code", code_runtime=runtime, journal="runs.sqlite",
                            approval=NotebookApprovals())
    show_pending(registry)      # or %dsh_approvals (the extension)

One approval card per run waiting in the journal (``registry.journal.list_pending()``):
the tool, its arguments, the reason, the run and its call, how long ago it asked and
whether its host process is gone, with Approve and Reject (and the optional reason the
program receives). A click resolves the question and resumes the run in this kernel:
``registry.resume(run_id, Approval(..., answered_by="user"))`` as a task on the
kernel's running loop (never a nested one). Under the card, the run's own card (the
one ``%%run_code`` and :class:`~.session.LiveView` draw) follows it live, its sub-calls
the journal answered marked ``from the journal``, then shows its result. A run that
cannot be resumed (answered elsewhere first, its host still running) says why in one
line under its card; a registry without a journal says so in one line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from ..abort import AbortController
from ..codemode.resume import resumed_arguments, resumed_scope
from ..durable.command import format_age
from ..durable.host import current_host, host_state
from ..errors import JournalError
from ..events import SessionEvent
from ..registry.policy import Approval
from ..registry.scope import RESERVED_NAME, AgentScope
from . import _ipw
from .approval_card import BY_USER, ApprovalCard, ApprovalChoice, run_note
from .cards import mimebundle
from .doc import Doc, Text
from .published import Published
from .render import html_blocks, html_header
from .run_code import USER_STOP
from .session import CallView

if TYPE_CHECKING:
    from ..codemode.registry import ToolRegistry
    from ..durable.store import PendingApproval
    from ..registry.execution import ScopeView
    from ..registry.results import ToolResult

__all__ = ["NONE_WAITING", "NO_JOURNAL", "PendingApprovals", "PendingRun", "show_pending"]

_log = logging.getLogger(__name__)

TITLE = "Approvals waiting in the journal"
NO_JOURNAL = ("this registry has no journal, so its approvals end with the kernel: "
              "create it with ToolRegistry(..., journal='path/to/journal.sqlite')")
NONE_WAITING = "no approvals are waiting in the journal"
LOADING = "reading the journal…"

RunState = Literal["waiting", "resuming", "done", "failed"]


def show_pending(registry: ToolRegistry) -> PendingApprovals:
    """The approvals waiting in ``registry``'s journal, as a widget (display it, or make
    it a cell's value). Inside a running event loop (a notebook cell) the journal is read
    at once, in a task on that loop; ``await view.wait()`` waits for it (and for the
    runs a click resumed)."""
    view = PendingApprovals(registry)
    view.start()
    return view


def origin_line(pending: PendingApproval, now: float) -> str:
    """Which call asks, since when, and whether the process that ran it is gone."""
    host = pending.host
    if host == current_host():
        where = "asked in this kernel"
    else:
        state = host_state(host)
        where = (f"its host {host} has stopped" if state == "gone"
                 else f"its host {host} still runs: answer it there" if state == "alive"
                 else f"asked on {host}")
    return f"call {pending.position} · asked {format_age(now - pending.asked)} · {where}"


class PendingRun:
    """One run waiting in the journal: its approval card, a status line, and once a click
    answered it, the resumed run's live card. ``state`` is ``waiting``, ``resuming``,
    ``done`` (``result`` holds the run_code result) or ``failed`` (``error``, one line:
    the run could not be resumed; its card can be answered again)."""

    def __init__(self, pending: PendingApproval, *, now: float) -> None:
        self.pending = pending
        # A journaled question is always a sub-call's: "Approve all <tool> calls in this
        # run" is offered, and the resumed run asks no more for that tool.
        self.card = ApprovalCard(name=pending.tool, arguments=pending.arguments,
                                 reason=pending.reason, run_id=pending.run_id, sub_call=True)
        self.card.origin = origin_line(pending, now)
        self.state: RunState = "waiting"
        self.error: str | None = None
        self.result: ToolResult | None = None
        self.view: CallView | None = None
        """The resumed run's card (a :class:`~.session.CallView`), once it resumes."""
        self.choice: ApprovalChoice | None = None
        self.finished = asyncio.Event()
        self._box: Any = None
        self._status: Any = None
        self._run_box: Any = None

    @property
    def run_id(self) -> str:
        return self.pending.run_id

    def _status_blocks(self) -> tuple[Text, ...]:
        if self.state == "resuming" and self.view is None:
            return (Text(text=f"resuming run {self.run_id}…", tone="muted"),)
        if self.state == "failed" and self.error is not None:
            return (Text(text=f"not resumed: {self.error}", tone="error"),)
        return ()

    def documents(self) -> list[Doc]:
        """The approval card (with the status line), then the run's card."""
        asked = self.card.document()
        docs = [replace(asked, blocks=(*asked.blocks, *self._status_blocks()))]
        if self.view is not None:
            docs += [card.document() for card in self.view.cards]
        return docs

    @property
    def widget(self) -> Any:
        if self._box is None:
            w = _ipw.ipywidgets()
            self._status = w.HTML(value=html_blocks(self._status_blocks()))
            self._run_box = w.VBox([self.view.main.widget] if self.view is not None else [])
            self._box = w.VBox([self.card.widget, self._status, self._run_box])
            self._box.add_class("dsh-pending-run")
        return self._box

    def changed(self) -> None:
        if self._box is not None:
            self._status.value = html_blocks(self._status_blocks())
            self._run_box.children = (self.view.main.widget,) if self.view is not None else ()


class PendingApprovals(Published):
    """The runs waiting in a registry's journal (see the module docstring); what
    :func:`show_pending` returns. ``runs`` are in the journal's order (oldest question
    first); ``message`` is the one line shown instead of cards (no journal, none
    waiting, the journal unreadable), else ``None``."""

    def __init__(self, registry: ToolRegistry, *,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.registry = registry
        self.runs: list[PendingRun] = []
        self.message: str | None = LOADING
        self.loaded = False
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loading: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._box: Any = None
        self._head: Any = None
        self._list: Any = None

    def start(self) -> None:
        """Read the journal in a task on the running loop (nothing without one: then
        ``await view.refresh()``)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._loading is None:
            self._loading = loop.create_task(self.refresh())

    async def refresh(self) -> None:
        """Read the journal: a card for every waiting run not shown yet."""
        self._loop = asyncio.get_running_loop()
        store = self.registry.journal
        if store is None:
            self.message = NO_JOURNAL
        else:
            try:
                waiting = await store.list_pending()
            except JournalError as exc:
                self.message = exc.message
            else:
                shown = {run.run_id for run in self.runs}
                now = self._clock()
                for pending in waiting:
                    if pending.run_id not in shown:
                        self._add(PendingRun(pending, now=now))
                self.message = None if self.runs else NONE_WAITING
        self.loaded = True
        self._changed()

    async def wait(self) -> None:
        """Wait until the journal was read and every run a click resumed so far ended."""
        if self._loading is not None:
            await self._loading
        elif not self.loaded:
            await self.refresh()
        for run in list(self.runs):
            if run.choice is not None:
                await run.finished.wait()

    # A click -----------------------------------------------------------------------------
    def _add(self, run: PendingRun) -> None:
        loop = self._loop
        assert loop is not None

        def on_answer(choice: ApprovalChoice) -> None:  # may run outside the loop's thread
            if run.choice is not None:
                return
            run.choice, run.finished = choice, asyncio.Event()
            loop.call_soon_threadsafe(self._resume, run)

        run.card.on_answer = on_answer
        self.runs.append(run)
        if self._list is not None:
            self._list.children = (*self._list.children, run.widget)

    def _resume(self, run: PendingRun) -> None:
        choice = run.choice
        assert choice is not None and self._loop is not None
        approval = (Approval(approved=True, answered_by=BY_USER, note=run_note(run.card.name),
                             for_run=True) if choice.action == "approve-run"
                    else Approval(approved=choice.action != "reject", answered_by=BY_USER,
                                  note=choice.reason))
        run.state, run.error = "resuming", None
        run.changed()
        self._changed()
        task = self._loop.create_task(self._resumed(run, approval))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resumed(self, run: PendingRun, approval: Approval) -> None:
        """Resume ``run`` with ``approval``; its card follows it. Ends with the run's
        state ``done`` or ``failed``, never raising (its error is the card's line)."""
        registry, loop = self.registry, asyncio.get_running_loop()
        stop = AbortController()
        agent: ScopeView | None = None
        view: CallView | None = None
        undo: Callable[[], None] | None = None
        try:
            journaled = await registry.journal.load_run(run.run_id) \
                if registry.journal is not None else None
            if journaled is not None:
                # The scope that made it (the live one of its name after a restart), or a
                # one-line refusal before anything is recorded: never the registry's own.
                agent = resumed_scope(registry, journaled.run)
                call_id = journaled.run.call_id

                def began(event: SessionEvent) -> None:
                    # The run_code call starts once the decision is recorded and the run
                    # claimed: the question is answered.
                    if event["kind"] == "tool/call" and event["call_id"] == call_id:
                        run.card.answered(approval)

                def stop_clicked() -> None:  # a click may arrive outside the loop's thread
                    loop.call_soon_threadsafe(stop.abort, USER_STOP)

                undo = registry.on_event(began)
                view = CallView(registry, call_id, RESERVED_NAME,
                                resumed_arguments(journaled.run),
                                agent=agent if isinstance(agent, AgentScope) else None,
                                stop=stop_clicked)
                run.view = view
                run.changed()
            result = await registry.resume(run.run_id, approval, agent=agent,
                                           signal=stop.signal)
        except JournalError as exc:
            self._failed(run, exc.message)
        except Exception as exc:  # shown as one line; the log keeps the traceback
            _log.exception("run %s could not be resumed", run.run_id)
            self._failed(run, f"{type(exc).__name__}: {exc}")
        else:
            run.card.answered(approval)
            run.state, run.result = "done", result
        finally:
            if undo is not None:
                undo()
            if view is not None:
                view.dispose()
            run.changed()
            run.finished.set()
            self._changed()

    def _failed(self, run: PendingRun, error: str) -> None:
        run.state, run.error, run.choice = "failed", error, None
        if run.card.answer is None:
            run.view = None  # the run never started: no card for it

    # Display -----------------------------------------------------------------------------
    def _head_doc(self) -> Doc:
        count = f" ({len(self.runs)})" if self.runs else ""
        blocks = (Text(text=self.message, tone="muted"),) if self.message else ()
        return Doc(title=f"{TITLE}{count}", kind="pending", blocks=blocks)

    def documents(self) -> list[Doc]:
        docs = [self._head_doc()]
        for run in self.runs:
            docs += run.documents()
        return docs

    @property
    def widget(self) -> Any:
        if self._box is None:
            w = _ipw.ipywidgets()
            self._head = w.HTML(value=self._head_html())
            self._list = w.VBox([run.widget for run in self.runs])
            self._box = w.VBox([self._head, self._list])
            self._box.add_class("dsh-pending")
        return self._box

    def _head_html(self) -> str:
        doc = self._head_doc()
        return html_header(doc) + html_blocks(doc.blocks)

    def _repr_mimebundle_(self, include: Collection[str] | None = None,
                          exclude: Collection[str] | None = None) -> dict[str, Any]:
        return mimebundle(self.documents(), lambda: self.widget, include=include,
                          exclude=exclude)

    def _changed(self) -> None:
        if self._head is not None:
            self._head.value = self._head_html()
        # Journal readings and resumed runs reach the text fallbacks papermill keeps.
        self._republish()
