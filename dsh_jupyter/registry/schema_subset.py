"""The supported JSON Schema subset: which schemas are in it, and every way one is not.

Tool schemas use a subset with one meaning everywhere: ``type`` (one name), ``properties``,
``required``, ``additionalProperties`` (a boolean, or one schema for every undeclared property:
``dict[str, float]``), ``items`` (one schema), ``enum``, ``const``, ``oneOf`` (exactly one
branch) and lossless annotations. At the root, ``$schema`` and ``$id``
(strings) are annotations too: TypeScript-SDK MCP servers send ``"$schema": "...draft-07..."``,
and every keyword of the subset means the same in draft-07 and 2020-12, so validation ignores
them. :func:`schema_violations` lists every construct outside it with its path, iteratively,
so depth never hits recursion limits.
Compiling and validating live in :mod:`dsh_jupyter.registry.schema`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

from dsh_jupyter.errors import UnsupportedSchemaError
from dsh_jupyter.json_dump import dump_json
from dsh_jupyter.json_value import (
    NotJsonError,
    is_json_integer,
    is_json_number,
    join_path,
    snapshot_json,
)

Predicate: TypeAlias = Callable[[object], bool]
# A path is a linked chain of (parent, key) with None for the root. It is rendered to text only
# when a violation is reported, so the valid case does no string work however deep it goes.
_Chain: TypeAlias = "tuple[_Chain, object] | None"
_Item: TypeAlias = "tuple[object, _Chain]"


_TYPES: dict[str, tuple[Predicate, str]] = {
    "array": (lambda value: isinstance(value, list), "an array"),
    "boolean": (lambda value: isinstance(value, bool), "a boolean"),
    "integer": (is_json_integer, "an integer"),
    "null": (lambda value: value is None, "null"),
    "number": (is_json_number, "a number"),
    "object": (lambda value: isinstance(value, dict), "an object"),
    "string": (lambda value: isinstance(value, str), "a string"),
}
SUPPORTED_TYPES: tuple[str, ...] = tuple(sorted(_TYPES))
_IS_ARRAY, _IS_OBJECT = _TYPES["array"][0], _TYPES["object"][0]

# Annotations are kept verbatim; None means any lossless JSON value.
_ANNOTATIONS: dict[str, type | None] = {
    "description": str, "title": str, "$comment": str, "format": str, "deprecated": bool,
    "readOnly": bool, "writeOnly": bool, "examples": list, "default": None,
}
# Identify the schema's dialect or URI; meaningless below the root, so only accepted there.
_ROOT_ANNOTATIONS = frozenset({"$schema", "$id"})
_TYPE_NAMES: dict[type, str] = {str: "a string", bool: "a boolean", list: "an array"}
_BY_CASE = "use oneOf with one branch per case"
_INSTEAD = {
    "anyOf": "use oneOf with disjoint branches",
    "allOf": "merge the branches into one schema",
    "$ref": "inline the referenced schema",
    "$defs": "inline each definition where it is used",
    "definitions": "inline each definition where it is used",
    "prefixItems": "use items with one schema for every element",
    "additionalItems": "use items with one schema for every element",
    "patternProperties": "declare the properties, or leave additionalProperties open",
    "unevaluatedProperties": "use additionalProperties: false",
    "dependentRequired": _BY_CASE, "dependentSchemas": _BY_CASE,
    "if": _BY_CASE, "then": _BY_CASE, "else": _BY_CASE,
}
_CONSTRAINTS = frozenset({
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
    "maxLength", "pattern", "minItems", "maxItems", "uniqueItems", "contains", "minContains",
    "maxContains", "minProperties", "maxProperties", "propertyNames", "unevaluatedItems", "not",
})


def _show(value: object) -> str:
    """Short JSON text for a value in a message (``dump_json`` copes with any depth)."""
    try:
        text = dump_json(value, indent=0, compact_depth=0)  # type: ignore[arg-type]
    except NotJsonError:
        text = f"a {type(value).__name__}" if isinstance(value, dict | list) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _render(chain: _Chain) -> str:
    keys: list[object] = []
    while chain is not None:
        chain, key = chain
        keys.append(key)
    path = ""
    for key in reversed(keys):
        plain = isinstance(key, str) or (isinstance(key, int) and not isinstance(key, bool))
        path = join_path(path, key if plain else repr(key))  # type: ignore[arg-type]
    return path


def _at(chain: _Chain, text: str) -> str:
    return f"{_render(chain) or '(root)'}: {text}"


# -- the subset check ------------------------------------------------------------------------

def schema_violations(schema: object) -> list[str]:
    """Every way ``schema`` leaves the supported subset, each prefixed with its path.

    >>> schema_violations({"properties": {"port": {"type": "int"}}})[0][:40]
    'properties.port.type: "int" is not a sup'
    """
    out: list[str] = []
    open_ids: set[int] = set()  # schema objects on the current path: meeting one again is a cycle
    stack: list[tuple[object, _Chain, bool]] = [(schema, None, False)]
    while stack:
        node, chain, leaving = stack.pop()
        if leaving:
            open_ids.discard(id(node))
        elif not isinstance(node, dict):
            out.append(_at(chain, _not_a_schema(node)))
        elif id(node) in open_ids:
            out.append(_at(chain, "the schema contains itself (recursive schemas are not "
                                  "supported)"))
        else:
            open_ids.add(id(node))
            stack.append((node, chain, True))
            children: list[_Item] = []
            _check_keywords(node, chain, out, children)
            stack.extend((child, where, False) for child, where in reversed(children))
    return out


def assert_supported_schema(schema: object, *, what: str = "schema") -> None:
    """Raise :class:`UnsupportedSchemaError` listing every violation, if there are any."""
    violations = schema_violations(schema)
    if violations:
        raise UnsupportedSchemaError(what, violations)


def _not_a_schema(node: object) -> str:
    if node is True:
        return "the boolean schema true is not supported (use {} to allow any value)"
    if node is False:
        return ("the boolean schema false is not supported (to forbid a property, leave it "
                "undeclared and set additionalProperties: false)")
    return f"a schema must be an object, not {_show(node)}"


def _check_keywords(node: dict[Any, Any], chain: _Chain, out: list[str], kids: list[_Item]) -> None:
    for key, value in node.items():
        if not isinstance(key, str):
            out.append(_at(chain, f"keyword {key!r} is not a string"))
            continue
        here: _Chain = (chain, key)
        problem = None
        if key == "type":
            if isinstance(value, list):
                problem = "type arrays are not supported (use oneOf with one branch per type)"
            elif not isinstance(value, str) or value not in _TYPES:
                problem = (f"{_show(value)} is not a supported type "
                           f"(use one of: {', '.join(SUPPORTED_TYPES)})")
        elif key == "properties":
            if not isinstance(value, dict):
                problem = "must be an object mapping property names to schemas"
            for name, sub in value.items() if isinstance(value, dict) else ():
                if isinstance(name, str):
                    kids.append((sub, (here, name)))
                else:
                    out.append(_at(here, f"property name {name!r} is not a string"))
        elif key == "required":
            _check_required(value, here, out)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                kids.append((value, here))  # the schema of every undeclared property
            elif not isinstance(value, bool):
                problem = "must be true, false or a schema"
        elif key == "items":
            if isinstance(value, list):
                problem = "an array of schemas is not supported (use one schema for every element)"
            else:
                kids.append((value, here))
        elif key in ("enum", "oneOf"):
            if not isinstance(value, list) or not value:
                problem = f"must be a non-empty array of {'values' if key == 'enum' else 'schemas'}"
            elif key == "oneOf":
                kids.extend((branch, (here, i)) for i, branch in enumerate(value))
            else:
                for i, member in enumerate(value):
                    _check_lossless(member, (here, i), out)
        elif key == "const":
            _check_lossless(value, here, out)
        elif key in _ANNOTATIONS:
            expected = _ANNOTATIONS[key]
            if expected is not None and not isinstance(value, expected):
                problem = f"must be {_TYPE_NAMES[expected]}"
            else:
                _check_lossless(value, here, out)
        elif key in _ROOT_ANNOTATIONS:
            if chain is not None:
                problem = f'"{key}" is allowed only at the root of a schema'
            elif not isinstance(value, str):
                problem = "must be a string"
        elif key in _INSTEAD:
            problem = f'"{key}" is not supported ({_INSTEAD[key]})'
        elif key in _CONSTRAINTS:
            problem = (f'"{key}" is not supported: the subset has no value constraints '
                       "(enforce it in the tool, e.g. with a pydantic model)")
        else:
            problem = f'"{key}" is not a supported keyword'
        if problem is not None:
            out.append(_at(here, problem))
    _check_consistency(node, chain, out)


def _check_required(value: object, here: _Chain, out: list[str]) -> None:
    if not isinstance(value, list):
        out.append(_at(here, "must be an array of property names"))
        return
    seen: set[str] = set()
    for i, name in enumerate(value):
        if not isinstance(name, str):
            out.append(_at((here, i), f"{_show(name)} is not a property name string"))
        elif name in seen:
            out.append(_at((here, i), f'"{name}" is listed twice'))
        else:
            seen.add(name)


def _check_lossless(value: object, here: _Chain, out: list[str]) -> None:
    try:
        snapshot_json(value, freeze=False)
    except NotJsonError as error:
        out.append(_at(here, str(error)))


def _check_consistency(node: dict[Any, Any], chain: _Chain, out: list[str]) -> None:
    """Values must fit the declared type, and a closed object must declare what it requires
    (otherwise no value could ever match, which is a mistake in the schema)."""
    declared, enum = node.get("type"), node.get("enum")
    values: list[tuple[_Chain, object]] = []
    if isinstance(enum, list):
        values.extend((((chain, "enum"), i), member) for i, member in enumerate(enum))
    if "const" in node:
        values.append(((chain, "const"), node["const"]))
    if isinstance(declared, str) and declared in _TYPES:
        fits = _TYPES[declared][0]
        for where, member in values:
            if not fits(member):
                out.append(_at(where, f"{_show(member)} does not match type {_show(declared)}"))
    required = node.get("required")
    if node.get("additionalProperties") is False and isinstance(required, list):
        properties = node.get("properties")
        names = properties if isinstance(properties, dict) else {}
        for i, name in enumerate(required):
            if isinstance(name, str) and name not in names:
                out.append(_at(((chain, "required"), i), f'"{name}" is required but not declared '
                               "in properties, and additionalProperties is false, so no object "
                               "can match"))
