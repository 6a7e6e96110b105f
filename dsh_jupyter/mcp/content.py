"""MCP content blocks as registry content, and as the text of a result without an output schema.

Every MCP block becomes one registry block and one line (or more) of the text:

- ``text`` stays text;
- ``image`` becomes an image block when its data is the raster image it claims (PNG, JPEG,
  GIF, WebP, checked like a program's displays), so a multimodal model can receive it and
  cards draw it; the text says ``[image image/png 20x20, 2 KB]``. An image that is not what
  it claims, and ``audio``, stay text placeholders;
- ``resource_link`` and ``resource`` (embedded) become text that keeps the URI, name, title,
  description, MIME type and size (an embedded text resource is followed by its text; a
  binary one is described, not attached);
- the block's ``annotations`` (audience, priority, lastModified) travel on the registry
  block as ``annotations``, and are written into the text of resource links and resources.

Registry text and image blocks are what events, session logs, cards and model adapters
already carry, so nothing downstream needs a new block type. Pure functions over the SDK's
models, read by attribute; the SDK is never imported here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from .._images import RASTER_TYPES, check_image, format_bytes
from ..json_value import JsonObject
from ..registry.execution import ExecutionToken, ToolExecution
from ..registry.results import Content, ContentBlock, ToolResult, text_content

__all__ = ["McpContent", "RichContent", "mcp_content"]


@dataclass(frozen=True, slots=True, kw_only=True)
class McpContent:
    """An MCP result's content: ``text`` (the canonical value when the tool has no output
    schema) and ``blocks``; ``rich`` when the blocks say more than ``text`` alone."""

    text: str
    blocks: Content
    rich: bool


def mcp_content(blocks: Sequence[Any]) -> McpContent:
    """The registry form of a sequence of MCP content blocks."""
    parts: list[str] = []
    out: list[ContentBlock] = []
    rich = False
    for block in blocks:
        annotations = _annotations(block)
        kind = getattr(block, "type", None)
        image = _image(block) if kind == "image" else None
        if image is not None:
            checked, label = image
            parts.append(label)
            image_block: ContentBlock = {"type": "image", "data": checked.data,
                                         "mime_type": checked.mime}
            if annotations:
                image_block["annotations"] = annotations
            out.append(image_block)
            rich = True
            continue
        text = _block_text(block, kind, annotations)
        parts.append(text)
        text_block: ContentBlock = {"type": "text", "text": text}
        if annotations:
            text_block["annotations"] = annotations
            rich = True
        out.append(text_block)
    return McpContent(text="\n".join(parts), blocks=tuple(out), rich=rich)


class RichContent:
    """Carries a call's MCP blocks from its body to its ``finalize_content``.

    The body's canonical value is the text; the definition renders it as one text block.
    ``finalize_content`` (run once per call, on every outcome) swaps in the blocks kept
    for that call, but only when the content is still exactly what the render made: a
    post-execute hook that redacted or replaced it wins, and a failure stays a failure.
    """

    def __init__(self) -> None:
        self._kept: dict[ExecutionToken, McpContent] = {}

    def keep(self, token: ExecutionToken, content: McpContent) -> None:
        if content.rich:
            self._kept[token] = content

    def finalize(self, execution: ToolExecution, result: ToolResult) -> Content | None:
        content = self._kept.pop(execution.token, None)
        if content is None or result.is_error or result.content != text_content(content.text):
            return None
        return content.blocks


def _image(block: Any) -> tuple[Any, str] | None:
    mime = getattr(block, "mime_type", None)
    checked = check_image(mime, getattr(block, "data", None)) if isinstance(mime, str) else None
    if checked is None or checked.mime not in RASTER_TYPES:
        return None
    size = (f" {checked.width}x{checked.height}"
            if checked.width is not None and checked.height is not None else "")
    return checked, f"[image {checked.mime}{size}, {format_bytes(checked.size)}]"


def _block_text(block: Any, kind: object, annotations: JsonObject | None) -> str:
    if kind == "text":
        return str(block.text)
    if kind == "image":
        return f"[image {block.mime_type}: not attached, its data is not that type of image]"
    if kind == "audio":
        return f"[audio {block.mime_type}: not attached]"
    if kind == "resource_link":
        return _describe("resource link", block, annotations)
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f"{_describe('resource', resource, annotations)}\n{text}"
        blob = getattr(resource, "blob", None)
        size = len(blob) * 3 // 4 if isinstance(blob, str) else None  # base64: about 3/4
        return _describe("resource", resource, annotations, size=size,
                         note="binary, not attached")
    return f"[{kind} content]"


def _describe(what: str, item: Any, annotations: JsonObject | None, *,
              size: int | None = None, note: str | None = None) -> str:
    """``[resource link demo://x | name "A" | description "..." | type text/plain]``."""
    fields = [f"{what} {item.uri}"]
    for label in ("name", "title", "description"):
        value = getattr(item, label, None)
        if isinstance(value, str) and value:
            fields.append(f"{label} {json.dumps(value, ensure_ascii=False)}")
    mime = getattr(item, "mime_type", None)
    if isinstance(mime, str) and mime:
        fields.append(f"type {mime}")
    declared = getattr(item, "size", None)
    size = declared if isinstance(declared, int) else size
    if size is not None:
        fields.append(f"size {format_bytes(size)}")
    if note is not None:
        fields.append(note)
    for key, value in (annotations or {}).items():
        fields.append(f"{key} {json.dumps(value, ensure_ascii=False)}")
    return "[" + " | ".join(fields) + "]"


def _annotations(block: Any) -> JsonObject | None:
    annotations = getattr(block, "annotations", None)
    if annotations is None:
        return None
    dumped = annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
    return cast(JsonObject, dumped) or None
