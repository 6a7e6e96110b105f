"""Images from a program's displays, checked before anyone shows or sends them.

A display's ``image/png`` (``jpeg``, ``gif``, ``webp``) is base64 text the program
chose: :func:`check_image` accepts it only when it decodes strictly (the base64
alphabet and padding; white space, which Jupyter's encoder adds, removed) to bytes
that start like that type of image. ``image/svg+xml`` travels as XML text in
Jupyter; it is accepted when it holds an ``<svg`` element, and is only ever shown
from a ``data:`` URI in an ``<img>``, where a browser runs none of its scripts and
loads nothing. The checked image carries canonical base64, so whatever embeds it
embeds only ``[A-Za-z0-9+/=]``.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from dataclasses import dataclass
from typing import Final

RASTER_TYPES: Final = ("image/png", "image/jpeg", "image/gif", "image/webp")
IMAGE_TYPES: Final = (*RASTER_TYPES, "image/svg+xml")
_SIGNATURES: Final = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
}
_SVG: Final = re.compile(r"<svg[\s>/]", re.IGNORECASE)
_SVG_HEAD: Final = 4096
"""Where an ``<svg`` element must start (after an XML declaration, comments, a doctype)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedImage:
    """An image that passed :func:`check_image`: ``data`` is canonical base64 of
    ``size`` bytes; ``width``/``height`` in pixels when the header says (not for SVG)."""

    mime: str
    data: str
    size: int
    width: int | None = None
    height: int | None = None


def check_image(mime: str, payload: object) -> CheckedImage | None:
    """``payload`` as a :class:`CheckedImage` of type ``mime``, or ``None`` when it is not
    one (see the module docstring)."""
    if not isinstance(payload, str):
        return None
    if mime == "image/svg+xml":
        return _check_svg(payload)
    if mime not in RASTER_TYPES:
        return None
    text = "".join(payload.split())
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    if not _starts_like(mime, raw):
        return None
    width, height = _dimensions(mime, raw) or (None, None)
    return CheckedImage(mime=mime, data=text, size=len(raw), width=width, height=height)


def _starts_like(mime: str, raw: bytes) -> bool:
    if mime == "image/webp":
        return len(raw) >= 12 and raw[:4] == b"RIFF" and raw[8:12] == b"WEBP"
    return any(raw.startswith(signature) for signature in _SIGNATURES[mime])


def _check_svg(payload: str) -> CheckedImage | None:
    text = payload
    if _SVG.search(text[:_SVG_HEAD]) is None:
        # Not XML text: some producers send SVG as base64 like the raster types.
        try:
            text = base64.b64decode("".join(payload.split()), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return None
        if _SVG.search(text[:_SVG_HEAD]) is None:
            return None
    raw = text.encode("utf-8", "replace")
    return CheckedImage(mime="image/svg+xml", data=base64.b64encode(raw).decode("ascii"),
                        size=len(raw))


def _dimensions(mime: str, raw: bytes) -> tuple[int, int] | None:
    """Width and height from the image's header, or ``None`` when it does not say."""
    try:
        if mime == "image/png" and raw[12:16] == b"IHDR":
            width, height = struct.unpack(">II", raw[16:24])
            return int(width), int(height)
        if mime == "image/gif":
            width, height = struct.unpack("<HH", raw[6:10])
            return int(width), int(height)
        if mime == "image/jpeg":
            return _jpeg_dimensions(raw)
        if mime == "image/webp":
            return _webp_dimensions(raw)
    except struct.error:
        return None
    return None


def _jpeg_dimensions(raw: bytes) -> tuple[int, int] | None:
    """From the first start-of-frame marker (SOF0 to SOF15 but DHT, JPG and DAC)."""
    index = 2
    while index + 9 <= len(raw):
        if raw[index] != 0xFF:
            return None
        marker = raw[index + 1]
        if marker == 0xFF:  # fill byte
            index += 1
            continue
        (length,) = struct.unpack(">H", raw[index + 2:index + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", raw[index + 5:index + 9])
            return int(width), int(height)
        if length < 2:
            return None
        index += 2 + length
    return None


def _webp_dimensions(raw: bytes) -> tuple[int, int] | None:
    chunk = raw[12:16]
    if chunk == b"VP8X" and len(raw) >= 30:
        width = int.from_bytes(raw[24:27], "little") + 1
        height = int.from_bytes(raw[27:30], "little") + 1
        return width, height
    if chunk == b"VP8 " and len(raw) >= 30:
        width, height = struct.unpack("<HH", raw[26:30])
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    if chunk == b"VP8L" and len(raw) >= 25:
        bits = int.from_bytes(raw[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def format_bytes(size: int) -> str:
    """``512 B``, ``23 KB``, ``8.0 MB`` (binary units, as the budgets are set)."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size / (1024 * 1024):.1f} MB"
