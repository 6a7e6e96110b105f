"""JSON text of any depth, fast: ``dump_json``.

``json.dumps`` recurses (it fails past ~1,000 levels) and, with ``indent``, runs the
pure-Python encoder. :func:`dump_json` walks with an explicit stack and hands every run
of scalars and every run of table rows to the C encoder, with separators that carry
the newline and indentation of their level. No C-level step scales with the value
(``_CHUNK`` elements or ``_CHUNK_CHARS`` characters at a time), so a large value can be
dumped in a worker thread while the event loop runs.
"""

from __future__ import annotations

import json.encoder
import math
from collections.abc import Callable, Collection, Iterator
from itertools import chain, islice
from json.encoder import JSONEncoder, encode_basestring
from typing import Any, NoReturn, cast

from .json_value import (
    _CHUNK,
    _CHUNK_CHARS,
    FrozenDict,
    FrozenList,
    JsonValue,
    NotJsonError,
    _describe,
    breathe,
)


def dump_json(value: JsonValue, *, indent: int | None = None, compact_depth: int = 5) -> str:
    """Serialise JSON without recursion (``json.dumps`` fails past ~1,000 levels).

    With ``indent``, containers are pretty-printed until ``compact_depth`` levels
    of nesting; a container at that depth or deeper is written compactly, which
    caps indentation for deep values. Non-ASCII text is kept as is; floats are
    written as ``float.__repr__``; NaN and ±Infinity raise :class:`NotJsonError`.
    """
    return _Dumper(indent, compact_depth).dump(value)


_RUN_SCALARS = frozenset({str, int, float, bool, type(None)})
_BLOCK = 4096  # output pieces joined at a time, so no single join scales with the value


