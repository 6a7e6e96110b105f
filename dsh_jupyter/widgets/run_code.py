"""The run_code card: the description, the program (highlighted, collapsible), one
nested card per sub-call as it starts and settles (past :data:`SHOWN_SUB_CALLS`, the
rest fold into one row that counts them), then the logs and result or the failure kind
and message."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..codemode.run_code import CAPTURED_OUTPUT, NO_OUTPUT
from ..json_value import JsonValue
from ..registry.presentation import DurableResult
from ..registry.results import content_text
from ..registry.scope import RESERVED_NAME
from . import _ipw
from .cards import _CallCard
from .displays import display_block
from .doc import Block, Code, Doc, Field, File, Fold, Section, Status, Text
from .render import html_blocks, html_header
from .text import plural, summarize_arguments
from .views import error_blocks

OPEN_PROGRAM_LINES = 15
LIVE_LOG_LINES = 200
SHOWN_SUB_CALLS = 10
"""Sub-call rows a run_code card shows; the rest fold into one row, ``… and 124 more
(120 ok, 4 failed)``, that opens on them (a sub-call asking for approval opens it)."""
_STATUS_WORDS: tuple[tuple[Status, str], ...] = (
    ("ok", "ok"), ("error", "failed"), ("running", "running"), ("waiting", "waiting"),
    ("queued", "queued"))
FROM_JOURNAL = "from the journal"
"""A resumed run's sub-call its journal answered (the tool was not called again)."""
USER_STOP = "stopped by the user"
"""The abort reason of a card's Stop button."""
# code_mode.failure_message: "code run failed (<kind>): <message>[\nCaptured output:\n<logs>]"
_FAILURE = re.compile(r"code run failed \(([a-z-]+)\): (.*)", re.S)


class SubCallCard(_CallCard):
    """One ``await tools.x(...)`` of a program: name, argument summary, status,
    durations (widget only) and the error message. In a resumed run a call its journal
    answered (``replayed``: the tool was not called again) says ``from the journal``.

    A started call is ``queued`` until its policy lets it through (``waiting`` while
    its own approval is pending; ``blocked_by`` names a sibling whose approval it
    waits behind), then ``running``; its duration counts from then, and the time
    before shows as waited."""

    kind = "sub-call"

    def __init__(self, *, name: str, arguments: JsonValue, number: int = 0) -> None:
        super().__init__()
        self.name = name
        self.arguments = arguments
        self.number = number
        self.durable: DurableResult | None = None
        self.duration: float | None = None
        self.waited: float | None = None
        self.started: float | None = None
        self.running: float | None = None
        self.asking = False
        self.blocked_by: str | None = None
        self.replayed = False
        self.on_change: Callable[[], None] | None = None
        """Told after every change (its run_code card counts the folded calls)."""

    @property
    def status(self) -> Status:
        if self.durable is not None:
            return "error" if self.durable.is_error else "ok"
        if self.asking:
            return "waiting"
        return "running" if self.running is not None else "queued"

    def _changed(self) -> None:
        super()._changed()
        if self.on_change is not None:
            self.on_change()

    def dispatched(self, time: float) -> None:
        """Its policy let it through at ``time``: it runs now."""
        self.running = time
        self.asking = False
        self.blocked_by = None
        self._changed()

    def finish(self, durable: DurableResult, *, duration: float | None = None,
               waited: float | None = None, replayed: bool = False) -> None:
        """Its outcome; ``replayed`` when the run's journal gave it (a resumed run)."""
        self.durable, self.duration, self.waited = durable, duration, waited
        self.replayed = replayed
        self.asking = False
        self.blocked_by = None
        self._changed()

    def _detail(self) -> str | None:
        durable = self.durable
        if durable is not None:
            code = durable.error_code if durable.is_error else None
            if self.replayed:
                return f"{code}, {FROM_JOURNAL}" if code else FROM_JOURNAL
            return code
        if self.asking:
            return "approval"
        if self.running is None and self.blocked_by is not None:
            return f"waiting for approval of {self.blocked_by}"
        return None

    def _document(self) -> Doc:
        durable = self.durable
        blocks: tuple[Block, ...] = ()
        if durable is not None and durable.is_error:
            message = durable.error_message or content_text(durable.content)
            blocks = (Text(text=message, tone="error"),)
        return Doc(title=self.name, kind=self.kind, status=self.status,
                   status_detail=self._detail(),
                   subtitle=summarize_arguments(self.arguments) or None, blocks=blocks,
                   duration=self.duration, waited=self.waited, trace=self.trace)

    def _frame(self) -> Any:
        return _ipw.ipywidgets().Layout(border_left="3px solid #d0d7de", padding="0 0 0 8px",
                                        margin="2px 0")


