"""Helpers for widget tests: durable results and walking a widget tree."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsh_jupyter.registry import DurableResult

PAYLOAD = "<img src=x onerror=alert(1)>"


def ok(text: str = "", meta: Any = None) -> DurableResult:
    return DurableResult(is_error=False, content=({"type": "text", "text": text},),
                         presentation_meta=meta)


def failed(message: str, code: str | None = "TOOL_ERROR") -> DurableResult:
    return DurableResult(is_error=True, content=({"type": "text", "text": f"Error: {message}"},),
                         error_message=message, error_code=code)


def walk(widget: Any) -> Iterator[Any]:
    yield widget
    for child in getattr(widget, "children", ()):
        yield from walk(child)


def widget_html(widget: Any) -> str:
    """Every HTML fragment the widget tree shows, in order."""
    return "".join(w.value for w in walk(widget) if type(w).__name__ == "HTML")


def buttons(widget: Any) -> dict[str, Any]:
    return {w.description: w for w in walk(widget) if type(w).__name__ == "Button"}
