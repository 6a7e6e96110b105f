"""Tool-owned presentation: render intents a tool returns so UIs never special-case names.

A definition may provide ``present_call(args)`` and ``present_result(args, view)``.
Both are pure: they see only the call's arguments and the *durable* result
(:class:`DurableResult`: content, error, and ``presentation_meta`` for top-level
calls), never the live canonical value, so a card renders the same while the call
streams and when a session log is replayed. Returning ``None`` selects the generic
card. Cards live in :mod:`dsh_jupyter.widgets`; this module only describes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias

from ..json_value import JsonValue
from .results import Content


@dataclass(frozen=True, slots=True, kw_only=True)
class Location:
    path: str
    line: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FileDiff:
    """One file's change; ``old_text`` is ``None`` for a new file."""

    path: str
    old_text: str | None
    new_text: str


# --- call views -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class GenericCallView:
    card: ClassVar[Literal["generic"]] = "generic"
    title: str
    kind: str | None = None  # "read", "edit", "execute", "search", "fetch", ...
    raw_input: str | None = None
    content: str | None = None
    locations: tuple[Location, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminalCallView:
    card: ClassVar[Literal["terminal"]] = "terminal"
    title: str
    description: str | None = None
    cwd: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffCallView:
    card: ClassVar[Literal["diff"]] = "diff"
    title: str
    diffs: tuple[FileDiff, ...]
    locations: tuple[Location, ...] = ()


CallView: TypeAlias = GenericCallView | TerminalCallView | DiffCallView


# --- result views -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class GenericResultView:
    card: ClassVar[Literal["generic"]] = "generic"
    title: str | None = None
    content: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminalResultView:
    card: ClassVar[Literal["terminal"]] = "terminal"
    title: str | None = None
    output: str | None = None
    exit_code: int | None = None
    signal: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffResultView:
    card: ClassVar[Literal["diff"]] = "diff"
    title: str | None = None
    diffs: tuple[FileDiff, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchMatch:
    line: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchFileMatches:
    path: str
    matches: tuple[SearchMatch, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResultView:
    """A completed discovery search: grep-style ``matches`` grouped by file, or a
    glob-style flat ``paths`` list. ``truncated``/``total`` let a UI say
    "showing N of TOTAL" instead of presenting a capped result as complete."""

    card: ClassVar[Literal["search"]] = "search"
    shape: Literal["matches", "paths"]
    truncated: bool
    total: int
    title: str | None = None
    files: tuple[SearchFileMatches, ...] = ()
    paths: tuple[str, ...] = ()

    @property
    def shown(self) -> int:
        if self.shape == "paths":
            return len(self.paths)
        return sum(len(f.matches) for f in self.files)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadLine:
    number: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadResultView:
    """A file read: ``offset`` is the 1-based first line requested (kept even when
    ``lines`` is empty); ``content`` is the fallback text for UIs without support."""

    card: ClassVar[Literal["read"]] = "read"
    path: str
    offset: int
    lines: tuple[ReadLine, ...]
    total_lines: int
    title: str | None = None
    lang: str | None = None
    content: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WebSource:
    title: str
    url: str
    snippet: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WebFetchSummary:
    url: str
    title: str | None = None
    status: int | None = None
    content_type: str | None = None
    bytes: int | None = None
    summary: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WebResultView:
    card: ClassVar[Literal["web"]] = "web"
    kind: Literal["search", "fetch"]
    title: str | None = None
    sources: tuple[WebSource, ...] = ()  # kind == "search"
    fetch: WebFetchSummary | None = None  # kind == "fetch"


ResultView: TypeAlias = (
    GenericResultView
    | TerminalResultView
    | DiffResultView
    | SearchResultView
    | ReadResultView
    | WebResultView
)


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableResult:
    """What a presenter may see of a result: exactly what a session log keeps."""

    is_error: bool
    content: Content
    error_message: str | None = None
    error_code: str | None = None
    presentation_meta: JsonValue = None


PresentCall: TypeAlias = Callable[[JsonValue], CallView | None]
PresentResult: TypeAlias = Callable[[JsonValue, DurableResult], ResultView | None]
