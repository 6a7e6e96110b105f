"""The part of a schema written outside the supported subset that can still be checked.

An MCP server's input schema is registered as the server wrote it: the model reads it and
the SDK types it (``anyOf`` alone is the union of its branches, so ``Optional[X]`` is
``X | None``). :func:`checkable_schema` derives what a call's arguments are validated
against before they reach the server. It only ever loosens, so no value the server's
schema accepts is rejected here; what it leaves out, the server still checks:

- an ``anyOf`` alone (annotations aside), as pydantic writes ``Optional[X]``
  (``{"anyOf": [X, {"type": "null"}]}``), becomes a ``oneOf`` when no two of its branches
  can accept the same value, where "exactly one" and "at least one" agree;
- value constraints (``minimum``, ``minItems``, ``pattern``, ...) are left to the server;
  a ``oneOf`` with a loosened branch is kept only if its branches are still disjoint
  ("exactly one" could otherwise start rejecting);
- anything else outside the subset (``$ref``, ``allOf``, type arrays, an ``anyOf`` whose
  branches overlap, ...) leaves the whole schema to the server: there is nothing checkable.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations
from typing import Any, cast

from dsh_jupyter.json_value import JsonObject

from .pydantic_schema import _overlap
from .schema_subset import _ANNOTATIONS, _CONSTRAINTS, schema_violations

__all__ = ["checkable_schema"]


MAX_DEPTH = 64
"""Schemas nested deeper than this are left to the server (no tool's arguments are)."""


class _Unchecked(Exception):
    """Nothing of this schema can be checked."""


def checkable_schema(schema: Mapping[str, Any]) -> JsonObject | None:
    """``schema`` itself when it is inside the subset; else a looser schema inside it
    (see the module docstring), or ``None`` when the arguments are left to the server.

    >>> checkable_schema({"properties": {"since": {"anyOf": [{"type": "string"},
    ...                                                      {"type": "null"}]}}})
    {'properties': {'since': {'oneOf': [{'type': 'string'}, {'type': 'null'}]}}}
    """
    if not schema_violations(schema):
        return cast(JsonObject, schema)
    try:
        loosened, _changed = _loosen(schema, 0)
    except _Unchecked:
        return None
    return loosened if not schema_violations(loosened) else None


def _loosen(node: object, depth: int) -> tuple[Any, bool]:
    """``node`` loosened, and whether it accepts more than before."""
    if depth > MAX_DEPTH:
        raise _Unchecked  # absurd nesting: bounded here, whatever the recursion limit
    if not isinstance(node, Mapping):
        return node, False  # not a schema: the subset check reports it
    if "anyOf" in node and set(node) - set(_ANNOTATIONS) == {"anyOf"}:
        branches, loosened = _union(node["anyOf"], depth, always_disjoint=True)
        out = {key: value for key, value in node.items() if key != "anyOf"}
        out["oneOf"] = branches
        return out, loosened
    out = {}
    loosened = False
    for key, value in node.items():
        if key in _CONSTRAINTS:
            loosened = True
            continue
        if key == "properties" and isinstance(value, Mapping):
            properties = {}
            for name, sub in value.items():
                properties[name], more = _loosen(sub, depth + 1)
                loosened = loosened or more
            out[key] = properties
        elif key == "items" and isinstance(value, Mapping):
            out[key], more = _loosen(value, depth + 1)
            loosened = loosened or more
        elif key == "oneOf":
            out[key], more = _union(value, depth, always_disjoint=False)
            loosened = loosened or more
        else:
            out[key] = value
    return out, loosened


def _union(branches: object, depth: int, *,
           always_disjoint: bool) -> tuple[list[Any], bool]:
    """Loosened branches of a union that ``oneOf`` checks as before (or, for an ``anyOf``,
    as the union of its branches): they must be pairwise disjoint when the union comes
    from an ``anyOf`` or when a branch was loosened."""
    if not isinstance(branches, list) or not branches:
        raise _Unchecked
    loosened = False
    out = []
    for branch in branches:
        new, more = _loosen(branch, depth + 1)
        out.append(new)
        loosened = loosened or more
    if (always_disjoint or loosened) and (
            any(schema_violations(branch) for branch in out)
            or any(_overlap(a, b) for a, b in combinations(out, 2))):
        raise _Unchecked
    return out, loosened
