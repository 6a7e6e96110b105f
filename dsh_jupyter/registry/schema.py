"""Compile a supported JSON Schema and validate values against it.

Tool schemas use a subset with one meaning everywhere: ``type`` (one name), ``properties``,
``required``, ``additionalProperties`` (a boolean, or one schema for every undeclared property:
``dict[str, float]``), ``items`` (one schema), ``enum``, ``const``, ``oneOf`` (exactly one
branch) and lossless annotations. :func:`schema_violations` lists every
construct outside it with its path; :func:`compile_schema` turns a supported schema into a
:class:`CompiledSchema` whose ``validate`` lists every violation in a value (the subset
check itself lives in :mod:`dsh_jupyter.registry.schema_subset`). JSON semantics
throughout: ``bool`` is never a number, ``1.0`` is an integer, and in enum/const ``1 == 1.0``
but ``true != 1``. Every traversal uses an explicit stack, so depth never hits recursion limits.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from dsh_jupyter.json_value import FrozenDict, FrozenList, JsonValue, snapshot_json

from .schema_subset import (
    _IS_ARRAY,
    _IS_OBJECT,
    _TYPES,
    SUPPORTED_TYPES,
    Predicate,
    _Chain,
    _render,
    _show,
    assert_supported_schema,
    schema_violations,
)

__all__ = [
    "SUPPORTED_TYPES",
    "CompiledSchema",
    "assert_supported_schema",
    "compile_schema",
    "schema_violations",
]

_MAX_ERRORS = 100
# Quick checks call their children's quick checks; capping their depth bounds that recursion
# while still covering typical (shallow) tool schemas end to end.
_QUICK_DEPTH = 8
_REMEMBERED = 8  # frozen values a compiled schema remembers as valid


# -- compiling ---------------------------------------------------------------------------------

def _json_equal(left: object, right: object) -> bool:
    """JSON equality: ``1 == 1.0`` but ``true != 1``, at any depth, without recursion."""
    pairs = [(left, right)]
    while pairs:
        a, b = pairs.pop()
        if isinstance(a, dict):
            if not isinstance(b, dict) or a.keys() != b.keys():
                return False
            pairs.extend((a[k], b[k]) for k in a)
        elif isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return False
            pairs.extend(zip(a, b, strict=True))
        elif isinstance(b, dict | list) or isinstance(a, bool) != isinstance(b, bool) or a != b:
            return False
    return True


def _member_check(members: list[JsonValue]) -> Predicate:
    # Tagging scalars with "is it a bool" keeps true and 1 apart while 1 and 1.0 stay equal.
    scalars = {(isinstance(m, bool), m) for m in members if not isinstance(m, dict | list)}
    containers = [m for m in members if isinstance(m, dict | list)]

    def check(value: object) -> bool:
        if isinstance(value, str | int | float) or value is None:
            return (isinstance(value, bool), value) in scalars
        return any(_json_equal(m, value) for m in containers)

    return check


class _Node:
    """One compiled schema object; :func:`compile_schema` links the children."""

    __slots__ = ("closed", "depth", "extra", "has_object_rules", "items", "one_of",
                 "properties", "quick", "required", "type_check", "type_text", "values")

    def __init__(self, schema: dict[str, Any]) -> None:
        check, article = _TYPES.get(schema.get("type", ""), (None, ""))
        self.type_check: Predicate | None = check
        self.type_text = f" must be {article}"
        values: list[tuple[Predicate, str]] = []
        if "const" in schema:
            values.append((_member_check([schema["const"]]), f" must be {_show(schema['const'])}"))
        if "enum" in schema:
            shown = ", ".join(_show(member) for member in schema["enum"])
            values.append((_member_check(schema["enum"]), f" must be one of {shown}"))
        self.values = tuple(values)
        self.properties: dict[str, _Node] = {}
        self.required: tuple[str, ...] = tuple(schema.get("required", ()))
        self.closed = schema.get("additionalProperties") is False
        self.extra: _Node | None = None  # the schema of undeclared properties, if one
        self.has_object_rules = ("properties" in schema or bool(self.required) or self.closed
                                 or isinstance(schema.get("additionalProperties"), dict))
        self.items: _Node | None = None
        self.one_of: tuple[_Node, ...] = ()
        self.quick: Predicate | None = None
        self.depth = 1


def _quick_object(node: _Node, children: dict[str, Predicate],
                  extra: Predicate | None) -> Predicate:
    required, closed, strict = node.required, node.closed, node.type_check is _IS_OBJECT

    def check(value: object) -> bool:  # the flat-object fast path: no allocation, no paths
        if not isinstance(value, dict):
            return not strict
        for name in required:
            if name not in value:
                return False
        for key, item in value.items():
            child = children.get(key, extra)
            if child is None:
                if closed:
                    return False
            elif not child(item):
                return False
        return True

    return check


def _make_quick(node: _Node) -> Predicate | None:
    """A yes/no check that is exact for valid values, or None when the subtree is too deep."""
    kids = [*node.properties.values(), *node.one_of, *([node.items] if node.items else []),
            *([node.extra] if node.extra else [])]
    node.depth = 1 + max((kid.depth for kid in kids), default=0)
    quick = {id(kid): kid.quick for kid in kids if kid.quick is not None}
    if node.depth > _QUICK_DEPTH or len(quick) < len(kids):
        return None
    parts = [check for check, _ in node.values]
    folded = []  # a type check the container check below already performs
    if node.has_object_rules:
        parts.append(_quick_object(node, {name: quick[id(kid)]
                                          for name, kid in node.properties.items()},
                                   quick[id(node.extra)] if node.extra else None))
        folded.append(_IS_OBJECT)
    if node.items is not None:
        item, strict = quick[id(node.items)], node.type_check is _IS_ARRAY
        parts.append(lambda v: all(map(item, v)) if isinstance(v, list) else not strict)
        folded.append(_IS_ARRAY)
    if node.one_of:
        branches = [quick[id(branch)] for branch in node.one_of]
        parts.append(lambda v: sum(1 for branch in branches if branch(v)) == 1)
    if node.type_check is not None and node.type_check not in folded:
        parts.insert(0, node.type_check)
    if len(parts) <= 1:
        return parts[0] if parts else lambda v: True
    return lambda v: all(part(v) for part in parts)


class CompiledSchema:
    """A supported schema compiled for fast, repeated validation (see :func:`compile_schema`)."""

    __slots__ = ("_root", "_valid", "schema")

    def __init__(self, schema: JsonValue, root: _Node) -> None:
        self.schema = schema  # the frozen snapshot that was compiled
        self._root = root
        # The last frozen values found valid, held (so identity cannot be recycled): a
        # sub-call's arguments are checked when it is classified and again when it runs.
        self._valid: deque[object] = deque(maxlen=_REMEMBERED)

    def validate(self, value: object) -> list[str]:
        """Every way ``value`` violates the schema (``[]`` when valid), each naming its path.

        >>> compile_schema({"properties": {"n": {"type": "integer"}}}).validate({"n": "x"})
        ['"n" must be an integer']
        """
        frozen = type(value) is FrozenDict or type(value) is FrozenList
        if frozen and any(seen is value for seen in self._valid):
            return []
        quick = self._root.quick
        if quick is not None and quick(value):
            if frozen:
                self._valid.append(value)
            return []
        run = _evaluate(self._root, value)
        if run.count > len(run.errors):
            return [*run.errors, f"... and {run.count - len(run.errors)} more"]
        return run.errors


def compile_schema(schema: object, *, what: str = "schema") -> CompiledSchema:
    """Compile ``schema``; raises :class:`UnsupportedSchemaError` if it is outside the subset."""
    assert_supported_schema(schema, what=what)
    frozen: Any = snapshot_json(schema)
    root = _Node(frozen)
    order: list[_Node] = []
    pending = [(root, frozen)]
    while pending:
        node, source = pending.pop()
        order.append(node)
        for name, sub in source.get("properties", {}).items():
            node.properties[name] = _Node(sub)
            pending.append((node.properties[name], sub))
        if "items" in source:
            node.items = _Node(source["items"])
            pending.append((node.items, source["items"]))
        extra = source.get("additionalProperties")
        if isinstance(extra, dict):
            node.extra = _Node(extra)
            pending.append((node.extra, extra))
        if "oneOf" in source:
            node.one_of = tuple(_Node(branch) for branch in source["oneOf"])
            pending.extend(zip(node.one_of, source["oneOf"], strict=True))
    for node in reversed(order):  # children come after their parent in `order`
        node.quick = _make_quick(node)
    return CompiledSchema(frozen, root)


# -- validating --------------------------------------------------------------------------------

class _Run:
    """One validation problem: the whole value, or one oneOf branch tried against a value."""

    __slots__ = ("count", "errors", "limit", "stack")

    def __init__(self, node: _Node, value: object, chain: _Chain, limit: int) -> None:
        self.stack: list[tuple[_Node, object, _Chain]] = [(node, value, chain)]
        self.errors: list[str] = []
        self.count = 0
        self.limit = limit

    def fail(self, chain: _Chain, before: str, after: str = "") -> None:
        self.count += 1  # counted past the limit, for "... and N more"
        if len(self.errors) < self.limit:
            where = f'"{_render(chain)}"' if chain is not None else "the value"
            self.errors.append(f"{before}{where}{after}")


class _Choice:
    """A oneOf being decided: its branches run one after another as nested runs."""

    __slots__ = ("best", "branches", "chain", "matched", "tried", "value")

    def __init__(self, branches: tuple[_Node, ...], value: object, chain: _Chain) -> None:
        self.branches, self.value, self.chain = branches, value, chain
        self.tried = self.matched = 0
        self.best: tuple[tuple[bool, int, int], str] | None = None

    def next_run(self) -> _Run:
        self.tried += 1
        # A branch needs only its verdict, its violation count and its first message.
        return _Run(self.branches[self.tried - 1], self.value, self.chain, limit=1)

    def record(self, run: _Run) -> None:
        if run.count == 0:
            self.matched += 1
            return
        check = self.branches[self.tried - 1].type_check
        # Closest: a branch of the value's own type first, then the fewest violations.
        key = (check is not None and not check(self.value), run.count, self.tried - 1)
        if self.best is None or key < self.best[0]:
            self.best = (key, run.errors[0])

    def report(self, parent: _Run) -> None:
        if self.matched == 1:
            return
        detail = ""
        if self.matched == 0 and self.best is not None:
            detail = f": closest is branch {self.best[0][2]}: {self.best[1]}"
        parent.fail(self.chain, "",
                    f" must match exactly one oneOf branch (matched {self.matched}){detail}")


def _evaluate(root: _Node, value: object) -> _Run:
    runs = [_Run(root, value, None, _MAX_ERRORS)]
    choices: list[_Choice] = []
    while True:
        run = runs[-1]
        choice = _drain(run)
        if choice is not None:  # suspend this run while the oneOf's branches are tried
            choices.append(choice)
            runs.append(choice.next_run())
            continue
        if len(runs) == 1:
            return run
        runs.pop()
        choice = choices[-1]
        choice.record(run)
        if choice.tried < len(choice.branches):
            runs.append(choice.next_run())
        else:
            choices.pop()
            choice.report(runs[-1])


def _drain(run: _Run) -> _Choice | None:
    """Work through ``run`` until it is finished or reaches a oneOf, which is returned."""
    stack = run.stack
    while stack:
        node, value, chain = stack.pop()
        if node.quick is not None and node.quick(value):
            continue
        if _check_node(node, value, chain, run) and node.one_of:
            return _Choice(node.one_of, value, chain)
    return None


def _check_node(node: _Node, value: object, chain: _Chain, run: _Run) -> bool:
    """Check ``value`` against ``node`` and queue its children; False if it failed outright."""
    if node.type_check is not None and not node.type_check(value):
        run.fail(chain, "", node.type_text)
        return False
    for check, text in node.values:
        if not check(value):
            run.fail(chain, "", text)
            return False
    if node.has_object_rules and isinstance(value, dict):
        for name in node.required:
            if name not in value:
                run.fail((chain, name), "missing required property ")
        queued: list[tuple[_Node, object, _Chain]] = []
        for key, item in value.items():
            child = node.properties.get(key, node.extra)
            if child is not None:
                queued.append((child, item, (chain, key)))
            elif node.closed:
                run.fail((chain, key), "", " is not a declared property")
        queued.reverse()  # the stack pops last-in first: keep violations in document order
        run.stack.extend(queued)
    if node.items is not None and isinstance(value, list):
        items = node.items
        run.stack.extend((items, value[i], (chain, i)) for i in range(len(value) - 1, -1, -1))
    return True
