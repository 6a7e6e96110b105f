"""Tool results are values: a success carries the canonical JSON value and the
model-facing content; a failure carries an error and ``Error: <message>``.

::

    result = await registry.execute(call)
    if result.is_error:
        print(result.error.code, result.error.message)
    else:
        use(result.value)
    model_text = result.text   # the content's text blocks joined
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal, NotRequired, TypeAlias, TypedDict, TypeVar

from ..json_value import JsonObject, JsonValue
from ..runtime import RunFile


class TextContent(TypedDict):
    type: Literal["text"]
    text: str
    annotations: NotRequired[JsonObject]
    """Hints about the block as an MCP server sent them (``audience``, ``priority``,
    ``lastModified``); absent for most blocks."""


class ImageContent(TypedDict):
    type: Literal["image"]
    data: str
    mime_type: str
    annotations: NotRequired[JsonObject]


ContentBlock: TypeAlias = TextContent | ImageContent
Content: TypeAlias = tuple[ContentBlock, ...]


def text_content(text: str) -> Content:
    return ({"type": "text", "text": text},)


def content_text(content: Sequence[ContentBlock]) -> str:
    """The text blocks of ``content`` joined by newlines (images become placeholders)."""
    parts: list[str] = []
    for block in content:
        if block["type"] == "text":
            parts.append(block["text"])
        else:
            parts.append(f"[{block['type']} content]")
    return "\n".join(parts)


class _AdditionalContextDict(TypedDict):
    source: str
    text: str
    meta: NotRequired[JsonValue]


@dataclass(frozen=True, slots=True, kw_only=True)
class AdditionalContext:
    """A message the agent loop appends after the result (never mid-result)."""

    source: str
    text: str
    meta: JsonValue = None

    def to_json(self) -> _AdditionalContextDict:
        out: _AdditionalContextDict = {"source": self.source, "text": self.text}
        if self.meta is not None:
            out["meta"] = self.meta
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolErrorInfo:
    message: str
    code: str | None = None


_R = TypeVar("_R", bound="_Result")


class _Result:
    """What success and failure share: the model-facing text and content replacement."""

    __slots__ = ()
    content: Content

    @property
    def text(self) -> str:
        """The content's text blocks joined by newlines: what a model reads."""
        return content_text(self.content)

    def with_content(self: _R, content: Content) -> _R:
        return replace(self, content=content)  # type: ignore[type-var]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSuccess(_Result):
    is_error: ClassVar[Literal[False]] = False
    error: ClassVar[None] = None
    value: JsonValue
    content: Content
    meta: JsonValue = None
    additional_contexts: tuple[AdditionalContext, ...] = field(default=())
    attachments: tuple[RunFile, ...] = field(default=(), repr=False)
    """Files the body kept with its result for the user (``ctx.attach``): run_code's
    collected ``outputs/``. Never sent to the model, never in events (bytes)."""



@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFailure(_Result):
    is_error: ClassVar[Literal[True]] = True
    value: ClassVar[None] = None
    error: ToolErrorInfo
    content: Content
    meta: JsonValue = None
    additional_contexts: tuple[AdditionalContext, ...] = field(default=())



ToolResult: TypeAlias = ToolSuccess | ToolFailure


def failure(
    message: str,
    code: str | None = None,
    *,
    contexts: tuple[AdditionalContext, ...] = (),
) -> ToolFailure:
    """A failure whose content is exactly ``Error: <message>``."""
    return ToolFailure(
        error=ToolErrorInfo(message=message, code=code),
        content=text_content(f"Error: {message}"),
        additional_contexts=contexts,
    )
