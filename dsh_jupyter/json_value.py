"""Lossless JSON values: the only data that crosses a boundary.

``snapshot_json`` turns a Python value into a frozen, detached JSON value or
says precisely what is not lossless JSON and where. JSON semantics: ``bool`` is
never a number, ``1.0`` is a number equal to ``1``, and NaN, ±Infinity and
``-0.0`` are rejected because they do not survive a JSON round trip. Objects
become :class:`FrozenDict` (a ``dict``) and arrays :class:`FrozenList` (a
``list``), so ``json.dumps`` and ``isinstance`` checks keep working while
mutation raises ``TypeError``. Every traversal here uses an explicit stack:
values nested thousands of levels deep never hit the recursion limit.

Large values may be snapshotted and dumped in a worker thread while the event loop
runs; a C call holds the GIL until it returns, so no single C-level step here scales
with the value: flat containers are checked, copied and encoded ``_CHUNK`` elements
at a time, and long strings ``_CHUNK_CHARS`` characters at a time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, NoReturn, TypeAlias, cast

__all__ = [
    "JsonObject",
    "JsonValue",
    "NotJsonError",
    "snapshot_json",
]

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"

# At most this many elements (or string characters) go through one C call: a few
# milliseconds, after which a worker thread can hand the GIL back to the event loop.
_CHUNK = 20_000
_CHUNK_CHARS = 1 << 20


def breathe() -> None:
    """Between two chunks: let another thread take the GIL at once. A thread waiting for
    the GIL otherwise gets it only when the holder's switch interval (5 ms) runs out, and
    the event loop, whose every system call releases and retakes it, would pay that
    again and again while a worker thread renders a large value."""
    time.sleep(0)


def _immutable(self: object, *_: object, **__: object) -> NoReturn:
    raise TypeError(
        f"{type(self).__name__} is immutable: snapshot values are frozen; copy with thaw()")


class FrozenDict(dict[str, Any]):
    """A JSON object that refuses mutation (still a ``dict`` for readers)."""

    __slots__ = ()
    __setitem__ = __delitem__ = _immutable
    clear = pop = popitem = setdefault = update = __ior__ = _immutable

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: object) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[object, ...]:
        return (dict, (dict(self),))


class FrozenList(list[Any]):
    """A JSON array that refuses mutation (still a ``list`` for readers)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _immutable
    append = extend = insert = pop = remove = clear = sort = reverse = _immutable

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: object) -> FrozenList:
        return self

    def __reduce__(self) -> tuple[object, ...]:
        return (list, (list(self),))


_FROZEN: frozenset[type] = frozenset((FrozenDict, FrozenList))


class NotJsonError(ValueError):
    """A value is not lossless JSON; ``path`` says where (``""`` is the root)."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        where = f'"{path}"' if path else "the value"
        super().__init__(f"{where} {problem}")


def join_path(parent: str, key: str | int) -> str:
    """``config`` + ``host`` -> ``config.host``; ``tags`` + 1 -> ``tags[1]``."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def _describe(value: object) -> str:
    return type(value).__name__


def snapshot_json(value: object, *, freeze: bool = True,
                  max_depth: int | None = None) -> JsonValue:
    """Detach ``value`` as lossless JSON (frozen unless ``freeze=False``).

    Raises :class:`NotJsonError` naming the first offending path, also for containers
    nested deeper than ``max_depth`` (when given; found without walking the rest). Linear
    in the size of the value whatever its shape (paths are built only for the error).

    A frozen value (a :class:`FrozenDict` or :class:`FrozenList`, which only this function
    builds) is returned as it is when a frozen value is asked for: it is a snapshot
    already, and nothing can change it. A sub-call's arguments pass four stages that each
    snapshot them; they are walked once.
    """
    if freeze and max_depth is None and type(value) in _FROZEN:
        return cast(JsonValue, value)
    try:
        scalar = _scalar(value)
    except _Problem as problem:
        raise NotJsonError("", problem.text) from None
    if scalar is not _CONTAINER:
        return scalar  # type: ignore[return-value]
    dict_cls: type[dict[str, Any]] = FrozenDict if freeze else dict
    list_cls: type[list[Any]] = FrozenList if freeze else list
    flat = (_flat_object(value, dict_cls) if isinstance(value, dict)
            else _flat_list(cast(list[Any], value), list_cls))
    if flat is not None:
        return flat
    active: set[int] = set()
    # Each frame: (source container, its keys (None for an array), its converted values
    # so far, iterator). Paths are rendered from the frames only when a problem is found.
    stack: list[_Frame] = []

    def open_frame(container: object) -> None:
        if id(container) in active:
            raise NotJsonError(_path(stack, len(stack)), "is part of a reference cycle")
        active.add(id(container))
        if isinstance(container, dict):
            stack.append((container, [], [], iter(container.items())))
        else:
            stack.append((container, None, [], iter(enumerate(cast(list[Any], container)))))

    open_frame(value)
    result: Any = None
    while stack:
        container, keys, values, items = stack[-1]
        for key, child in items:
            if keys is not None:
                if not isinstance(key, str):
                    raise NotJsonError(_path(stack, len(stack) - 1),
                                       f"has a non-string key {key!r} ({_describe(key)})")
                keys.append(key)
            try:
                converted = _scalar(child)
            except _Problem as problem:
                raise NotJsonError(join_path(_path(stack, len(stack) - 1), key),
                                   problem.text) from None
            if converted is _CONTAINER:
                if max_depth is not None and len(stack) >= max_depth:
                    raise NotJsonError("", f"is nested more than {max_depth} levels deep")
                # A container of scalars alone (most rows of a table) needs no frame, and
                # cannot be part of a cycle.
                flat = (_flat_object(child, dict_cls) if isinstance(child, dict)
                        else _flat_list(child, list_cls))
                if flat is not None:
                    values.append(flat)
                    continue
                values.append(None)  # replaced by the child once its frame is done
                open_frame(child)
                break
            values.append(converted)
        else:
            stack.pop()
            active.discard(id(container))
            built = (_build_list(values, list_cls) if keys is None
                     else _build_dict(zip(keys, values, strict=True), len(keys), dict_cls))
            if stack:
                stack[-1][2][-1] = built
            else:
                result = built
    return cast(JsonValue, result)


