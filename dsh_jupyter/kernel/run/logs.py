"""Program output as log entries, counted exactly against the output budget.

Each stream (``stdout``, ``stderr``) is split into lines: every completed line
(without its ``\\n``, or ``\\r\\n``) becomes one entry, in the order lines complete; a
trailing partial line is flushed as an entry when the run ends. An entry is escaped as
it is kept (``_safe_text.escape_text``: control and bidi characters and bytes that are
not UTF-8 written ``\\x1b``, ``\\u202e``, ``\\xff``), so what is charged, told live and
returned is the same text.

What is charged is exactly the seed's payload: the compact UTF-8 JSON encoding of the
log array (``["ab","cd"]``: brackets, quotes and commas included) plus that of the
return value. Once the total would pass the budget, nothing more is kept and
:attr:`OutputLog.over_limit` turns true: the log then holds the entries that fit.
A partial line is charged before it completes (at least its raw UTF-8 size plus
quotes), so a gigantic line without a newline trips the limit as it arrives.

Every run of a runtime also draws on one shared :class:`OutputBudget`: what all
runs in flight hold together is bounded too, in memory terms (an entry costs its
bytes plus :data:`ENTRY_OVERHEAD`, so a flood of one-character lines cannot hold
gigabytes under a byte cap meant for text). A run returns what it drew when its
result is handed over. A run's displays draw on it too, but only up to a share of it
(see ``displays``), so they never leave its logs without room.

``on_entry`` (when given) is told each entry as it is kept, in order: the run's live
view of its logs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Final

from ..._safe_text import escape_text
from ...json_value import JsonValue

ENTRY_OVERHEAD: Final = 64
"""What holding one log entry costs beyond its text (a str object and a list slot)."""

_ESCAPED: Final = re.compile(r'["\\\x00-\x1f]')


def json_size(value: JsonValue) -> int:
    """Bytes of the compact UTF-8 JSON encoding of ``value``."""
    if type(value) is str and value.isascii():
        # Most output is ASCII: count the escapes instead of encoding (a control
        # character becomes \uXXXX, six bytes, except the five with a short form).
        escapes = _ESCAPED.findall(value)
        if not escapes:
            return len(value) + 2
        return len(value) + 2 + sum(1 if c in _SHORT_ESCAPES else 5 for c in escapes)
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


_SHORT_ESCAPES: Final = frozenset('"\\\b\f\n\r\t')


class OutputBudget:
    """Bytes all runs of a runtime may hold at once (see the module docstring)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0

    def take(self, size: int, *, within: int | None = None) -> bool:
        """Draw ``size`` bytes; ``False`` (nothing drawn) when that would pass the limit,
        or ``within`` (a lower ceiling for what all holders may then hold) when given."""
        ceiling = self.max_bytes if within is None else min(within, self.max_bytes)
        if self.used + size > ceiling:
            return False
        self.used += size
        return True

    def give_back(self, size: int) -> None:
        self.used = max(0, self.used - size)


class OutputLog:
    """Collects stream text into entries under a byte budget (and the runtime's shared
    :class:`OutputBudget`, when given). :meth:`release` returns what it drew."""

    def __init__(self, max_bytes: int, budget: OutputBudget | None = None,
                 on_entry: Callable[[str], None] | None = None) -> None:
        self._max = max_bytes
        self._budget = budget
        self._on_entry = on_entry
        self._drawn = 0
        self._entries: list[str] = []
        self._used = 2  # the log array's brackets
        self._partial: dict[str, list[str]] = {}
        self._partial_bytes: dict[str, int] = {}
        self.over_limit = False
        self.over_budget = False

    @property
    def used_bytes(self) -> int:
        return self._used

    @property
    def entry_count(self) -> int:
        """How many entries are kept so far (completed lines)."""
        return len(self._entries)

    def limit_message(self) -> str:
        """Why the log is over its limit (the run's cap, or the runtime's budget)."""
        if self.over_budget and self._budget is not None:
            return (f"the output of the runs in flight passed the runtime's "
                    f"{self._budget.max_bytes} byte budget (max_buffered_output_bytes)")
        return f"the program's output passed the {self._max} byte limit"

    def write(self, stream: str, text: str) -> None:
        """Add ``text`` from ``stream`` (any name; streams are split independently)."""
        if self.over_limit or not text:
            return
        *complete, rest = text.split("\n")
        if complete:
            head = "".join(self._partial.pop(stream, ())) + complete[0]
            self._give_back(self._partial_bytes.pop(stream, 0))
            for line in (head, *complete[1:]):
                if not self._add(line.removesuffix("\r")):
                    return
        if rest:
            # Charged as it arrives (its raw bytes, plus the quotes for a new line), so a
            # gigantic line without a newline trips the limit before it completes.
            size = len(rest.encode("utf-8", "surrogatepass"))
            size += 0 if stream in self._partial_bytes else 3  # quotes and a comma
            if not self._draw(size):
                return
            self._partial.setdefault(stream, []).append(rest)
            self._partial_bytes[stream] = self._partial_bytes.get(stream, 0) + size
            if self._used + sum(self._partial_bytes.values()) > self._max:
                self._trip()

    def add_value(self, value: JsonValue) -> bool:
        """Charge the return value; ``False`` (and over the limit) when it does not fit."""
        return self.add_value_size(json_size(value))

    def add_value_size(self, size: int) -> bool:
        """Charge a return value of ``size`` bytes of compact JSON (see :meth:`add_value`)."""
        if self.over_limit or self._used + size > self._max or not self._draw(size):
            self._trip()
            return False
        self._used += size
        return True

    def finish(self) -> tuple[str, ...]:
        """Flush trailing partial lines (when they fit) and return the entries."""
        for stream in list(self._partial):
            parts = self._partial.pop(stream)
            self._give_back(self._partial_bytes.pop(stream, 0))
            if not self.over_limit:
                self._add("".join(parts))
        return tuple(self._entries)

    def release(self) -> None:
        """Give the runtime's budget back what this log drew (its result is handed over)."""
        self._give_back(self._drawn)

    def _add(self, line: str) -> bool:
        line = escape_text(line)
        size = json_size(line) + (1 if self._entries else 0)  # the comma before it
        if self._used + size > self._max:
            self._trip()
            return False
        if not self._draw(size + ENTRY_OVERHEAD):
            return False
        self._used += size
        self._entries.append(line)
        if self._on_entry is not None:
            self._on_entry(line)
        return True

    def _draw(self, size: int) -> bool:
        if self._budget is None:
            return True
        if not self._budget.take(size):
            self.over_budget = True
            self._trip()
            return False
        self._drawn += size
        return True

    def _give_back(self, size: int) -> None:
        if self._budget is not None and size:
            size = min(size, self._drawn)
            self._budget.give_back(size)
            self._drawn -= size

    def _trip(self) -> None:
        self.over_limit = True
        for stream in list(self._partial_bytes):
            self._give_back(self._partial_bytes.pop(stream))
        self._partial.clear()
