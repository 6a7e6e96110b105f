"""Rebuilding a large value from the frames a kernel sends, one bounded step at a time.

A kernel sends arguments or a return value whose JSON is over ``FRAME_BYTES`` as a
sequence of frames (``inkernel.frames.frame_texts``): each is a JSON array of operations
(open or close a container, add values, slices of elements or members, keys, pieces
of a long string). :class:`ValueBuilder` applies one frame per :meth:`feed`, so the
host decodes at most one frame (~64 KiB) between two turns of its event loop,
instead of one 10 MB message in a single call.

The kernel is hostile: every operation is checked against the builder's state; a
frame that is not JSON, an operation out of place, a duplicate key, a value that
is not lossless JSON, nesting past :data:`MAX_DEPTH` or a size past the builder's
limit raise :class:`FrameError` (over the limit: :class:`FrameTooLarge`). The
result is frozen like any snapshot, and :attr:`ValueBuilder.size` is the exact
size of its compact JSON (what the output budget charges).
"""

from __future__ import annotations

import json
from typing import Any, Final

from ...json_value import FrozenDict, FrozenList, JsonValue, NotJsonError, snapshot_json
from ..run.logs import json_size

MAX_DEPTH: Final = 500
"""Containers a built value may nest (the kernel refuses deeper values itself)."""

_NO_VALUE: Final = object()


class FrameError(Exception):
    """A frame that cannot be applied (the message says why)."""


class FrameTooLarge(FrameError):
    """The value being built passed the builder's byte limit."""


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


class ValueBuilder:
    """Builds one value from frames; ``limit`` bounds its compact JSON size in bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.frames = 0
        self._stack: list[FrozenList | FrozenDict] = []
        self._counts: list[int] = []  # elements in each open container
        self._key: str | None = None  # the pending key of the open object
        self._pieces: list[str] | None = None  # a long string under construction
        self._root: object = _NO_VALUE

    @property
    def complete(self) -> bool:
        return self._root is not _NO_VALUE and not self._stack and self._pieces is None

    def result(self) -> JsonValue:
        """The value, once complete (else :class:`FrameError`)."""
        if not self.complete:
            raise FrameError("the value's frames ended before the value did")
        return self._root  # type: ignore[return-value]

    def feed(self, text: object) -> None:
        """Apply one frame (its JSON text)."""
        if not isinstance(text, str):
            raise FrameError("a frame must be a string of JSON")
        if len(text) > 4 * self.limit + 1024:
            raise FrameTooLarge("a frame is larger than the value may be")
        try:
            ops = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as error:
            raise FrameError(f"a frame is not JSON ({type(error).__name__})") from None
        if not isinstance(ops, list):
            raise FrameError("a frame must be an array of operations")
        self.frames += 1
        for op in ops:
            self._apply(op)

    def _apply(self, op: object) -> None:
        if not isinstance(op, list) or not op or not isinstance(op[0], str):
            raise FrameError("an operation must be an array starting with its name")
        name, args = op[0], op[1:]
        if self._pieces is not None and name not in ("s", "t", "K"):
            raise FrameError("a long string was left unfinished")
        if name == "v" and len(args) == 1:
            value = self._snapshot(args[0])
            self._add(value, json_size(value))
        elif name == "e" and len(args) == 1 and isinstance(args[0], list):
            self._extend(args[0])
        elif name == "m" and len(args) == 1 and isinstance(args[0], dict):
            self._update(args[0])
        elif name == "k" and len(args) == 1 and isinstance(args[0], str):
            self._set_key(args[0])
        elif name in ("a", "o") and not args:
            self._open(FrozenList() if name == "a" else FrozenDict())
        elif name == "c" and not args:
            self._close()
        elif name == "s" and len(args) == 1 and isinstance(args[0], str):
            if self._pieces is None:
                self._pieces = []
                self._charge(2)  # the quotes
            self._pieces.append(args[0])
            self._charge(json_size(args[0]) - 2)
        elif name in ("t", "K") and not args and self._pieces is not None:
            text, self._pieces = "".join(self._pieces), None
            if name == "t":
                self._add(text, 0)  # already charged, piece by piece
            else:
                self.size -= json_size(text)  # _set_key charges it again, with its colon
                self._set_key(text)
        else:
            raise FrameError(f"an unknown or malformed operation {name[:20]!r}")

    def _snapshot(self, value: object) -> JsonValue:
        try:
            return snapshot_json(value)
        except NotJsonError as error:
            raise FrameError(f"a frame holds a value that is not lossless JSON: {error}") \
                from None

    def _charge(self, size: int) -> None:
        self.size += size
        if self.size > self.limit:
            raise FrameTooLarge(f"the value passed {self.limit} bytes of JSON")

    def _before_element(self) -> None:
        """The comma before a new element of the open container, if it has one already."""
        if self._counts[-1]:
            self._charge(1)
        self._counts[-1] += 1

    def _add(self, value: JsonValue, size: int) -> None:
        if not self._stack:
            if self._root is not _NO_VALUE:
                raise FrameError("a value arrived after the value was complete")
            self._charge(size)
            self._root = value
            return
        top = self._stack[-1]
        if isinstance(top, FrozenDict):
            if self._key is None:
                raise FrameError("an object member arrived without its key")
            dict.__setitem__(top, self._key, value)
            self._key = None
            self._charge(size)  # the comma and key were charged with the key
        else:
            self._before_element()
            list.append(top, value)
            self._charge(size)

    def _extend(self, items: list[Any]) -> None:
        if not self._stack or not isinstance(self._stack[-1], FrozenList):
            raise FrameError("array elements arrived outside an array")
        if not items:
            return
        frozen = self._snapshot(items)
        assert isinstance(frozen, list)
        if self._counts[-1]:
            self._charge(1)
        self._counts[-1] += len(frozen)
        self._charge(json_size(frozen) - 2)
        list.extend(self._stack[-1], frozen)

    def _update(self, members: dict[str, Any]) -> None:
        if not self._stack or not isinstance(self._stack[-1], FrozenDict) \
                or self._key is not None:
            raise FrameError("object members arrived outside an object")
        if not members:
            return
        top = self._stack[-1]
        if any(key in top for key in members):
            raise FrameError("an object has a duplicate key")
        frozen = self._snapshot(members)
        assert isinstance(frozen, dict)
        if self._counts[-1]:
            self._charge(1)
        self._counts[-1] += len(frozen)
        self._charge(json_size(frozen) - 2)
        dict.update(top, frozen)

    def _set_key(self, key: str) -> None:
        if not self._stack or not isinstance(self._stack[-1], FrozenDict) \
                or self._key is not None:
            raise FrameError("a key arrived outside an object")
        if key in self._stack[-1]:
            raise FrameError("an object has a duplicate key")
        self._before_element()
        self._charge(json_size(key) + 1)  # and the colon
        self._key = key

    def _open(self, container: FrozenList | FrozenDict) -> None:
        if len(self._stack) >= MAX_DEPTH:
            raise FrameError(f"the value is nested more than {MAX_DEPTH} levels deep")
        self._add(container, 2)  # the brackets
        self._stack.append(container)
        self._counts.append(0)

    def _close(self) -> None:
        if not self._stack or self._key is not None:
            raise FrameError("a close arrived with no open container, or after a bare key")
        self._stack.pop()
        self._counts.pop()