class _Dumper:
    """One ``dump_json`` call: an explicit stack of work (literal text, a ``(node,
    depth)`` to write, or the lazy pieces of a container longer than ``_CHUNK``).

    Most of the text is written by the C encoder, ``_CHUNK`` elements at a time: runs of
    scalars (a flat container, or a chunk of a long one) with an item separator that
    carries the newline and indentation of their level, and runs of flat containers
    (the rows of a table) as described at :meth:`_encode_rows`. The encoder agrees with
    the walk on every plain scalar (``float.__repr__``, ``int.__repr__``, the same string
    escaper), so the text is the same either way; anything else (subclasses, NaN,
    non-JSON values) is left to the walk, which reports it as before."""

    __slots__ = ("_compact_depth", "_compact_sep", "_encoders", "_indent", "_key_sep",
                 "_layouts")

    def __init__(self, indent: int | None, compact_depth: int) -> None:
        self._indent = indent
        self._compact_depth = compact_depth
        self._key_sep = ": " if indent is not None else ":"
        self._compact_sep = ", " if indent is not None else ","
        self._encoders: dict[str, Callable[[object], str]] = {}
        self._layouts: dict[int, tuple[str, str, str]] = {}

    def dump(self, value: object) -> str:
        out: list[str] = []
        blocks: list[str] = []
        stack: list[object] = [(value, 0)]
        while stack:
            work = stack.pop()
            if type(work) is str:
                out.append(work)
            elif type(work) is tuple:
                node, depth = work
                if isinstance(node, dict | list):
                    self._container(node, depth, out, stack)
                else:
                    _write_scalar(node, out)
            else:
                for piece in cast(Iterator[object], work):
                    if type(piece) is str:
                        out.append(piece)
                    else:  # write the child, then come back for the rest
                        stack.append(work)
                        stack.append(piece)
                        break
            if len(out) >= _BLOCK:
                blocks.append("".join(out))
                out.clear()
        blocks.append("".join(out))
        return "".join(blocks)

    def _container(self, node: dict[Any, Any] | list[Any], depth: int, out: list[str],
                   stack: list[object]) -> None:
        if not node:
            out.append("{}" if isinstance(node, dict) else "[]")
            return
        if len(node) > _CHUNK:
            stack.append(self._long_pieces(node, depth))
            return
        inner, outer, sep = self._layout(depth)
        text = self._encode_run(node, sep)
        if text is not None:
            out.append(f"{text[0]}{inner}{text[1:-1]}{outer}{text[-1]}" if inner else text)
            return
        # Not a run of scalars: its items are written one by one (or as rows).
        pieces: list[object]
        if isinstance(node, dict):
            pieces = ["{" + inner]
            child_depth = depth + 1
            key_sep = self._key_sep
            for key, child in node.items():
                # The key is escaped now: a non-string key fails before any value is written.
                pieces.append(_STRING_ENCODER(key) + key_sep)
                pieces.append((child, child_depth))
                pieces.append(sep)
            pieces[-1] = outer + "}"
        else:
            pieces = ["[" + inner]
            self._array_items(node, depth, True, pieces, scalars=False)
            pieces.append(outer + "]")
        pieces.reverse()
        stack.extend(pieces)

    def _long_pieces(self, node: dict[Any, Any] | list[Any], depth: int) -> Iterator[object]:
        """The pieces of a container longer than ``_CHUNK``, ``_CHUNK`` children at a time."""
        inner, outer, sep = self._layout(depth)
        first = True
        if isinstance(node, dict):
            _check_keys(node)
            yield "{" + inner
            child_depth = depth + 1
            items = iter(node.items())
            while chunk := dict(islice(items, _CHUNK)):
                breathe()
                text = self._encode_run(chunk, sep)
                if text is not None:
                    yield text[1:-1] if first else sep + text[1:-1]
                    first = False
                    continue
                for key, child in chunk.items():
                    key_text = _STRING_ENCODER(key) + self._key_sep
                    yield key_text if first else sep + key_text
                    yield (child, child_depth)
                    first = False
            yield outer + "}"
            return
        yield "[" + inner
        for start in range(0, len(node), _CHUNK):
            breathe()
            pieces: list[object] = []
            self._array_items(node[start:start + _CHUNK], depth, first, pieces)
            yield from pieces
            first = False
        yield outer + "]"

    def _array_items(self, run: list[Any], depth: int, first: bool, pieces: list[object],
                     *, scalars: bool = True) -> None:
        """Append the pieces of ``run`` (at most ``_CHUNK`` consecutive items of an array
        at ``depth``), with a separator before each item but the first of the array.
        ``scalars=False``: the run is known not to be a run of scalars."""
        sep = self._layout(depth)[2]
        text = self._encode_run(run, sep) if scalars else None
        if text is not None:
            pieces.append(text[1:-1] if first else sep + text[1:-1])
            return
        child_depth = depth + 1
        groups = _row_groups(run) if len(run) > 1 else None
        if groups is None:
            for child in run:
                if not first:
                    pieces.append(sep)
                pieces.append((child, child_depth))
                first = False
            return
        for start, end in groups:
            rows = run[start:end]
            text = self._encode_rows(rows, child_depth, sep) if end - start > 1 else None
            if text is not None:
                pieces.append(text if first else sep + text)
                first = False
                continue
            for child in rows:
                if not first:
                    pieces.append(sep)
                pieces.append((child, child_depth))
                first = False

    def _encode_rows(self, rows: list[Any], depth: int, parent_sep: str) -> str | None:
        """Non-empty flat containers of one kind at ``depth`` (table rows), ``parent_sep``
        between them, written by one C call; ``None`` if they are not that.

        The encoder uses one item separator at every level, so the rows are encoded with
        ``",\\n"`` and laid out after. That is exact because JSON text never holds a raw
        newline inside a string: every newline is a separator, and a separator between
        two rows is the only one with a closing bracket before it (a row's own separators
        follow a scalar)."""
        open_, close = ("{", "}") if isinstance(rows[0], dict) else ("[", "]")
        if open_ == "{":
            keys = list(chain.from_iterable(rows))
            if not _is_scalar_run(list(chain.from_iterable(map(dict.values, rows))), keys=keys):
                return None
        elif not _is_scalar_run(list(chain.from_iterable(rows))):
            return None
        raw = self._encode(rows, ",\n")
        if raw is None:
            return None
        inner, outer, sep = self._layout(depth)
        text = (raw[2:-2]  # the rows without the outer array's and the ends' brackets
                .replace(close + ",\n" + open_, close + "\n" + open_)  # mark the row ends
                .replace(",\n", sep)  # separators inside rows
                .replace(close + "\n" + open_, outer + close + parent_sep + open_ + inner))
        return f"{open_}{inner}{text}{outer}{close}"

    def _layout(self, depth: int) -> tuple[str, str, str]:
        """(after the opening bracket, before the closing one, between items) at ``depth``."""
        layout = self._layouts.get(depth)
        if layout is None:
            if self._indent is not None and depth < self._compact_depth:
                inner = "\n" + " " * (self._indent * (depth + 1))
                layout = (inner, "\n" + " " * (self._indent * depth), "," + inner)
            else:
                layout = ("", "", self._compact_sep)
            self._layouts[depth] = layout
        return layout

    def _encode_run(self, run: dict[Any, Any] | list[Any], sep: str) -> str | None:
        """``run`` as the C encoder writes it with ``sep`` between items, brackets
        included; ``None`` unless it is a bounded run of plain scalars."""
        if isinstance(run, dict):
            if not _is_scalar_run(run.values(), keys=run):
                return None
        elif not _is_scalar_run(run):
            return None
        return self._encode(run, sep)

    def _encode(self, value: object, sep: str) -> str | None:
        """The C encoder's text; ``None`` for NaN, ±Infinity and ints too long for
        ``int.__repr__``, which the walk reports."""
        encode = self._encoders.get(sep)
        if encode is None:
            encode = _c_encoder(sep, self._key_sep)
            self._encoders[sep] = encode
        try:
            return encode(value)
        except ValueError:
            return None


