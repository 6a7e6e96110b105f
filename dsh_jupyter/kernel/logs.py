"""Program output as log entries, counted exactly against the output budget.

Each stream (``stdout``, ``stderr``) is split into lines: every completed line
(without its ``\\n``) becomes one entry, in the order lines complete; a trailing
partial line is flushed as an entry when the run ends. An entry costs the UTF-8
bytes of its JSON encoding (``json.dumps(entry, ensure_ascii=False)``, quotes
included); the return value costs the bytes of its compact JSON encoding.
Once the total would pass the budget, nothing more is kept and
:attr:`OutputLog.over_limit` turns true: the log then holds the entries that fit.
A partial line is charged before it completes (at least its raw UTF-8 size plus
quotes), so a gigantic line without a newline trips the limit as it arrives.
"""

from __future__ import annotations

import json

from ..json_value import JsonValue


def json_size(value: JsonValue) -> int:
    """Bytes of the compact UTF-8 JSON encoding of ``value``."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


class OutputLog:
    """Collects stream text into entries under a byte budget."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._entries: list[str] = []
        self._used = 0
        self._partial: dict[str, list[str]] = {}
        self._partial_bytes: dict[str, int] = {}
        self.over_limit = False

    @property
    def used_bytes(self) -> int:
        return self._used

    def write(self, stream: str, text: str) -> None:
        """Add ``text`` from ``stream`` (any name; streams are split independently)."""
        if self.over_limit or not text:
            return
        *complete, rest = text.split("\n")
        if complete:
            head = "".join(self._partial.pop(stream, ())) + complete[0]
            self._partial_bytes.pop(stream, None)
            for line in (head, *complete[1:]):
                if not self._add(line):
                    return
        if rest:
            self._partial.setdefault(stream, []).append(rest)
            pending = self._partial_bytes.get(stream, 2) + len(
                rest.encode("utf-8", "surrogatepass"))
            self._partial_bytes[stream] = pending
            if self._used + sum(self._partial_bytes.values()) > self._max:
                self._trip()

    def add_value(self, value: JsonValue) -> bool:
        """Charge the return value; ``False`` (and over the limit) when it does not fit."""
        size = json_size(value)
        if self.over_limit or self._used + size > self._max:
            self._trip()
            return False
        self._used += size
        return True

    def finish(self) -> tuple[str, ...]:
        """Flush trailing partial lines (when they fit) and return the entries."""
        for stream in list(self._partial):
            parts = self._partial.pop(stream)
            self._partial_bytes.pop(stream, None)
            if not self.over_limit:
                self._add("".join(parts))
        return tuple(self._entries)

    def _add(self, line: str) -> bool:
        size = json_size(line)
        if self._used + size > self._max:
            self._trip()
            return False
        self._used += size
        self._entries.append(line)
        return True

    def _trip(self) -> None:
        self.over_limit = True
        self._partial.clear()
        self._partial_bytes.clear()
