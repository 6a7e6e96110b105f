"""What each request carried and what each run cost, as frozen values.

Sizes are bytes of compact UTF-8 JSON or text, exactly as sent. Token figures are
estimates: ``ceil(bytes / 4)`` (:func:`estimate_tokens`), the usual rule of thumb
for English text and code with BPE tokenizers; the counts a server reports come
back separately as ``prompt_tokens`` / ``completion_tokens`` when it sends them.

To compare modes, flatten the requests into a table::

    rows = [dataclasses.asdict(r) for r in result.accounting.requests]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..events import SessionEvent
from ..registry.assembly import PromptAssembly
from .model import ChatRequest
from .wire import encode

BYTES_PER_TOKEN = 4
INSTRUCTIONS_SECTION = "agent:instructions"
SDK_SECTION = "tools:sdk"


def estimate_tokens(n_bytes: int) -> int:
    """``ceil(n_bytes / 4)``."""
    return -(-n_bytes // BYTES_PER_TOKEN)


@dataclass(frozen=True, slots=True, kw_only=True)
class SectionSize:
    """One system-prompt section: ``agent:instructions`` or a prompt-assembly id."""

    id: str
    bytes: int

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAccounting:
    """One model request (one step).

    ``sections`` are the system prompt's parts in order (empty ones included, so
    rows line up across modes); ``tool_schema_bytes`` is the wire tools array;
    ``sdk_bytes`` the ``tools:sdk`` section (also among ``sections``);
    ``tool_result_bytes`` / ``context_bytes`` what this request returned to the
    model that the previous one did not; ``request_bytes`` the whole body.
    """

    step: int
    sections: tuple[SectionSize, ...]
    system_bytes: int
    tool_schema_bytes: int
    sdk_bytes: int
    tool_result_bytes: int
    context_bytes: int
    request_bytes: int
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    attempts: int = 0
    model_seconds: float = 0.0
    tool_calls: int = 0
    sub_calls: int = 0

    @property
    def tool_definition_bytes(self) -> int:
        """What describing the tools cost: wire schemas plus the SDK section."""
        return self.tool_schema_bytes + self.sdk_bytes

    @property
    def system_tokens(self) -> int:
        return estimate_tokens(self.system_bytes)

    @property
    def tool_definition_tokens(self) -> int:
        return estimate_tokens(self.tool_definition_bytes)

    @property
    def tool_result_tokens(self) -> int:
        return estimate_tokens(self.tool_result_bytes)

    @property
    def request_tokens(self) -> int:
        return estimate_tokens(self.request_bytes)

    def sizes_json(self) -> dict[str, Any]:
        """The sizes known before sending, as JSON (for the ``agent/request`` event)."""
        return {"sections": {s.id: s.bytes for s in self.sections},
                "system_bytes": self.system_bytes,
                "tool_schema_bytes": self.tool_schema_bytes, "sdk_bytes": self.sdk_bytes,
                "tool_result_bytes": self.tool_result_bytes,
                "context_bytes": self.context_bytes, "request_bytes": self.request_bytes}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunAccounting:
    """One run: ``steps`` model requests, ``tool_calls`` the model made,
    ``sub_calls`` Code Mode dispatches under them, and wall time in seconds."""

    requests: tuple[RequestAccounting, ...] = ()
    steps: int = 0
    tool_calls: int = 0
    sub_calls: int = 0
    wall_seconds: float = 0.0

    @property
    def model_seconds(self) -> float:
        return sum(r.model_seconds for r in self.requests)

    @property
    def request_bytes(self) -> int:
        return sum(r.request_bytes for r in self.requests)

    @property
    def tool_definition_bytes(self) -> int:
        return sum(r.tool_definition_bytes for r in self.requests)

    @property
    def tool_result_bytes(self) -> int:
        return sum(r.tool_result_bytes for r in self.requests)

    @property
    def prompt_tokens(self) -> int | None:
        """The server-reported total, or ``None`` if any request lacked a count."""
        counts = [r.prompt_tokens for r in self.requests]
        return None if not counts or None in counts else sum(c or 0 for c in counts)

    @property
    def completion_tokens(self) -> int | None:
        counts = [r.completion_tokens for r in self.requests]
        return None if not counts or None in counts else sum(c or 0 for c in counts)


def measure_request(*, step: int, instructions: str, assembly: PromptAssembly,
                    request: ChatRequest, tool_result_bytes: int,
                    context_bytes: int) -> RequestAccounting:
    """Sizes of ``request`` before it is sent."""
    sections = (SectionSize(id=INSTRUCTIONS_SECTION, bytes=len(instructions.encode())),
                *(SectionSize(id=s.id, bytes=len(s.text.encode())) for s in assembly.sections))
    system = request.messages[0]["content"] if request.messages else ""
    return RequestAccounting(
        step=step, sections=sections, system_bytes=len((system or "").encode()),
        tool_schema_bytes=len(encode(list(request.tools))) if request.tools else 0,
        sdk_bytes=sum(s.bytes for s in sections if s.id == SDK_SECTION),
        tool_result_bytes=tool_result_bytes, context_bytes=context_bytes,
        request_bytes=len(encode(request.body())))


@dataclass(slots=True)
class SubCallCounter:
    """An event sink counting ``tool/code-dispatch`` events whose root call is one
    the run tracks (so concurrent runs on one registry do not mix)."""

    counts: dict[str, int] = field(default_factory=dict)

    def track(self, call_id: str) -> None:
        self.counts.setdefault(call_id, 0)

    def __call__(self, event: SessionEvent) -> None:
        if event["kind"] == "tool/code-dispatch" and event["root_call_id"] in self.counts:
            self.counts[event["root_call_id"]] += 1

    def count(self, call_ids: list[str]) -> int:
        return sum(self.counts.get(i, 0) for i in call_ids)
