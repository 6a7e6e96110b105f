"""Cards: one tool call as an ipywidget that updates in place, plus the text/plain,
text/html and text/markdown fallbacks that papermill, nbconvert and nbval see.

A card takes render intents and the durable result, never the live value::

    card = ToolCard(name="grep", call=GenericCallView(title="grep TODO"))
    display(card)                      # running
    card.finish(durable, SearchResultView(...), duration=0.2)   # updates in place
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from ..registry.presentation import CallView, DurableResult, ResultView
from . import _ipw
from .doc import Block, Doc, Status, Text
from .render import html_blocks, html_header, to_html, to_markdown, to_plain
from .views import call_blocks, error_blocks, generic_result_blocks, result_blocks

if TYPE_CHECKING:
    from .approval_card import ApprovalCard

CARD_BORDER = "1px solid #d0d7de"


def mimebundle(docs: Sequence[Doc], widget: Any = None, *,
               include: Collection[str] | None = None,
               exclude: Collection[str] | None = None) -> dict[str, Any]:
    """text/plain, text/html, text/markdown for ``docs`` (and the widget view of
    ``widget``, a zero-argument callable building it, when one is given)."""
    def wanted(mime: str) -> bool:
        return (include is None or mime in include) and (exclude is None or mime not in exclude)

    bundle: dict[str, Any] = {}
    if wanted("text/plain"):
        bundle["text/plain"] = "\n\n".join(to_plain(doc) for doc in docs) or "(no tool calls)"
    if wanted("text/html"):
        bundle["text/html"] = ("".join(to_html(doc) for doc in docs)
                               or '<div class="dsh-empty">(no tool calls)</div>')
    if wanted("text/markdown"):
        bundle["text/markdown"] = ("\n\n---\n\n".join(to_markdown(doc) for doc in docs)
                                   or "*(no tool calls)*")
    if widget is not None and wanted(_ipw.WIDGET_MIME):
        bundle[_ipw.WIDGET_MIME] = _ipw.widget_view(widget())
    return bundle


class Card:
    """Base of every card: a document, a lazily built widget, and an approval slot."""

    kind: ClassVar[str] = "card"
    track_views: ClassVar[bool] = False
    """Ask the front end to report rendered views (ipywidgets' ``_view_count``)."""

    def __init__(self) -> None:
        self._widget: Any = None
        self._html: Any = None
        self._approval_box: Any = None
        self.approval: ApprovalCard | None = None
        self.trace: tuple[str, str] | None = None
        """The call's trace and span ids (tracing on), shown in the widget's header."""

    # The document ----------------------------------------------------------------
    def _document(self) -> Doc:
        raise NotImplementedError

    def document(self) -> Doc:
        """The card as a document, the approval (if any) included."""
        doc = self._document()
        if self.approval is None:
            return doc
        return replace(doc, blocks=(*doc.blocks, self.approval.summary()))

    def __str__(self) -> str:
        return to_plain(self.document())

    def _repr_mimebundle_(self, include: Collection[str] | None = None,
                          exclude: Collection[str] | None = None) -> dict[str, Any]:
        return mimebundle([self.document()], lambda: self.widget,
                          include=include, exclude=exclude)

    # The widget ------------------------------------------------------------------
    @property
    def widget(self) -> Any:
        """The ipywidget (built on first use, then updated in place)."""
        if self._widget is None:
            w = _ipw.ipywidgets()
            self._approval_box = w.VBox()
            extra = {"_view_count": 0} if self.track_views else {}
            self._widget = w.VBox([*self._parts(), self._approval_box],
                                  layout=self._frame(), **extra)
            self._widget.add_class("dsh-card-widget")
            self._widget.add_class(f"dsh-{self.kind}")
            if self.approval is not None:
                self._approval_box.children = (self.approval.widget,)
        return self._widget

    def _frame(self) -> Any:
        return _ipw.ipywidgets().Layout(border=CARD_BORDER, padding="4px 10px", margin="4px 0")

    def _parts(self) -> list[Any]:
        """The widgets above the approval slot; by default one HTML for the document."""
        self._html = _ipw.ipywidgets().HTML(value=self._widget_html())
        return [self._html]

    def _widget_html(self) -> str:
        doc = self._document()
        return html_header(doc, timing=True) + html_blocks(doc.blocks, timing=True)

    def _changed(self) -> None:
        """Bring a built widget up to date (subclasses with more parts extend this)."""
        if self._html is not None:
            self._html.value = self._widget_html()

    def attach_approval(self, approval: ApprovalCard) -> None:
        """Show ``approval`` (its buttons, then its answer) inside this card."""
        self.approval = approval
        if self._approval_box is not None:
            self._approval_box.children = (approval.widget,)


class _CallCard(Card):
    """A card for one call: running until its durable result arrives."""

    durable: DurableResult | None

    @property
    def status(self) -> Status:
        if self.durable is None:
            return "running"
        return "error" if self.durable.is_error else "ok"


class ToolCard(_CallCard):
    """A top-level call: the call view, then the result view (or a fallback)."""

    kind = "tool"

    def __init__(self, *, name: str, call: CallView) -> None:
        super().__init__()
        self.name = name
        self.call = call
        self.durable: DurableResult | None = None
        self.result: ResultView | None = None
        self.duration: float | None = None
        self.progress: str | None = None
        """The last progress the tool reported while running (``2/5: copying``)."""

    def report_progress(self, progress: float, total: float | None,
                        message: str | None) -> None:
        """Show how far the running call has come (from a ``tool/progress`` event)."""
        done = f"{progress:g}/{total:g}" if total is not None else f"{progress:g}"
        self.progress = f"{done}: {message}" if message else done
        self._changed()

    def finish(self, durable: DurableResult, result: ResultView | None = None, *,
               duration: float | None = None) -> None:
        """Show the outcome: ``result`` (the presenter's view) or the generic fallback."""
        self.durable, self.result, self.duration = durable, result, duration
        self._changed()

    def _document(self) -> Doc:
        blocks: tuple[Block, ...] = call_blocks(self.call)
        durable = self.durable
        if durable is None and self.progress is not None:
            blocks += (Text(text=f"progress {self.progress}", tone="muted"),)
        if durable is not None:
            if durable.is_error:
                blocks += error_blocks(durable)
            if self.result is not None:
                blocks += result_blocks(self.result)
            elif not durable.is_error:
                blocks += generic_result_blocks(durable)
        return Doc(title=self.call.title, kind=self.kind, status=self.status,
                   status_detail=durable.error_code if durable and durable.is_error else None,
                   subtitle=self.name if self.name != self.call.title else None,
                   blocks=blocks, duration=self.duration, trace=self.trace)
