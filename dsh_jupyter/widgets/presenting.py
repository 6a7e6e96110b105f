"""Asking a definition for its render intents, and finding the definition.

Presenters get the call's arguments and the *durable* result only, so a card
reads the same live and on replay. A presenter that raises or returns something
else (an old log's arguments, a bug) selects the generic card instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeAlias, cast

from ..events import CodeDispatchEvent, ToolResultEvent
from ..json_value import JsonValue
from ..registry.presentation import (
    CallView,
    DiffCallView,
    DiffResultView,
    DurableResult,
    GenericCallView,
    GenericResultView,
    ReadResultView,
    ResultView,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    WebResultView,
)
from ..registry.results import ContentBlock, ToolResult
from .text import json_text

if TYPE_CHECKING:
    from ..codemode.registry import ToolRegistry
    from ..registry.definition import ToolDefinition
    from ..registry.scope import AgentScope

_log = logging.getLogger(__name__)

DefinitionLookup: TypeAlias = Callable[[str, "str | None"], "ToolDefinition | None"]
"""``(tool name, agent name or None) -> definition``; ``None`` selects generic cards."""

_CALL_VIEWS = (GenericCallView, TerminalCallView, DiffCallView)
_RESULT_VIEWS = (GenericResultView, TerminalResultView, DiffResultView, SearchResultView,
                 ReadResultView, WebResultView)


def present_call(name: str, arguments: JsonValue,
                 definition: ToolDefinition | None) -> CallView:
    """The definition's call view, or a generic one titled with the tool name."""
    if definition is not None and definition.present_call is not None:
        try:
            view = definition.present_call(arguments)
        except Exception:
            _log.debug("present_call of %s failed; using the generic card", name, exc_info=True)
        else:
            if isinstance(view, _CALL_VIEWS):
                return view
    return generic_call_view(name, arguments)


def generic_call_view(name: str, arguments: JsonValue) -> GenericCallView:
    shown = json_text(arguments) if arguments not in ({}, None) else None
    return GenericCallView(title=name, raw_input=shown)


def present_result(name: str, arguments: JsonValue, durable: DurableResult,
                   definition: ToolDefinition | None) -> ResultView | None:
    """The definition's result view; ``None`` selects the generic (or error) fallback."""
    if definition is None or definition.present_result is None:
        return None
    try:
        view = definition.present_result(arguments, durable)
    except Exception:
        _log.debug("present_result of %s failed; using the generic card", name, exc_info=True)
        return None
    return view if isinstance(view, _RESULT_VIEWS) else None


def durable_from_event(event: ToolResultEvent | CodeDispatchEvent) -> DurableResult:
    error = event.get("error")
    meta = cast(JsonValue, event.get("meta"))
    # A log is read back as plain dicts; keep the blocks a content tuple may hold.
    content = cast(tuple[ContentBlock, ...], tuple(
        block for block in event["content"]
        if isinstance(block, dict) and block.get("type") in ("text", "image")))
    return DurableResult(is_error=bool(event["is_error"]), content=content,
                         error_message=error["message"] if error else None,
                         error_code=error["code"] if error else None,
                         presentation_meta=meta)


def durable_from_result(result: ToolResult) -> DurableResult:
    """What a log would keep of ``result`` (the canonical value is dropped)."""
    error = result.error
    return DurableResult(is_error=result.is_error, content=result.content,
                         error_message=error.message if error else None,
                         error_code=error.code if error else None,
                         presentation_meta=result.meta)


def registry_lookup(registry: ToolRegistry,
                    scopes: Iterable[AgentScope] = ()) -> DefinitionLookup:
    """Resolve like the registry does: an event from an agent resolves in the scope
    of that name (one of ``scopes``, else the registry's live scope), anything else
    globally."""
    by_name = {scope.name: scope for scope in scopes}

    def lookup(name: str, agent: str | None) -> ToolDefinition | None:
        scope = (by_name.get(agent) or registry.find_scope(agent)) if agent is not None else None
        try:
            return registry.get(name, scope)
        except Exception:  # a disposed scope: fall back to the generic card
            return None

    return lookup


def no_definitions(_name: str, _agent: str | None) -> None:
    return None
