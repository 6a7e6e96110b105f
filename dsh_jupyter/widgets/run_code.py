"""The run_code card: the description, the program (highlighted, collapsible), one
nested card per sub-call as it starts and settles, then the logs and result or
the failure kind and message."""

from __future__ import annotations

import re
from typing import Any

from ..json_value import JsonValue
from ..registry.code_mode import NO_OUTPUT
from ..registry.presentation import DurableResult
from ..registry.results import content_text
from ..registry.scope import RESERVED_NAME
from . import _ipw
from .cards import _CallCard
from .doc import Block, Code, Doc, Field, Section, Text
from .render import html_blocks, html_header
from .text import plural, summarize_arguments
from .views import error_blocks

OPEN_PROGRAM_LINES = 15
# code_mode.failure_message: "code run failed (<kind>): <message>[\nCaptured output:\n<logs>]"
_FAILURE = re.compile(r"code run failed \(([a-z-]+)\): (.*)", re.S)
_CAPTURED = "\nCaptured output:\n"


class SubCallCard(_CallCard):
    """One ``await tools.x(...)`` of a program: name, argument summary, status,
    duration (widget only) and the error message."""

    kind = "sub-call"

    def __init__(self, *, name: str, arguments: JsonValue) -> None:
        super().__init__()
        self.name = name
        self.arguments = arguments
        self.durable: DurableResult | None = None
        self.duration: float | None = None

    def finish(self, durable: DurableResult, *, duration: float | None = None) -> None:
        self.durable, self.duration = durable, duration
        self._changed()

    def _document(self) -> Doc:
        durable = self.durable
        blocks: tuple[Block, ...] = ()
        if durable is not None and durable.is_error:
            message = durable.error_message or content_text(durable.content)
            blocks = (Text(text=message, tone="error"),)
        return Doc(title=self.name, kind=self.kind, status=self.status,
                   status_detail=durable.error_code if durable and durable.is_error else None,
                   subtitle=summarize_arguments(self.arguments) or None, blocks=blocks,
                   duration=self.duration)

    def _frame(self) -> Any:
        return _ipw.ipywidgets().Layout(border_left="3px solid #d0d7de", padding="0 0 0 8px",
                                        margin="2px 0")


class RunCodeCard(_CallCard):
    """A ``run_code`` call. Sub-calls are keyed by their call id."""

    kind = "run-code"

    def __init__(self, *, arguments: JsonValue) -> None:
        super().__init__()
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
        self._outcome: Any = None

    # Live updates ----------------------------------------------------------------
    def start_call(self, call_id: str, name: str, arguments: JsonValue) -> SubCallCard:
        card = self.calls.get(call_id)
        if card is None:
            card = self.calls[call_id] = SubCallCard(name=name, arguments=arguments)
            if self._calls_box is not None:
                self._calls_box.children = (*self._calls_box.children, card.widget)
        return card

    def finish(self, durable: DurableResult, *, duration: float | None = None) -> None:
        self.durable, self.duration = durable, duration
        self._changed()

    # The document ----------------------------------------------------------------
    def _program(self) -> Code:
        lines = self.program.count("\n") + 1
        return Code(text=self.program, lang="python", label=f"program ({plural(lines, 'line')})",
                    collapsible=True, open=lines <= OPEN_PROGRAM_LINES)

    def _calls_section(self) -> tuple[Block, ...]:
        if not self.calls:
            return ()
        return (Section(title=f"tool calls ({len(self.calls)})",
                        blocks=tuple(card.document() for card in self.calls.values())),)

    def _outcome_blocks(self) -> tuple[Block, ...]:
        durable = self.durable
        if durable is None:
            return ()
        if not durable.is_error:
            return _success_blocks(durable)
        failure = _FAILURE.fullmatch(durable.error_message or "")
        if durable.error_code == "CODE_RUN_FAILED" and failure is not None:
            kind, rest = failure.groups()
            message, _, logs = rest.partition(_CAPTURED)
            blocks: list[Block] = [Field(label="failure", value=kind, tone="error"),
                                   Code(text=message, label="message")]
            if logs:
                blocks.append(Code(text=logs, label="logs"))
            return tuple(blocks)
        return error_blocks(durable)

    def _doc(self, blocks: tuple[Block, ...]) -> Doc:
        durable = self.durable
        return Doc(title=self.description, kind=self.kind, status=self.status,
                   status_detail=durable.error_code if durable and durable.is_error else None,
                   subtitle=RESERVED_NAME, blocks=blocks, duration=self.duration)

    def _document(self) -> Doc:
        return self._doc((self._program(), *self._calls_section(), *self._outcome_blocks()))

    # The widget ------------------------------------------------------------------
    def _parts(self) -> list[Any]:
        w = _ipw.ipywidgets()
        self._header = w.HTML(value=html_header(self._doc(()), timing=True))
        program = w.HTML(value=html_blocks((self._program(),)))
        self._calls_box = w.VBox([card.widget for card in self.calls.values()])
        self._calls_box.add_class("dsh-calls")
        self._outcome = w.HTML(value=html_blocks(self._outcome_blocks()))
        return [self._header, program, self._calls_box, self._outcome]

    def _changed(self) -> None:
        if self._header is not None:
            self._header.value = html_header(self._doc(()), timing=True)
            self._outcome.value = html_blocks(self._outcome_blocks())


def _success_blocks(durable: DurableResult) -> tuple[Block, ...]:
    meta = durable.presentation_meta
    logs = meta.get("logs") if isinstance(meta, dict) else None
    if isinstance(meta, dict) and isinstance(logs, list):
        # A meta of {"logs": [...], "result": "<rendered>"} separates the two parts.
        blocks: list[Block] = []
        if logs:
            blocks.append(Code(text="\n".join(str(line) for line in logs), label="logs"))
        result = meta.get("result")
        if isinstance(result, str):
            blocks.append(Code(text=result, label="result"))
        return tuple(blocks) or (Text(text="(no output)", tone="muted"),)
    text = content_text(durable.content)
    if not text or text == NO_OUTPUT:
        return (Text(text="(no output)", tone="muted"),)
    return (Code(text=text, label="output"),)