class RunCodeCard(_CallCard):
    """A ``run_code`` call. Sub-calls are keyed by their call id.

    While the program runs, :meth:`add_output` shows its log lines (the last
    :data:`LIVE_LOG_LINES`) and displays as they come; the result replaces them. With
    ``stop`` (a callable) the widget has a Stop button that calls it."""

    kind = "run-code"

    def __init__(self, *, arguments: JsonValue, stop: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.stop = stop
        self.live_logs: list[str] = []
        self.live_lines = 0
        self.displays: list[tuple[int, dict[str, Any]]] = []
        self.stopped_by: str | None = None
        self._stop_button: Any = None
        self._live: Any = None
        self._chunk: Any = None
        self._chunk_lines: list[str] = []
        self._chunk_skipped = 0
        args = arguments if isinstance(arguments, dict) else {}
        description, code = args.get("description"), args.get("code")
        self.description = description if isinstance(description, str) and description.strip() \
            else "Run code"
        self.program = code if isinstance(code, str) else ""
        self.calls: dict[str, SubCallCard] = {}
        self.durable: DurableResult | None = None
        self.duration: float | None = None
        self._header: Any = None
        self._calls_box: Any = None
        self._more_button: Any = None
        self._more_box: Any = None
        self.unfolded = False
        """The widget shows every sub-call (the text fallbacks always fold)."""
        self._outcome: Any = None

    # Live updates ----------------------------------------------------------------
    def start_call(self, call_id: str, name: str, arguments: JsonValue) -> SubCallCard:
        card = self.calls.get(call_id)
        if card is None:
            card = self.calls[call_id] = SubCallCard(name=name, arguments=arguments,
                                                     number=len(self.calls) + 1)
            card.blocked_by = self._asking()
            if card.number > SHOWN_SUB_CALLS:
                card.on_change = self._fold_changed
            if self._calls_box is not None and card.number <= SHOWN_SUB_CALLS:
                self._calls_box.children = (*self._calls_box.children, card.widget)
            elif self._calls_box is not None:
                self._more_box.children = (*self._more_box.children, card.widget)
                self._fold_changed()
        return card

    def origin(self, call_id: str) -> str:
        """Where sub-call ``call_id`` comes from, for its approval prompt."""
        card = self.calls.get(call_id)
        where = f"from the program {self.description!r}"
        if card is None:
            return where
        return f"{where} · call {card.number} of {len(self.calls)} so far"

    def approval_asked(self, call_id: str, asking: bool) -> None:
        """Sub-call ``call_id`` waits for an approval (or no longer does): it and the
        calls queued behind it say so."""
        card = self.calls.get(call_id)
        if card is None:
            return
        card.asking = asking
        if asking and card.number > SHOWN_SUB_CALLS:
            self.unfold(True)  # its Approve / Reject buttons must be in view
        card._changed()
        blocker = self._asking()
        for other in self.calls.values():
            if other is not card and other.running is None and other.durable is None \
                    and other.blocked_by != blocker:
                other.blocked_by = blocker
                other._changed()

    def _asking(self) -> str | None:
        return next((c.name for c in self.calls.values() if c.asking and c.durable is None),
                    None)

    def add_output(self, lines: list[str], display: dict[str, Any] | None = None) -> None:
        """Output of the running program: completed log lines, then maybe a display."""
        self.live_lines += len(lines)
        self.live_logs.extend(lines)
        del self.live_logs[:-LIVE_LOG_LINES]
        if display is not None:
            self.displays.append((self.live_lines, display))
        if self._live is not None:
            self._live_widget_add(lines, display)

    def finish(self, durable: DurableResult, *, duration: float | None = None,
               stopped_by: str | None = None) -> None:
        """The result; ``stopped_by`` (``"the user"``) when someone stopped it."""
        self.durable, self.duration = durable, duration
        if stopped_by is not None:
            self.stopped_by = stopped_by
        self._changed()

    # The document ----------------------------------------------------------------
    def _program(self) -> Code:
        lines = self.program.count("\n") + 1
        return Code(text=self.program, lang="python", label=f"program ({plural(lines, 'line')})",
                    collapsible=True, open=lines <= OPEN_PROGRAM_LINES)

    def _calls_section(self) -> tuple[Block, ...]:
        if not self.calls:
            return ()
        cards = list(self.calls.values())
        blocks: tuple[Block, ...] = tuple(card.document() for card in cards[:SHOWN_SUB_CALLS])
        folded = cards[SHOWN_SUB_CALLS:]
        if folded:
            blocks += (Fold(summary=_fold_summary(folded),
                            blocks=tuple(card.document() for card in folded)),)
        return (Section(title=f"tool calls ({len(self.calls)})", blocks=blocks),)

    def unfold(self, unfolded: bool = True) -> None:
        """Show every sub-call in the widget (or only the first :data:`SHOWN_SUB_CALLS`)."""
        self.unfolded = unfolded
        self._fold_changed()

    def _fold_changed(self) -> None:
        if self._more_button is None:
            return
        folded = list(self.calls.values())[SHOWN_SUB_CALLS:]
        self._more_button.layout.display = None if folded else "none"
        self._more_box.layout.display = None if self.unfolded else "none"
        self._more_button.description = (
            f"hide the last {len(folded)} ({_status_counts(folded)})" if self.unfolded
            else _fold_summary(folded))

    def finish_stopped(self, by: str) -> None:
        """Say who stopped the program (``"the user"``), once its result is in."""
        self.stopped_by = by
        self._changed()

    def _live_blocks(self) -> tuple[Block, ...]:
        """While running: the log lines so far and the displays, in order."""
        if self.durable is not None:
            return ()
        earlier = self.live_lines - len(self.live_logs)
        blocks = _interleave(self.live_logs, self.displays, first=earlier)
        if earlier:
            blocks = (Text(text=f"… {plural(earlier, 'earlier line')}", tone="muted"), *blocks)
        return blocks

    def _failure(self) -> tuple[str, str, str] | None:
        """(kind, message, logs) of a failed program, if this is one."""
        durable = self.durable
        failure = _FAILURE.fullmatch(durable.error_message or "") if durable else None
        if durable is None or durable.error_code != "CODE_RUN_FAILED" or failure is None:
            return None
        kind, rest = failure.groups()
        message, _, logs = rest.partition(CAPTURED_OUTPUT)
        return kind, message, logs

    def _outcome_blocks(self) -> tuple[Block, ...]:
        durable = self.durable
        if durable is None:
            return ()
        if not durable.is_error:
            return _success_blocks(durable, self.displays)
        failed = self._failure()
        if failed is None:
            return error_blocks(durable)
        kind, message, logs = failed
        blocks: list[Block] = []
        if kind == "abort":
            blocks.append(Text(text=self._stopped_text(message), tone="muted"))
        else:
            blocks += [Field(label="failure", value=kind, tone="error"),
                       Code(text=message, label="message")]
        lines = logs.split("\n") if logs else []
        blocks += _interleave(lines, self.displays)
        return tuple(blocks)

    def _stopped_text(self, reason: str) -> str:
        """``Stopped by the user after 2.1 s.``, else ``Stopped (<reason>) after ...``."""
        if self.stopped_by is not None:
            what = f"Stopped by {self.stopped_by}"
        elif reason.startswith("stopped "):
            what = reason[0].upper() + reason[1:]
        else:
            what = f"Stopped ({reason})"
        after = f" after {self.duration:.1f} s" if self.duration is not None else ""
        return f"{what}{after}."

    def _status(self) -> tuple[Status, str | None]:
        durable = self.durable
        if durable is None:
            return self.status, None
        failed = self._failure()
        if failed is not None and failed[0] == "abort":
            return "stopped", None
        return self.status, durable.error_code if durable.is_error else None

    def _doc(self, blocks: tuple[Block, ...]) -> Doc:
        status, detail = self._status()
        return Doc(title=self.description, kind=self.kind, status=status, status_detail=detail,
                   subtitle=RESERVED_NAME, blocks=blocks, duration=self.duration,
                   trace=self.trace)

    def _document(self) -> Doc:
        return self._doc((self._program(), *self._calls_section(), *self._live_blocks(),
                          *self._outcome_blocks()))

    # The widget ------------------------------------------------------------------
    def _parts(self) -> list[Any]:
        w = _ipw.ipywidgets()
        self._header = w.HTML(value=html_header(self._doc(()), timing=True))
        # A flex button stretches its icon to the button's height, which puts the glyph
        # at the top edge: centre it.
        self._stop_button = w.Button(description="Stop", icon="stop", button_style="warning",
                                     tooltip="Stop the program (its output so far is kept)",
                                     layout=w.Layout(width="auto", align_items="center"))
        self._stop_button.add_class("dsh-stop")
        self._stop_button.on_click(lambda _button: self._stop_clicked())
        self._stop_button.layout.display = "flex" if self._stoppable() else "none"
        program = w.HTML(value=html_blocks((self._program(),)))
        cards = list(self.calls.values())
        self._calls_box = w.VBox([card.widget for card in cards[:SHOWN_SUB_CALLS]])
        self._calls_box.add_class("dsh-calls")
        self._more_button = w.Button(layout=w.Layout(width="auto"),
                                     tooltip="Show or hide the rest of the tool calls")
        self._more_button.add_class("dsh-more")
        self._more_button.on_click(lambda _button: self.unfold(not self.unfolded))
        self._more_box = w.VBox([card.widget for card in cards[SHOWN_SUB_CALLS:]])
        self._more_box.add_class("dsh-calls-more")
        self._fold_changed()
        so_far = self._live_blocks()  # output before the widget was built, drawn once
        self._live = w.VBox([w.HTML(value=html_blocks(so_far))] if so_far else [])
        self._live.add_class("dsh-live")
        self._chunk, self._chunk_lines, self._chunk_skipped = None, [], 0
        self._outcome = w.HTML(value=html_blocks(self._outcome_blocks()))
        top = w.HBox([self._header, self._stop_button],
                     layout=w.Layout(justify_content="space-between", align_items="center"))
        return [top, program, self._calls_box, self._more_button, self._more_box, self._live,
                self._outcome]

    def _live_widget_add(self, lines: list[str], display: dict[str, Any] | None) -> None:
        """The live area grows by widgets: the lines since the last display update one
        HTML (its last :data:`LIVE_LOG_LINES`), and a display gets an HTML of its own,
        drawn once (an image is not sent again with every line that follows)."""
        w = _ipw.ipywidgets()
        if self._chunk is None:
            self._chunk, self._chunk_lines, self._chunk_skipped = w.HTML(), [], 0
            self._live.children = (*self._live.children, self._chunk)
        if lines:
            self._chunk_lines.extend(lines)
            extra = len(self._chunk_lines) - LIVE_LOG_LINES
            if extra > 0:
                del self._chunk_lines[:extra]
                self._chunk_skipped += extra
            blocks: list[Block] = []
            if self._chunk_skipped:
                blocks.append(Text(text=f"… {plural(self._chunk_skipped, 'earlier line')}",
                                   tone="muted"))
            blocks.append(Code(text="\n".join(self._chunk_lines), label="logs"))
            self._chunk.value = html_blocks(blocks)
        if display is not None:
            shown = w.HTML(value=html_blocks((display_block(display),)))
            self._chunk = None
            self._live.children = (*self._live.children, shown)

    def _stoppable(self) -> bool:
        return self.stop is not None and self.durable is None

    def _stop_clicked(self) -> None:
        if self._stoppable() and self.stop is not None and not self._stop_button.disabled:
            self._stop_button.disabled = True
            self._stop_button.description = "Stopping…"
            self.stop()

    def _changed(self) -> None:
        if self._header is not None:
            self._header.value = html_header(self._doc(()), timing=True)
            if self.durable is not None and self._live.children:
                self._live.children = ()  # the outcome shows the logs and displays now
            self._outcome.value = html_blocks(self._outcome_blocks())
            if not self._stoppable():
                self._stop_button.layout.display = "none"


def _fold_summary(folded: list[SubCallCard]) -> str:
    """``… and 124 more (120 ok, 4 failed)``: the folded calls, counted by status."""
    return f"… and {len(folded)} more ({_status_counts(folded)})"


def _status_counts(cards: list[SubCallCard]) -> str:
    return ", ".join(f"{n} {word}" for status, word in _STATUS_WORDS
                     if (n := sum(card.status == status for card in cards)))


def _interleave(lines: list[str], displays: list[tuple[int, dict[str, Any]]], *,
                first: int = 0) -> tuple[Block, ...]:
    """Log lines (numbered from ``first``) with the displays shown after line N."""
    blocks: list[Block] = []
    start = 0
    for after, display in displays:
        cut = min(max(after - first, start), len(lines))
        if cut > start:
            blocks.append(Code(text="\n".join(lines[start:cut]), label="logs"))
            start = cut
        if after >= first:
            blocks.append(display_block(display))
    if start < len(lines):
        blocks.append(Code(text="\n".join(lines[start:]), label="logs"))
    return tuple(blocks)


def _success_blocks(durable: DurableResult,
                    displays: list[tuple[int, dict[str, Any]]]) -> tuple[Block, ...]:
    meta = durable.presentation_meta
    logs = meta.get("logs") if isinstance(meta, dict) else None
    if isinstance(meta, dict) and isinstance(logs, list):
        # A meta of {"logs": [...], "result": "<rendered>"} separates the two parts.
        blocks = list(_interleave([str(line) for line in logs], displays))
        result = meta.get("result")
        if isinstance(result, str):
            blocks.append(Code(text=result, label="result"))
        blocks += _files_blocks(meta.get("files"))
        type_check = meta.get("type_check")  # check_programs="warn" found problems
        if isinstance(type_check, list) and type_check:
            blocks.append(Code(text="\n".join(map(str, type_check)), label="type check"))
        return tuple(blocks) or (Text(text="(no output)", tone="muted"),)
    text = content_text(durable.content)
    shown = tuple(display_block(display) for _, display in displays)
    if not text or text == NO_OUTPUT:
        return shown or (Text(text="(no output)", tone="muted"),)
    return (Code(text=text, label="output"), *shown)


def _files_blocks(files: JsonValue) -> list[Block]:
    """The run's files (``presentation_meta["files"]``, see ``codemode.run_files``): one
    row each (a download link when the meta holds the bytes), then text previews."""
    if not isinstance(files, list) or not files:
        return []
    rows: list[Block] = []
    previews: list[Block] = []
    for entry in files:
        if not isinstance(entry, dict):
            continue
        name, size, mime = str(entry.get("name")), entry.get("size"), entry.get("mime_type")
        note = f"{size} bytes, {mime}" if isinstance(size, int) else str(mime)
        reason = entry.get("not_collected")
        if isinstance(reason, str):
            note += f"; not collected: {reason}"
        data = entry.get("data")
        rows.append(File(name=name, note=note, data=data if isinstance(data, str) else None))
        preview = entry.get("preview")
        if isinstance(preview, str):
            previews.append(Code(text=preview, label=f"{name} (first lines)",
                                 collapsible=True, open=False))
    return [Section(title=f"files ({len(rows)})", blocks=(*rows, *previews))]
