"""A program's display (``display(obj)``, a matplotlib figure) as one card block.

::

    block = display_block({"data": {"text/plain": "<Figure size 640x480 with 1 Axes>",
                                    "image/png": "iVBORw0KGgo..."},
                           "metadata": {}})
    # Image(mime="image/png", data="iVBORw0KGgo...", text="[image/png 640x480, 23 KB]")

What a display becomes, in this order (the first that applies):

- the note a run adds when its displays passed their budget: muted :class:`Text`;
- an image (``image/png``, ``jpeg``, ``gif``, ``webp``, ``svg+xml``, in that order)
  whose payload is what it claims (see ``dsh_jupyter._images``): an :class:`Image`,
  which text formats show as ``[image/png 640x480, 23 KB]``;
- ``text/html`` (at most :data:`MAX_HTML_CHARS`): :class:`SandboxedHtml`, the HTML in
  a sandboxed frame, its ``text/plain`` in text formats;
- otherwise its ``text/plain`` as :class:`Code` (escaped like any output), or a muted
  line naming its MIME types when it has none.

Images come before HTML (Jupyter prefers HTML): an image is drawn exactly, while
HTML here is drawn inert, without its scripts. Markdown, LaTeX, JavaScript and
widget views of a display are never rendered; they fall back like the rest.
Everything is deterministic, so a card's text fallbacks compare equal under nbval.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .._images import IMAGE_TYPES, RASTER_TYPES, CheckedImage, check_image, format_bytes
from ..runtime import Display
from .doc import Block, Code, Image, SandboxedHtml, Text

MAX_HTML_CHARS: Final = 1024 * 1024
"""Longer HTML falls back to ``text/plain`` (a browser would render it for seconds)."""
ROW_PIXELS: Final = 22
MAX_SIZE_PIXELS: Final = 10_000


def display_block(display: Display | Mapping[str, Any]) -> Block:
    """The block that shows ``display``: a :class:`~dsh_jupyter.runtime.Display` or its
    JSON, ``{"data": {mime: ...}, "metadata": {...}}`` (see the module docstring)."""
    if isinstance(display, Display):
        data: object = display.data
        metadata: object = display.metadata
    else:
        data, metadata = display.get("data"), display.get("metadata")
    if not isinstance(data, Mapping):
        return Text(text="[a display that could not be read]", tone="muted")
    if not isinstance(metadata, Mapping):
        metadata = {}
    plain = data.get("text/plain")
    plain = plain if isinstance(plain, str) else None
    if _is_note(metadata) and plain is not None:
        return Text(text=plain, tone="muted")
    for mime in IMAGE_TYPES:
        if mime in data:
            checked = check_image(mime, data[mime])
            if checked is not None:
                width, height = _display_size(metadata.get(mime)) if mime in RASTER_TYPES \
                    else (None, None)
                return Image(mime=mime, data=checked.data, text=image_label(checked),
                             width=width, height=height)
    html = data.get("text/html")
    if isinstance(html, str) and len(html) <= MAX_HTML_CHARS:
        return SandboxedHtml(html=html, text=plain if plain is not None else "[text/html]",
                             height=frame_height(html))
    if plain is not None:
        return Code(text=plain)
    kinds = ", ".join(sorted(str(mime)[:80] for mime in data)[:8]) or "nothing"
    return Text(text=f"[a display without text/plain: {kinds}]", tone="muted")


def image_label(image: CheckedImage) -> str:
    """``[image/png 640x480, 23 KB]`` (pixels from the image's own header)."""
    dimensions = (f" {image.width}x{image.height}"
                  if image.width is not None and image.height is not None else "")
    return f"[{image.mime}{dimensions}, {format_bytes(image.size)}]"


def frame_height(html: str) -> int:
    """Pixels for a frame showing ``html``: a guess from its rows (table rows, line
    breaks, paragraphs, list items, headings); the frame scrolls beyond it and the
    renderer clamps it."""
    lowered = html[:MAX_HTML_CHARS].lower()
    rows = sum(lowered.count(tag) for tag in ("<tr", "<br", "<p", "<li", "<h", "<div"))
    if rows == 0:
        rows = 1 + len(lowered) // 120
    return 16 + ROW_PIXELS * rows


def _is_note(metadata: Mapping[Any, Any]) -> bool:
    ours = metadata.get("dsh_jupyter")
    return isinstance(ours, Mapping) and ours.get("note") == "displays-dropped"


def _display_size(metadata: object) -> tuple[int | None, int | None]:
    """The ``width``/``height`` a display asks its image to be drawn at (a retina figure
    is twice as many pixels), when both are sane."""
    if not isinstance(metadata, Mapping):
        return None, None
    width, height = metadata.get("width"), metadata.get("height")
    if all(type(value) is int and 0 < value <= MAX_SIZE_PIXELS for value in (width, height)):
        return width, height
    return None, None
