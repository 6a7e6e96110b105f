"""A card as a small document: what every renderer (widget HTML, text/html,
text/markdown, text/plain) draws, so the four always show the same thing.

Every string in a document is plain text taken as is from tools; renderers
escape it. A :class:`Doc` may contain other docs (a run_code card's sub-calls).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

Tone = Literal["plain", "muted", "ok", "error"]
Status = Literal["queued", "running", "ok", "error", "stopped", "waiting", "approved",
                 "rejected", "cancelled"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Text:
    """A short paragraph."""

    text: str
    tone: Tone = "plain"


@dataclass(frozen=True, slots=True, kw_only=True)
class Field:
    """``label: value`` on one line."""

    label: str
    value: str
    tone: Tone = "plain"


@dataclass(frozen=True, slots=True, kw_only=True)
class Code:
    """Preformatted text. ``numbers`` gives each line its number (a file's own line
    numbers, so a window starting at line 40 reads 40, 41, ...). ``collapsible``
    draws it as a disclosure, open when ``open``."""

    text: str
    lang: str | None = None
    numbers: tuple[int, ...] | None = None
    label: str | None = None
    collapsible: bool = False
    open: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Items:
    """A bullet list."""

    items: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """A titled URL; only http(s) URLs become clickable."""

    title: str
    url: str
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Links:
    links: tuple[Link, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class File:
    """A file a program wrote: its name and what it is (``note``: size and type, or why it
    was not collected); ``data`` (base64), when the card holds its bytes, becomes a
    download link. Every string is untrusted (the program named the file)."""

    name: str
    note: str
    data: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Image:
    """A picture a program displayed. ``data`` is base64 of an image of type ``mime``,
    embedded only as the ``data:`` URI of an ``<img>`` (renderers check both again);
    build it with :func:`~.displays.display_block`, which checks the image. ``text``
    stands for it in text formats (``[image/png 640x480, 23 KB]``); ``width`` and
    ``height`` are the CSS pixels to draw it at, when the display said."""

    mime: str
    data: str
    text: str
    width: int | None = None
    height: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxedHtml:
    """HTML a program displayed: untrusted, so drawn only inside an ``<iframe sandbox>``
    (no scripts, no same origin, nothing fetched) ``height`` pixels high. Text formats
    show ``text`` (the display's ``text/plain``) instead."""

    html: str
    text: str
    height: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """Blocks under a small heading (a file's matches, a diff, the calls of a program)."""

    title: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Fold:
    """Blocks folded under one line (``… and 124 more (120 ok, 4 failed)``): HTML draws a
    disclosure that opens on them; the text formats show the line alone, so a long list
    cannot flood a saved notebook."""

    summary: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Doc:
    """One card. ``kind`` names the card for CSS and tests (``tool``, ``run-code``,
    ``sub-call``, ``approval``); ``duration`` is shown by the live widget only, because
    every text fallback must be deterministic."""

    title: str
    kind: str
    status: Status | None = None
    status_detail: str | None = None
    subtitle: str | None = None
    blocks: tuple[Block, ...] = ()
    duration: float | None = None
    waited: float | None = None
    """Time spent waiting before it ran (queued, or for an approval): widget only."""
    trace: tuple[str, str] | None = None
    """The call's OpenTelemetry trace and span ids, with tracing on: widget only."""


Block: TypeAlias = (Text | Field | Code | Items | Links | File | Image | SandboxedHtml | Section
                   | Fold | Doc)