def _row_groups(run: list[Any]) -> list[tuple[int, int]] | None:
    """If ``run`` is all non-empty objects or all non-empty arrays (table rows), the
    slices to encode at once: at most ``_CHUNK`` elements in all, or one row."""
    kinds = set(map(type, run))
    if not (kinds <= _OBJECT_TYPES or kinds <= _ARRAY_TYPES):
        return None
    sizes = list(map(len, run))
    if min(sizes) == 0:
        return None
    groups: list[tuple[int, int]] = []
    start = total = 0
    for index, size in enumerate(sizes):
        if total + size > _CHUNK and index > start:
            groups.append((start, index))
            start, total = index, 0
        total += size
    groups.append((start, len(run)))
    return groups if len(groups) < len(run) else None  # one row a slice: no gain


_OBJECT_TYPES = frozenset[type]((dict, FrozenDict))
_ARRAY_TYPES = frozenset[type]((list, FrozenList))


def _c_encoder(item_sep: str, key_sep: str) -> Callable[[object], str]:
    """What ``json.dumps(value, ensure_ascii=False, allow_nan=False, separators=...)``
    does for a list or dict, minus its per-call setup."""
    if _C_MAKE_ENCODER is None:  # an interpreter without the _json accelerator
        return JSONEncoder(ensure_ascii=False, separators=(item_sep, key_sep),
                           allow_nan=False, check_circular=False).encode
    encoder = _C_MAKE_ENCODER(None, _no_default, encode_basestring, None, key_sep, item_sep,
                              False, False, False)
    return lambda value: "".join(encoder(value, 0))


# What JSONEncoder itself calls (None without the accelerator); calling it directly saves
# the setup that dominates encoding a small object.
_C_MAKE_ENCODER: Callable[..., Callable[[object, int], Any]] | None = getattr(
    json.encoder, "c_make_encoder", None)


def _no_default(value: object) -> NoReturn:
    raise TypeError(f"{_describe(value)} is not JSON")  # never reached: runs are plain


def _write_scalar(node: object, out: list[str]) -> None:
    if isinstance(node, str):
        if len(node) <= _CHUNK_CHARS:
            out.append(_STRING_ENCODER(node))
            return
        out.append('"')
        for start in range(0, len(node), _CHUNK_CHARS):
            breathe()
            out.append(_STRING_ENCODER(node[start:start + _CHUNK_CHARS])[1:-1])
        out.append('"')
    elif node is None:
        out.append("null")
    elif node is True:
        out.append("true")
    elif node is False:
        out.append("false")
    elif isinstance(node, int | float):
        out.append(_FLOAT_REPR(node) if isinstance(node, float) else int.__repr__(node))
    else:
        raise NotJsonError("", f"contains a {_describe(node)}, which is not a JSON value")


def _is_scalar_run(values: Collection[Any], *, keys: Collection[Any] = ()) -> bool:
    """Whether one C call may write these values (and string keys): plain JSON scalars
    of exact types, at most ``_CHUNK`` of them and ``_CHUNK_CHARS`` characters of text."""
    if len(values) > _CHUNK:
        return False
    kinds = set(map(type, values))
    if not kinds <= _RUN_SCALARS:
        return False
    chars = 0
    if keys:
        if set(map(type, keys)) != _STR_ONLY:
            return False
        chars = sum(map(len, keys))
    if str in kinds:
        chars += (sum(map(len, values)) if len(kinds) == 1
                  else sum(len(v) for v in values if type(v) is str))
    return chars <= _CHUNK_CHARS


_STR_ONLY = frozenset({str})


def _check_keys(node: dict[Any, Any]) -> None:
    """Raise the ``TypeError`` the string escaper gives for a non-string key, as soon as
    the object is opened (before any of its values is written)."""
    keys = iter(node)
    while chunk := list(islice(keys, _CHUNK)):
        if set(map(type, chunk)) != _STR_ONLY:
            for key in chunk:
                _STRING_ENCODER(key)


def _float_repr(value: float) -> str:
    if value != value or value in (math.inf, -math.inf):
        raise NotJsonError("", "contains NaN or Infinity, which is not lossless JSON")
    return float.__repr__(value)


_FLOAT_REPR = _float_repr


_STRING_ENCODER: Callable[[str], str] = encode_basestring
