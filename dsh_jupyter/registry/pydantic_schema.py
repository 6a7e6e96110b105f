"""Turn the JSON Schema that pydantic v2 emits into a schema inside the supported subset.

pydantic stays the real validator of typed tools; the subset schema is what models read and
what the pipeline checks first, so it must never reject a value pydantic accepts. Whatever the
subset cannot say is therefore loosened, never tightened: value constraints (``minimum``,
``pattern``, ...) are dropped, ``dict[str, X]`` keeps ``X`` (as ``additionalProperties``) but
not constraints on its keys, tuples become plain arrays, and ``anyOf`` becomes ``oneOf`` only
where its branches are disjoint (overlapping branches merge into their JSON types, so
``int | float`` is a number). ``$defs``/``$ref`` are inlined; a recursive type is an error
because the subset has no references.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

from dsh_jupyter.errors import UnsupportedSchemaError
from dsh_jupyter.json_value import (
    JsonObject,
    JsonValue,
    NotJsonError,
    is_json_integer,
    join_path,
    snapshot_json,
)

from .schema import SUPPORTED_TYPES, assert_supported_schema

__all__ = ["subset_from_pydantic"]

_Schema: TypeAlias = dict[str, Any]

# Annotations worth keeping for a model reading the schema (``title`` is noise: pydantic derives
# it from the field name); None means any lossless JSON value.
_KEPT: dict[str, type | None] = {
    "description": str, "$comment": str, "format": str, "deprecated": bool, "readOnly": bool,
    "writeOnly": bool, "examples": list, "default": None,
}


def subset_from_pydantic(json_schema: Mapping[str, Any], *, what: str = "schema") -> JsonObject:
    """An equivalent or looser schema inside the subset for pydantic's ``json_schema``.

    Accepts what ``TypeAdapter(T).json_schema()`` or ``Model.model_json_schema()`` return.
    Raises :class:`UnsupportedSchemaError` for recursive types and unresolvable ``$ref``.

    >>> from pydantic import TypeAdapter
    >>> subset_from_pydantic(TypeAdapter(int | None).json_schema())
    {'oneOf': [{'type': 'integer'}, {'type': 'null'}]}
    """
    defs = json_schema.get("$defs")
    converter = _Converter(defs if isinstance(defs, Mapping) else {}, what)
    # A fresh, unshared tree: inlined definitions are converted once and reused while building.
    result: Any = snapshot_json(converter.convert(json_schema, (), ""), freeze=False)
    assert_supported_schema(result, what=what)
    return result  # type: ignore[no-any-return]


class _Converter:
    # Recursion follows the nesting of the Python type, which pydantic itself walked
    # recursively to emit this schema, so it is as deep as pydantic could go and no deeper.

    def __init__(self, defs: Mapping[str, Any], what: str) -> None:
        self.defs = defs
        self.what = what
        self.inlined: dict[str, _Schema] = {}

    def convert(self, node: object, refs: tuple[str, ...], path: str) -> _Schema:
        if not isinstance(node, Mapping):
            return {}  # a boolean schema: pydantic emits them only where any value is fine
        if "$ref" in node:
            return self._inline(node, refs, path)
        out: _Schema = {}
        for key, value in node.items():
            if key in _KEPT:
                expected = _KEPT[key]
                if (expected is None or isinstance(value, expected)) and _lossless(value):
                    out[key] = value
            elif key == "type":
                out.update(_types([value] if isinstance(value, str) else value))
            elif key == "properties" and isinstance(value, Mapping):
                out[key] = {name: self.convert(sub, refs, join_path(join_path(path, key), name))
                            for name, sub in value.items()}
            elif key == "required" and isinstance(value, list):
                out[key] = list(dict.fromkeys(n for n in value if isinstance(n, str)))
            elif key == "additionalProperties" and isinstance(value, bool):
                out[key] = value
            elif key == "additionalProperties" and isinstance(value, Mapping):
                # dict[str, X]: X for every key (converted like a property's type).
                out[key] = self.convert(value, refs, join_path(path, key))
            elif key == "items" and isinstance(value, Mapping) and "prefixItems" not in node:
                # After prefixItems, items covers only the tail: dropping both only loosens.
                out[key] = self.convert(value, refs, join_path(path, key))
            elif key in ("const", "enum") and _usable_values(key, value):
                out[key] = value
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list) and branches and "oneOf" not in out:
                converted = [self.convert(branch, refs, join_path(join_path(path, key), i))
                             for i, branch in enumerate(branches)]
                _merge_union(out, _disjoint(converted))
        all_of = node.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1:  # older pydantic wraps a $ref this way
            only = self.convert(all_of[0], refs, join_path(join_path(path, "allOf"), 0))
            out = _overlay(only, out)
        return out

    def _inline(self, node: Mapping[str, Any], refs: tuple[str, ...], path: str) -> _Schema:
        ref = node["$ref"]
        where = join_path(path, "$ref")
        name = ref.removeprefix("#/$defs/") if isinstance(ref, str) else ""
        if name == ref or name not in self.defs:
            raise UnsupportedSchemaError(self.what, [
                f"{where}: {ref!r} is not an entry of $defs (only local #/$defs/ references "
                "can be inlined)"])
        if name in refs:
            loop = " -> ".join([*refs[refs.index(name):], name])
            raise UnsupportedSchemaError(self.what, [
                f"{where}: {name} contains itself ({loop}): recursive types are not supported; "
                "bound the nesting (e.g. a fixed number of levels) or pass the value as JSON text"])
        if name not in self.inlined:
            self.inlined[name] = self.convert(self.defs[name], (*refs, name), path)
        siblings = self.convert({k: v for k, v in node.items() if k != "$ref"}, refs, path)
        return _overlay(self.inlined[name], siblings)


def _lossless(value: object) -> bool:
    try:
        snapshot_json(value, freeze=False)
    except NotJsonError:
        return False
    return True


def _usable_values(key: str, value: object) -> bool:
    return (key == "const" or (isinstance(value, list) and bool(value))) and _lossless(value)


def _overlay(base: _Schema, extra: _Schema) -> _Schema:
    """``base`` with the annotations of ``extra`` (a field's description beats its type's).

    Other keywords of ``extra`` are dropped: that only loosens the schema.
    """
    return {**base, **{key: value for key, value in extra.items() if key in _KEPT}}


def _types(names: object) -> _Schema:
    listed = [name for name in names if isinstance(name, str)] if isinstance(names, list) else []
    wanted = [name for name in dict.fromkeys(listed) if name in SUPPORTED_TYPES]
    if "number" in wanted and "integer" in wanted:
        wanted.remove("integer")  # every integer is a number: the branches would overlap
    if not wanted:
        return {}
    if len(wanted) == 1:
        return {"type": wanted[0]}
    return {"oneOf": [{"type": name} for name in wanted]}


def _merge_union(out: _Schema, branches: list[_Schema]) -> None:
    # One branch left (say ``X | X``): merge it into the node unless a validation keyword
    # clashes, where a one-branch oneOf keeps the exact meaning. The node's annotations win.
    if len(branches) > 1 or (set(branches[0]) & set(out)) - set(_KEPT):
        out["oneOf"] = branches
        return
    for key, value in branches[0].items():
        out.setdefault(key, value)


def _disjoint(branches: list[_Schema]) -> list[_Schema]:
    """Branches no two of which accept the same value; overlapping ones are widened together."""
    groups: list[list[_Schema]] = []
    for branch in branches:
        merged = [branch]
        for group in [g for g in groups if any(_overlap(branch, other) for other in g)]:
            merged.extend(group)
            groups.remove(group)
        groups.append(merged)
    return [group[0] if len(group) == 1 else _widen(group) for group in groups]


def _widen(group: list[_Schema]) -> _Schema:
    """The plain JSON types the branches accept between them (``{}`` if any value)."""
    names: set[str] = set()
    for branch in group:
        accepted = _accepted_types(branch)
        if accepted is None:
            return {}
        names |= accepted
    return _types(sorted(names))


def _overlap(a: _Schema, b: _Schema) -> bool:
    """Whether some value might match both (erring towards yes, which only loosens)."""
    types_a, types_b = _accepted_types(a), _accepted_types(b)
    if types_a is not None and types_b is not None and not (_numbers(types_a) & _numbers(types_b)):
        return False
    if _values_disjoint(a, b):
        return False
    # Discriminated objects: a required property whose allowed values differ (a "kind" tag).
    props_a, props_b = a.get("properties", {}), b.get("properties", {})
    shared = set(a.get("required", ())) & set(b.get("required", ())) & set(props_a) & set(props_b)
    return not any(_values_disjoint(props_a[name], props_b[name]) for name in shared)


def _numbers(types: set[str]) -> set[str]:
    return types | {"number"} if "integer" in types else types


def _accepted_types(schema: _Schema) -> set[str] | None:
    if "type" in schema:
        return {schema["type"]}
    if "oneOf" in schema:
        accepted: set[str] = set()
        for branch in schema["oneOf"]:
            more = _accepted_types(branch)
            if more is None:
                return None
            accepted |= more
        return accepted
    values = _values(schema)
    return None if values is None else {_json_type(value) for value in values}


def _values(schema: _Schema) -> list[JsonValue] | None:
    if "const" in schema:
        return [schema["const"]]
    enum: list[JsonValue] | None = schema.get("enum")
    return enum


def _values_disjoint(a: _Schema, b: _Schema) -> bool:
    values_a, values_b = _values(a), _values(b)
    if values_a is None or values_b is None:
        return False
    if any(isinstance(v, dict | list) for v in [*values_a, *values_b]):
        return False  # containers: assume they might be equal
    # Tag bools so that true and 1 stay apart while 1 and 1.0 stay equal (JSON equality).
    tagged_a = {(isinstance(v, bool), v) for v in values_a}
    return not tagged_a & {(isinstance(v, bool), v) for v in values_b}


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "integer" if is_json_integer(value) else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"