_Frame = tuple[object, "list[str] | None", list[Any], Iterator[Any]]


def _path(stack: list[_Frame], depth: int) -> str:
    """The path of the container at ``stack[depth]`` (one past the top: the child the top
    frame is opening): each frame below it is at its last key."""
    path = ""
    for _, keys, values, _ in stack[:depth]:
        path = join_path(path, keys[-1] if keys is not None else len(values) - 1)
    return path


class _Problem(Exception):
    """A node is not lossless JSON (the caller adds where)."""

    def __init__(self, text: str) -> None:
        self.text = text


class _Container:
    pass


_PLAIN_SCALARS = (str, int, bool, type(None))
_PLAIN_SCALAR_SET = frozenset(_PLAIN_SCALARS)


def _flat_object(value: dict[Any, Any], cls: type[dict[str, Any]]) -> dict[str, Any] | None:
    """Fast path for the common case, an object of plain scalars (tool arguments), built
    as ``cls``: ``None`` when any key or value needs the general walk."""
    for key, item in value.items():
        if type(key) is not str or type(item) not in _PLAIN_SCALARS:
            return None
    return cls(value) if len(value) <= _CHUNK else _build_dict(value.items(), len(value), cls)


def _flat_list(value: list[Any], cls: type[list[Any]]) -> list[Any] | None:
    """Fast path for an array of plain scalars and finite floats (a column of numbers),
    built as ``cls``: its element types are collected in C. ``None`` when it needs the
    general walk (which also names the index of a problem)."""
    kinds: set[type] = set(map(type, value[:_CHUNK]))
    for start in range(_CHUNK, len(value), _CHUNK):
        breathe()
        kinds.update(map(type, value[start:start + _CHUNK]))
    if not kinds <= _PLAIN_SCALAR_SET:
        if not kinds <= _PLAIN_SCALAR_SET | {float}:
            return None
        floats = [x for x in value if type(x) is float]
        if not all(math.isfinite(x) and (x != 0.0 or math.copysign(1.0, x) > 0)
                   for x in floats):
            return None
    return _build_list(value, cls)


def _build_list(values: list[Any], cls: type[list[Any]]) -> list[Any]:
    """``cls(values)``, copied ``_CHUNK`` items per C call."""
    if len(values) <= _CHUNK:
        return cls(values)
    built = cls()
    for start in range(0, len(values), _CHUNK):
        list.extend(built, values[start:start + _CHUNK])  # list's own: FrozenList's refuses
        breathe()
    return built


def _build_dict(items: Iterable[tuple[str, Any]], size: int,
                cls: type[dict[str, Any]]) -> dict[str, Any]:
    """``cls(items)`` (``size`` of them), inserted ``_CHUNK`` items per C call."""
    if size <= _CHUNK:
        return cls(items)
    built = cls()
    pending = iter(items)
    while chunk := dict(islice(pending, _CHUNK)):
        dict.update(built, chunk)  # dict's own method: FrozenDict's refuses
        breathe()
    return built


_CONTAINER: Any = _Container()


def _scalar(value: object) -> object:
    # Exact-type fast paths first: this runs once per JSON node.
    cls = type(value)
    if cls is str or value is None or cls is bool or cls is int:
        return value
    if cls is float:
        return _check_float(value)  # type: ignore[arg-type]
    if cls is dict or cls is FrozenDict or cls is list or cls is FrozenList:
        return _CONTAINER
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _check_float(float(value))
    if isinstance(value, dict | list):
        return _CONTAINER
    if isinstance(value, tuple):
        raise _Problem("is a tuple, not a JSON array: pass a list")
    raise _Problem(f"is a {_describe(value)}, which is not a JSON value")


def _check_float(value: float) -> float:
    if math.isnan(value):
        raise _Problem("is NaN, which is not lossless JSON")
    if math.isinf(value):
        raise _Problem("is infinite, which is not lossless JSON")
    if value == 0.0 and math.copysign(1.0, value) < 0:
        raise _Problem("is -0.0, which is not lossless JSON (it reads back as 0)")
    return value


def thaw(value: JsonValue) -> JsonValue:
    """A mutable deep copy of a (possibly frozen) JSON value."""
    return snapshot_json(value, freeze=False)


def is_json_integer(value: object) -> bool:
    """JSON integers: ints (not bools) and integral floats such as ``1.0``."""
    cls = type(value)
    if cls is int:
        return True
    if cls is float:
        return value.is_integer()  # type: ignore[attr-defined, no-any-return]
    return False


def is_json_number(value: object) -> bool:
    cls = type(value)
    return cls is int or cls is float
