"""What a program's values must be to cross to the host: lossless JSON (checked here, so
the program learns what is wrong and where), compact, and failure messages short enough
for one message."""

from __future__ import annotations

import json
import math
from typing import Any

JsonValue = Any  # the kernel side checks values at run time (see json_problem)
MAX_DEPTH = 500
MAX_MESSAGE_TEXT = 128 * 1024


def json_problem(value: object) -> str | None:
    """Why ``value`` is not lossless JSON (naming the type and path), or ``None``. Values
    nested deeper than :data:`MAX_DEPTH` are refused too: JSON codecs recurse, and the
    host's would fail on them."""
    # Paths are linked (parent, key) pairs, rendered only for the problem found.
    stack: list[tuple[object, _Path]] = [(value, None)]
    active: set[int] = set()
    exits: list[int] = []
    while stack:
        item, path = stack.pop()
        if item is _EXIT:
            active.discard(exits.pop())
            continue
        if len(exits) >= MAX_DEPTH and (type(item) is dict or type(item) is list):
            return (f"it is nested more than {MAX_DEPTH} levels deep ({_where(path)}): "
                    "flatten it")
        cls = type(item)
        if item is None or cls is bool or cls is int or cls is str:
            continue
        if cls is float:
            number: float = item  # type: ignore[assignment]
            if math.isnan(number) or math.isinf(number):
                return f"{_where(path)} is {number!r}, which is not JSON"
            if number == 0.0 and math.copysign(1.0, number) < 0:
                return f"{_where(path)} is -0.0, which does not survive JSON"
            continue
        if cls is list and _plain_list(item):  # type: ignore[arg-type]
            continue  # a column of plain scalars: checked in C, nothing to walk
        if cls is dict or cls is list:
            if id(item) in active:
                return f"{_where(path)} is part of a reference cycle"
            active.add(id(item))
            exits.append(id(item))
            stack.append((_EXIT, path))
            if cls is dict:
                for key, child in reversed(list(item.items())):  # type: ignore[attr-defined]
                    if type(key) is not str:
                        return (f"{_where(path)} has a key of type {type(key).__name__}:"
                                " keys must be str")
                    stack.append((child, (path, key)))
            else:
                children: list[object] = item  # type: ignore[assignment]
                for index in reversed(range(len(children))):
                    stack.append((children[index], (path, index)))
            continue
        if cls is tuple:
            return f"{_where(path)} is a tuple, which is not a JSON array: use a list"
        return f"{_where(path)} is of type {cls.__name__}, which is not JSON"
    return None


_Path = tuple[Any, "str | int"] | None
_PLAIN = frozenset((str, int, bool, type(None)))


def _plain_list(items: list[object]) -> bool:
    """Whether ``items`` holds only plain scalars and JSON-safe floats (types checked in C;
    a list that is not skips nothing: the walk then names the problem)."""
    if len(items) < 64:
        return False
    kinds = set(map(type, items))
    if kinds <= _PLAIN:
        return True
    return kinds <= _PLAIN | {float} and all(
        math.isfinite(x) and (x or math.copysign(1.0, x) > 0)
        for x in items if type(x) is float)


def _where(path: _Path) -> str:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    if not keys:
        return "the value"
    text = ""
    for key in reversed(keys):
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return f"at {text}"


_EXIT = object()


def compact_json(value: JsonValue) -> str:
    """The compact JSON the host counts (non-ASCII kept, no spaces)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def clip(text: str) -> str:
    """A failure message short enough for one message (the host caps message size)."""
    if len(text) <= MAX_MESSAGE_TEXT:
        return text
    return text[:MAX_MESSAGE_TEXT] + f"… ({len(text) - MAX_MESSAGE_TEXT} more characters)"
