"""A program's rich outputs: ``display_data`` messages checked, placed among its logs,
and kept within a budget.

What counts is ``display_data`` whose parent is the program cell: ``display(obj)``,
``IPython.display`` objects, matplotlib figures. ``update_display_data`` (a display
handle's ``update``) and ``clear_output`` are ignored: a run's displays are an
append-only record, like its logs, and each shows what was first sent (a program
redrawing a progress display a thousand times keeps one display, not a thousand).

The kernel is hostile, so each message is checked before anything is kept: ``data``
is a non-empty object of at most :data:`MAX_MIME_TYPES` MIME types (``type/subtype``),
each a string, or any JSON value for ``application/json`` and ``*+json``;
``metadata`` is absent or a JSON object. Anything else is dropped without a trace in
the result (it is no display) and never raises. Every string of a kept display, its text
and its metadata, is escaped (``_safe_text.escape_json``: control and bidi characters and
bytes that are not UTF-8 written ``\\x1b``, ``\\u202e``, ``\\xff``) before it is charged.

The budget: a run keeps at most ``max_displays`` displays and ``max_display_bytes``
bytes of their compact JSON (data plus metadata). The displays of all runs in flight
also draw on the runtime's :class:`~.logs.OutputBudget`, each at its size plus
:data:`DISPLAY_OVERHEAD`, but only up to half of it, so logs always keep the other
half: a log line is never lost because of displays. The first display over any of
these is replaced by one *note* (a display whose ``text/plain`` says that later
displays are not shown and why, marked by :data:`NOTE_METADATA`), and every later
display is checked, dropped and counted in :attr:`DisplayLog.dropped`.

:class:`SafeObserver` is how both runtimes tell an
:class:`~dsh_jupyter.runtime.OutputObserver` about log lines and displays without
letting its failures reach the run.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, cast

from ..._images import format_bytes
from ..._safe_text import escape_json
from ...json_value import JsonObject, NotJsonError, snapshot_json
from ...runtime import Display, OutputObserver
from ..transport.frames import MAX_DEPTH
from .logs import OutputBudget, json_size

_log = logging.getLogger(__name__)

MAX_MIME_TYPES: Final = 32
DISPLAY_OVERHEAD: Final = 256
"""What holding one display costs beyond its JSON (the objects around its strings)."""
NOTE_METADATA: Final = cast(JsonObject, snapshot_json(
    {"dsh_jupyter": {"note": "displays-dropped"}}))
"""The metadata of the note that replaces the first display over the budget."""

_MIME_TYPE: Final = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}",
                               re.IGNORECASE)


def is_json_mime(mime: str) -> bool:
    """Whether a MIME bundle carries ``mime`` as a JSON value rather than a string."""
    return mime == "application/json" or mime.endswith("+json")


def parse_display(content: Mapping[str, Any]) -> tuple[JsonObject, JsonObject] | None:
    """The frozen, escaped ``(data, metadata)`` of a ``display_data`` message's content,
    or ``None`` when it is malformed (see the module docstring)."""
    data = content.get("data")
    metadata = content.get("metadata")
    metadata = {} if metadata is None else metadata
    if not isinstance(data, dict) or not data or len(data) > MAX_MIME_TYPES:
        return None
    if not isinstance(metadata, dict):
        return None
    for mime, value in data.items():
        if not isinstance(mime, str) or _MIME_TYPE.fullmatch(mime) is None:
            return None
        if not is_json_mime(mime) and not isinstance(value, str):
            return None
    try:  # JSON types and metadata: no NaN, no infinities, not nested too deep
        frozen_data = escape_json(snapshot_json(data, max_depth=MAX_DEPTH))
        frozen_metadata = escape_json(snapshot_json(metadata, max_depth=MAX_DEPTH))
    except (NotJsonError, RecursionError):
        return None
    return cast(JsonObject, frozen_data), cast(JsonObject, frozen_metadata)


class DisplayLog:
    """The displays of one run under its budget (see the module docstring).
    ``on_display`` is told each display kept (and the note), as it is kept."""

    def __init__(self, *, max_displays: int, max_bytes: int, budget: OutputBudget | None = None,
                 on_display: Callable[[Display], None] | None = None) -> None:
        self._max_displays = max_displays
        self._max_bytes = max_bytes
        self._budget = budget
        self._on_display = on_display
        self._kept: list[Display] = []
        self._used = 0
        self._drawn = 0
        self._over = False
        self.dropped = 0
        self.malformed = 0

    @property
    def displays(self) -> tuple[Display, ...]:
        """The displays kept so far, the note included, in order."""
        return tuple(self._kept)

    def add(self, content: Mapping[str, Any], after_logs: int) -> None:
        """A ``display_data`` message's content, shown after ``after_logs`` log entries."""
        parsed = parse_display(content)
        if parsed is None:
            self.malformed += 1
            return
        if self._over:
            self.dropped += 1
            return
        data, metadata = parsed
        size = json_size(data) + json_size(metadata)
        problem = self._charge(size)
        if problem is not None:
            self._over = True
            self.dropped += 1
            if self._max_displays:  # 0 turns displays off: no note for that
                self._keep(Display(data={"text/plain": problem}, metadata=NOTE_METADATA,
                                   after_logs=after_logs))
            return
        self._keep(Display(data=data, metadata=metadata, after_logs=after_logs))

    def release(self) -> None:
        """Give the runtime's budget back what this run's displays drew."""
        if self._budget is not None and self._drawn:
            self._budget.give_back(self._drawn)
            self._drawn = 0

    def _charge(self, size: int) -> str | None:
        """Draw ``size`` bytes for one more display; why not, when it does not fit."""
        later = "later displays of the program are not shown"
        if len(self._kept) >= self._max_displays:
            return (f"[{later}: it passed its budget of {self._max_displays} displays "
                    "(max_displays); its logs are all kept]")
        if self._used + size > self._max_bytes:
            return (f"[{later}: its displays passed their budget of "
                    f"{format_bytes(self._max_bytes)} (max_display_bytes); its logs are all "
                    "kept]")
        budget = self._budget
        if budget is not None:
            if not budget.take(size + DISPLAY_OVERHEAD, within=budget.max_bytes // 2):
                return (f"[{later}: the displays of the runs in flight filled their half of "
                        f"the runtime's {format_bytes(budget.max_bytes)} output buffer "
                        "(max_buffered_output_bytes); its logs are all kept]")
            self._drawn += size + DISPLAY_OVERHEAD
        self._used += size
        return None

    def _keep(self, display: Display) -> None:
        self._kept.append(display)
        if self._on_display is not None:
            self._on_display(display)


class SafeObserver:
    """An :class:`~dsh_jupyter.runtime.OutputObserver` made safe to call from a run's
    reader: a failure is logged (the first of the run, with its traceback) and never
    reaches the run; the next output is passed on again."""

    def __init__(self, observer: OutputObserver) -> None:
        self._observer = observer
        self._failed = False

    def on_log(self, line: str) -> None:
        try:
            self._observer.on_log(line)
        except Exception:
            self._failure()

    def on_display(self, display: Display) -> None:
        try:
            self._observer.on_display(display)
        except Exception:
            self._failure()

    def _failure(self) -> None:
        if not self._failed:
            self._failed = True
            _log.exception("an output observer of a run failed (its later failures in this "
                           "run are not logged)")
