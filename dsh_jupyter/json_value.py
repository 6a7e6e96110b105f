"""Lossless JSON values: the only data that crosses a boundary.

``snapshot_json`` turns a Python value into a frozen, detached JSON value or
says precisely what is not lossless JSON and where. JSON semantics: ``bool`` is
never a number, ``1.0`` is a number equal to ``1``, and NaN, ±Infinity and
``-0.0`` are rejected because they do not survive a JSON round trip. Objects
become :class:`FrozenDict` (a ``dict``) and arrays :class:`FrozenList` (a
``list``), so ``json.dumps`` and ``isinstance`` checks keep working while
mutation raises ``TypeError``. Every traversal here uses an explicit stack:
values nested thousands of levels deep never hit the recursion limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from json.encoder import encode_basestring
from typing import Any, NoReturn, TypeAlias, cast

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"


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


def snapshot_json(value: object, *, freeze: bool = True) -> JsonValue:
    """Detach ``value`` as lossless JSON (frozen unless ``freeze=False``).

    Raises :class:`NotJsonError` naming the first offending path. Linear in the size of
    the value whatever its shape (paths are built only for the error).
    """
    try:
        scalar = _scalar(value)
    except _Problem as problem:
        raise NotJsonError("", problem.text) from None
    if scalar is not _CONTAINER:
        return scalar  # type: ignore[return-value]
    if type(value) is dict or type(value) is FrozenDict:
        flat = _flat_object(cast(dict[Any, Any], value))
        if flat is not None:
            return FrozenDict(flat) if freeze else flat
    dict_cls: type[dict[str, Any]] = FrozenDict if freeze else dict
    list_cls: type[list[Any]] = FrozenList if freeze else list
    active: set[int] = set()
    # Each frame: (source container, its path node, pending output items, iterator). A path
    # node is (parent node, key): rendered as text only when a problem is found.
    root_out: list[Any] = []
    stack: list[tuple[object, _PathNode, list[Any], Iterator[Any]]] = []

    def open_frame(container: object, node: _PathNode) -> None:
        if id(container) in active:
            raise NotJsonError(_render(node), "is part of a reference cycle")
        active.add(id(container))
        if isinstance(container, dict):
            flat_object = _flat_object(container)
            if flat_object is not None:  # built when popped, from the copy
                stack.append((container, node, [(_FLAT, flat_object)], iter(())))
            else:
                stack.append((container, node, [], iter(container.items())))
            return
        items = cast(list[Any], container)
        flat = _flat_list(items)
        if flat is not None:  # nothing to walk: the frame is built when it is popped
            stack.append((container, node, [(_FLAT, flat)], iter(())))
        else:
            stack.append((container, node, [], iter(enumerate(items))))

    open_frame(value, None)
    while stack:
        container, node, out, items = stack[-1]
        is_dict = isinstance(container, dict)
        for key, child in items:
            if is_dict and not isinstance(key, str):
                raise NotJsonError(_render(node),
                                   f"has a non-string key {key!r} ({_describe(key)})")
            try:
                converted = _scalar(child)
            except _Problem as problem:
                raise NotJsonError(_render((node, key)), problem.text) from None
            if converted is _CONTAINER:
                # A container of scalars alone (most rows of a table) needs no frame, and
                # cannot be part of a cycle.
                if isinstance(child, dict):
                    flat_object = _flat_object(child)
                    if flat_object is not None:
                        out.append((key, dict_cls(flat_object)))
                        continue
                else:
                    flat_list = _flat_list(cast(list[Any], child))
                    if flat_list is not None:
                        out.append((key, list_cls(flat_list)))
                        continue
                out.append((key, None))
                open_frame(child, (node, key))
                break
            out.append((key, converted))
        else:
            stack.pop()
            active.discard(id(container))
            built: Any
            if out and out[0][0] is _FLAT:
                built = (dict_cls if is_dict else list_cls)(out[0][1])
            elif is_dict:
                built = dict_cls(out)
            else:
                built = list_cls(v for _, v in out)
            if stack:
                parent_out = stack[-1][2]
                k, _ = parent_out[-1]
                parent_out[-1] = (k, built)
            else:
                root_out.append(built)
    result: JsonValue = root_out[0]
    return result


_PathNode = tuple[Any, "str | int"] | None


def _render(node: _PathNode) -> str:
    keys: list[str | int] = []
    while node is not None:
        node, key = node
        keys.append(key)
    path = ""
    for key in reversed(keys):
        path = join_path(path, key)
    return path


class _Problem(Exception):
    """A node is not lossless JSON (the caller adds where)."""

    def __init__(self, text: str) -> None:
        self.text = text


class _Container:
    pass


_PLAIN_SCALARS = (str, int, bool, type(None))
_PLAIN_SCALAR_SET = frozenset(_PLAIN_SCALARS)
_FLAT: Any = object()


def _flat_object(value: dict[Any, Any]) -> dict[str, Any] | None:
    """Fast path for the common case, an object of plain scalars (tool arguments):
    ``None`` when any key or value needs the general walk."""
    for key, item in value.items():
        if type(key) is not str or type(item) not in _PLAIN_SCALARS:
            return None
    return dict(value)


def _flat_list(value: list[Any]) -> list[Any] | None:
    """Fast path for an array of plain scalars and finite floats (a column of numbers):
    its element types are collected in C. ``None`` when it needs the general walk (which
    also names the index of a problem)."""
    kinds = set(map(type, value))
    if kinds <= _PLAIN_SCALAR_SET:
        return list(value)
    if kinds <= _PLAIN_SCALAR_SET | {float}:
        floats = [x for x in value if type(x) is float]
        if all(math.isfinite(x) and (x != 0.0 or math.copysign(1.0, x) > 0) for x in floats):
            return list(value)
    return None


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


def dump_json(value: JsonValue, *, indent: int | None = None, compact_depth: int = 5) -> str:
    """Serialise JSON without recursion (``json.dumps`` fails past ~1,000 levels).

    With ``indent``, containers are pretty-printed until ``compact_depth`` levels
    of nesting; a container at that depth or deeper is written compactly, which
    caps indentation for deep values. Non-ASCII text is kept as is.
    """
    encode = _STRING_ENCODER
    out: list[str] = []
    # Stack of pending work: either a literal string to emit or (value, depth).
    stack: list[tuple[object, int] | str] = [(value, 0)]
    pretty = indent is not None
    while stack:
        work = stack.pop()
        if isinstance(work, str):
            out.append(work)
            continue
        node, depth = work
        if isinstance(node, str):
            out.append(encode(node))
        elif node is None:
            out.append("null")
        elif node is True:
            out.append("true")
        elif node is False:
            out.append("false")
        elif isinstance(node, int | float):
            out.append(_FLOAT_REPR(node) if isinstance(node, float) else int.__repr__(node))
        elif isinstance(node, dict | list):
            is_dict = isinstance(node, dict)
            open_, close = ("{", "}") if is_dict else ("[", "]")
            items: list[tuple[Any, Any]] = (
                list(cast(dict[str, Any], node).items()) if is_dict
                else list(enumerate(cast(list[Any], node))))
            if not node:
                out.append(open_ + close)
                continue
            expand = pretty and depth < compact_depth
            if expand:
                assert indent is not None
                inner = "\n" + " " * (indent * (depth + 1))
                outer = "\n" + " " * (indent * depth)
                sep = "," + inner
            else:
                inner = outer = ""
                sep = ", " if pretty else ","
            pieces: list[tuple[object, int] | str] = [open_ + inner]
            for i, (key, child) in enumerate(items):
                if i:
                    pieces.append(sep)
                if is_dict:
                    pieces.append(encode(key) + (": " if pretty else ":"))
                pieces.append((child, depth + 1))
            pieces.append(outer + close)
            stack.extend(reversed(pieces))
        else:
            raise NotJsonError("", f"contains a {_describe(node)}, which is not a JSON value")
    return "".join(out)


def _float_repr(value: float) -> str:
    if value != value or value in (math.inf, -math.inf):
        raise NotJsonError("", "contains NaN or Infinity, which is not lossless JSON")
    return float.__repr__(value)


_FLOAT_REPR = _float_repr


_STRING_ENCODER: Callable[[str], str] = encode_basestring
