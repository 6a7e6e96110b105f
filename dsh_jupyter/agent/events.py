"""Agent events: the conversation around the registry's ``tool/*`` events.

A run emits, through ``registry.on_event`` sinks (so one subscription sees the
whole conversation and every tool card)::

    agent/run-start                       once: task, model, mode, scope
    agent/message  (system, user)         the first request's prompt and task
    agent/request → agent/response        per step: sizes sent; usage, latency, plan
      agent/text-delta …                  between them, from a model that streams: the
                                          answer's text as it arrives
    agent/message  (assistant)            the model's turn
      tool/call … tool/result             the registry's events for each call
    agent/message  (tool …, user …)       results in model order, then contexts
    ...
    agent/run-end                         once: stop reason, totals, error (also when
                                          the run is cancelled or raises)

``agent/message`` carries the chat message as sent; ``index`` is its position in
the request's ``messages`` (0 is the system prompt, re-sent with index 0 only if
the tool set changed between steps). Every event is plain JSON.
"""

from __future__ import annotations

from ..events import (
    AGENT_EVENT_KINDS,
    AgentEvent,
    AgentMessageEvent,
    AgentRequestEvent,
    AgentResponseEvent,
    AgentRunEndEvent,
    AgentRunStartEvent,
    AgentTextDeltaEvent,
    StopReason,
)

__all__ = [
    "AGENT_EVENT_KINDS",
    "AgentEvent",
    "AgentMessageEvent",
    "AgentRequestEvent",
    "AgentResponseEvent",
    "AgentRunEndEvent",
    "AgentRunStartEvent",
    "AgentTextDeltaEvent",
    "StopReason",
]
