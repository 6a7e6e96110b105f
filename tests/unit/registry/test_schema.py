"""The supported schema subset: the support check, every message shape, depth, and jsonschema
as a differential oracle for validity."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from property_support import examples

from dsh_jupyter.errors import UnsupportedSchemaError
from dsh_jupyter.json_value import snapshot_json
from dsh_jupyter.registry import schema as schema_module
from dsh_jupyter.registry.schema import (
    SUPPORTED_TYPES,
    assert_supported_schema,
    compile_schema,
    schema_violations,
)

DEEP = 5_000


def errors(schema: dict[str, Any], value: object) -> list[str]:
    return compile_schema(schema).validate(value)


def obj(properties: dict[str, Any], **rest: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **rest}


# -- the support check ---------------------------------------------------------------------------

@pytest.mark.parametrize("schema", [
    {},
    {"description": "any JSON value", "title": "Any", "$comment": "c", "examples": [1, "a"]},
    obj({"a": {"type": "string", "format": "uri", "deprecated": True, "readOnly": False}},
        required=["a"], additionalProperties=False, writeOnly=True),
    {"type": "array", "items": {"oneOf": [{"type": "integer"}, {"type": "null"}]}},
    {"enum": [1, "a", None, [1], {"k": True}]},
    {"type": "string", "enum": ["a"], "const": "a", "default": "a"},
    {"type": "number", "enum": [1, 2.5]},
    {"type": "integer", "const": 3.0},
    {"required": ["x"]},  # open object: an undeclared required property can still be supplied
    # dict[str, float], dict[str, dict[str, int]]: one schema for every undeclared property
    {"type": "object", "additionalProperties": {"type": "number"}},
    obj({"a": {}}, additionalProperties={"type": "object",
                                         "additionalProperties": {"type": "integer"}}),
    # TypeScript-SDK MCP servers (zod-to-json-schema) put these at the root
    obj({"a": {"type": "string"}}, **{"$schema": "http://json-schema.org/draft-07/schema#",
                                      "$id": "urn:example:args"}),
])
def test_supported_schemas_have_no_violations(schema: dict[str, Any]) -> None:
    assert schema_violations(schema) == []
    assert_supported_schema(schema)


@pytest.mark.parametrize(("schema", "expected"), [
    ({"type": "int"}, 'type: "int" is not a supported type (use one of: array, boolean, integer, '
                      "null, number, object, string)"),
    ({"type": ["string", "null"]}, "type: type arrays are not supported (use oneOf with one branch "
                                   "per type)"),
    ({"anyOf": [{}]}, 'anyOf: "anyOf" is not supported (use oneOf with disjoint branches)'),
    ({"allOf": [{}]}, 'allOf: "allOf" is not supported (merge the branches into one schema)'),
    ({"$ref": "#/$defs/A"}, '$ref: "$ref" is not supported (inline the referenced schema)'),
    ({"$defs": {}}, "$defs: \"$defs\" is not supported (inline each definition where it is used)"),
    ({"not": {}}, 'not: "not" is not supported: the subset has no value constraints'),
    ({"if": {}}, 'if: "if" is not supported (use oneOf with one branch per case)'),
    ({"pattern": "a+"}, 'pattern: "pattern" is not supported: the subset has no value constraints'),
    ({"minimum": 0}, 'minimum: "minimum" is not supported: the subset has no value constraints'),
    ({"patternProperties": {}}, 'patternProperties: "patternProperties" is not supported (declare'),
    ({"prefixItems": [{}]}, 'prefixItems: "prefixItems" is not supported (use items with one'),
    ({"additionalProperties": "no"}, "additionalProperties: must be true, false or a schema"),
    ({"additionalProperties": {"type": "int"}},
     'additionalProperties.type: "int" is not a supported type'),
    ({"frobnicate": 1}, 'frobnicate: "frobnicate" is not a supported keyword'),
    ({"properties": {"a": {"$schema": "x"}}},
     'properties.a.$schema: "$schema" is allowed only at the root of a schema'),
    ({"items": {"$id": "x"}}, 'items.$id: "$id" is allowed only at the root of a schema'),
    ({"$schema": 7}, "$schema: must be a string"),
    ([], "(root): a schema must be an object, not []"),
    ("string", '(root): a schema must be an object, not "string"'),
    (True, "(root): the boolean schema true is not supported (use {} to allow any value)"),
    (False, "(root): the boolean schema false is not supported"),
    ({"items": False}, "items: the boolean schema false is not supported"),
    ({"items": [{}]}, "items: an array of schemas is not supported (use one schema for every"),
    ({"properties": []}, "properties: must be an object mapping property names to schemas"),
    ({"properties": {1: {}}}, "properties: property name 1 is not a string"),
    ({1: {}}, "(root): keyword 1 is not a string"),
    ({"required": "a"}, "required: must be an array of property names"),
    ({"required": [1]}, "required[0]: 1 is not a property name string"),
    ({"required": ["a", "a"]}, 'required[1]: "a" is listed twice'),
    ({"enum": []}, "enum: must be a non-empty array of values"),
    ({"oneOf": []}, "oneOf: must be a non-empty array of schemas"),
    ({"enum": [float("nan")]}, "enum[0]: the value is NaN, which is not lossless JSON"),
    ({"const": {"a": float("inf")}}, 'const: "a" is infinite, which is not lossless JSON'),
    ({"default": (1, 2)}, "default: the value is a tuple, not a JSON array"),
    ({"description": 3}, "description: must be a string"),
    ({"deprecated": "yes"}, "deprecated: must be a boolean"),
    ({"examples": "a"}, "examples: must be an array"),
    ({"type": "string", "enum": ["a", 1]}, 'enum[1]: 1 does not match type "string"'),
    ({"type": "integer", "enum": [True]}, 'enum[0]: true does not match type "integer"'),
    ({"type": "integer", "const": 1.5}, 'const: 1.5 does not match type "integer"'),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": False},
     'required[0]: "b" is required but not declared in properties, and additionalProperties is '
     "false, so no object can match"),
])
def test_each_unsupported_construct_is_named_with_its_path(schema: object, expected: str) -> None:
    violations = schema_violations(schema)
    assert len(violations) == 1, violations
    assert violations[0].startswith(expected)


def test_every_violation_is_listed_with_its_nested_path() -> None:
    schema = obj({
        "config": obj({"port": {"type": "int"}, "host": {"anyOf": [{}], "minLength": 1}}),
        "tags": {"type": "array", "items": {"items": {"$ref": "#/x"}}},
        "shape": {"oneOf": [{"type": ["string", "null"]}, True]},
    })
    with pytest.raises(UnsupportedSchemaError) as caught:
        assert_supported_schema(schema, what="tool 'demo' parameters")
    assert [v.split(":")[0] for v in caught.value.violations] == [
        "properties.config.properties.port.type",
        "properties.config.properties.host.anyOf",
        "properties.config.properties.host.minLength",
        "properties.tags.items.items.$ref",
        "properties.shape.oneOf[0].type",
        "properties.shape.oneOf[1]",
    ]
    assert caught.value.code == "UNSUPPORTED_SCHEMA"
    assert str(caught.value).startswith("tool 'demo' parameters is outside the supported")


def test_a_schema_that_contains_itself_is_rejected_not_looped_over() -> None:
    looped: dict[str, Any] = {"type": "array"}
    looped["items"] = looped
    assert schema_violations(looped) == [
        "items: the schema contains itself (recursive schemas are not supported)"]
    shared = {"type": "string", "anyOf": []}  # shared, not recursive: reported at each place
    assert len(schema_violations(obj({"a": shared, "b": shared}))) == 2


def test_compile_checks_support_first() -> None:
    with pytest.raises(UnsupportedSchemaError) as caught:
        compile_schema({"type": "object", "anyOf": [{}]}, what="output schema")
    assert caught.value.violations == (
        'anyOf: "anyOf" is not supported (use oneOf with disjoint branches)',)


def test_root_schema_and_id_are_ignored_when_validating() -> None:
    schema = obj({"a": {"type": "string"}}, required=["a"],
                 **{"$schema": "http://json-schema.org/draft-07/schema#", "$id": "urn:x"})
    assert errors(schema, {"a": "ok"}) == []
    assert errors(schema, {"a": 1}) == errors(obj({"a": {"type": "string"}}, required=["a"]),
                                              {"a": 1}) != []


# -- message shapes ------------------------------------------------------------------------------

CONFIG = obj({"config": obj({"host": {"type": "string"}}, required=["host"]),
              "tags": {"type": "array", "items": {"type": "string"}}})


def test_missing_required_property_names_its_full_path() -> None:
    assert errors(CONFIG, {"config": {}}) == ['missing required property "config.host"']
    assert errors(obj({}, required=["a"]), {}) == ['missing required property "a"']


@pytest.mark.parametrize(("type_name", "wrong", "text"), [
    ("string", 1, "must be a string"),
    ("integer", 1.5, "must be an integer"),
    ("integer", True, "must be an integer"),
    ("number", "1", "must be a number"),
    ("number", False, "must be a number"),
    ("boolean", 0, "must be a boolean"),
    ("null", 0, "must be null"),
    ("array", (1, 2), "must be an array"),
    ("object", [], "must be an object"),
])
def test_type_messages_at_a_path_and_at_the_root(type_name: str, wrong: object, text: str) -> None:
    assert errors({"type": type_name}, wrong) == [f"the value {text}"]
    nested = obj({"tags": {"type": "array", "items": {"type": type_name}}})
    assert errors(nested, {"tags": [wrong, wrong]}) == [f'"tags[0]" {text}', f'"tags[1]" {text}']


def test_json_number_semantics() -> None:
    assert errors({"type": "integer"}, 1.0) == []
    assert errors({"type": "number"}, 3) == []
    assert errors({"type": "boolean"}, 1) == ["the value must be a boolean"]


def test_paths_through_objects_and_arrays() -> None:
    schema = obj({"a": obj({"b": {"type": "array", "items": obj({"c": {"type": "null"}})}})})
    assert errors(schema, {"a": {"b": [{}, {}, {"c": 1}]}}) == ['"a.b[2].c" must be null']
    assert errors(CONFIG, {"tags": ["x", 2]}) == ['"tags[1]" must be a string']


def test_undeclared_property_only_when_closed() -> None:
    closed = obj({"a": {}}, additionalProperties=False)
    assert errors(closed, {"a": 1, "x": 2}) == ['"x" is not a declared property']
    assert errors(obj({"a": {}}), {"a": 1, "x": 2}) == []
    assert errors(obj({"a": {}}, additionalProperties=True), {"x": 2}) == []


def test_undeclared_properties_match_the_additional_properties_schema() -> None:
    prices = {"type": "object", "additionalProperties": {"type": "number"}}
    assert errors(prices, {"a": 1.5, "b": 2}) == []
    assert errors(prices, {"a": "1.5", "b": None}) == ['"a" must be a number',
                                                       '"b" must be a number']
    nested = obj({"name": {"type": "string"}}, additionalProperties=prices)
    assert errors(nested, {"name": "x", "eur": {"usd": 1.1}}) == []  # name is declared
    assert errors(nested, {"name": 1, "eur": {"usd": True}}) == [
        '"name" must be a string', '"eur.usd" must be a number']


def test_one_of_matched_two_and_matched_zero() -> None:
    number = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert errors(obj({"value": number}), {"value": 1}) == [
        '"value" must match exactly one oneOf branch (matched 2)']
    assert errors(obj({"value": number}), {"value": 1.5}) == []
    assert errors(number, "x") == [
        'the value must match exactly one oneOf branch (matched 0): closest is branch 0: '
        'the value must be an integer']


def test_one_of_matched_zero_reports_the_closest_branch() -> None:
    circle = obj({"kind": {"const": "circle"}, "radius": {"type": "number"}},
                 required=["kind", "radius"])
    square = obj({"kind": {"const": "square"}, "side": {"type": "number"}},
                 required=["kind", "side"])
    shape = obj({"shape": {"oneOf": [{"type": "string"}, square, circle]}})
    assert errors(shape, {"shape": {"kind": "circle", "radius": "big"}}) == [
        '"shape" must match exactly one oneOf branch (matched 0): closest is branch 2: '
        '"shape.radius" must be a number']


def test_enum_and_const_messages_are_json() -> None:
    assert errors(obj({"mode": {"enum": ["fast", "slow"]}}), {"mode": "medium"}) == [
        '"mode" must be one of "fast", "slow"']
    assert errors(obj({"kind": {"const": "circle"}}), {"kind": "square"}) == [
        '"kind" must be "circle"']
    assert errors({"enum": [None, {"a": [1]}]}, 2) == ['the value must be one of null, {"a": [1]}']


@pytest.mark.parametrize(("members", "value", "ok"), [
    ([1], 1.0, True), ([1.0], 1, True), ([1], True, False), ([True], 1, False),
    ([0], False, False), ([False], False, True), ([None], 0, False), (["1"], 1, False),
    ([[1, {"a": 2}]], [1.0, {"a": 2.0}], True), ([[1]], [True], False),
    ([{"a": 1}], {"a": 1, "b": 2}, False), ([[1, 2]], [1], False), ([[1]], (1,), False),
])
def test_enum_and_const_use_json_equality(members: list[Any], value: object, ok: bool) -> None:
    assert (errors({"enum": members}, value) == []) is ok
    assert (errors({"const": members[0]}, value) == []) is ok


def test_all_violations_are_listed_and_capped() -> None:
    result = errors({"type": "array", "items": {"type": "string"}}, list(range(250)))
    assert len(result) == 101
    assert result[0] == '"[0]" must be a string'
    assert result[-1] == "... and 150 more"


def test_open_containers_get_only_a_type_check_and_defaults_are_not_applied() -> None:
    assert errors({"type": "object"}, {"a": [1, {"b": None}]}) == []
    assert errors({"type": "array"}, [1, "a", None]) == []
    value: dict[str, Any] = {}
    assert errors(obj({"a": {"type": "string", "default": "x"}}), value) == []
    assert value == {}


@pytest.mark.parametrize("value", [
    object(), {1: "a", (2, 3): "b"}, {"a": {1, 2}}, [b"x"], float("nan"), {"a": object()},
])
def test_validate_never_crashes_on_non_json(value: object) -> None:
    for schema in [CONFIG, {}, {"enum": [1, [2]]}, {"oneOf": [obj({}), {"type": "array"}]},
                   obj({}, additionalProperties=False), {"type": "array", "items": {"const": 1}}]:
        assert isinstance(errors(schema, value), list)


# -- depth ---------------------------------------------------------------------------------------

def nested(depth: int, wrap: Any, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = wrap(value)
    return value


def test_a_5000_deep_schema_is_checked_and_compiled_without_recursion() -> None:
    deep_properties = nested(DEEP, lambda inner: obj({"a": inner}, required=["a"]),
                             {"type": "integer"})
    deep_items = nested(DEEP, lambda inner: {"type": "array", "items": inner}, {"type": "int"})
    assert schema_violations(deep_properties) == []
    [violation] = schema_violations(deep_items)
    assert violation.startswith("items." * 3 + "items")
    assert violation.endswith('type: "int" is not a supported type (use one of: array, boolean, '
                              "integer, null, number, object, string)")
    compiled = compile_schema(deep_properties)
    assert compiled.validate(nested(DEEP, lambda inner: {"a": inner}, 1)) == []
    [wrong] = compiled.validate(nested(DEEP, lambda inner: {"a": inner}, "x"))
    assert wrong == f'"{".".join(["a"] * DEEP)}" must be an integer'
    [missing] = compiled.validate(nested(DEEP - 1, lambda inner: {"a": inner}, {}))
    assert missing == f'missing required property "{".".join(["a"] * DEEP)}"'


def test_deep_arrays_and_one_of_nesting_need_no_recursion() -> None:
    deep_items = nested(DEEP, lambda inner: {"type": "array", "items": inner}, {"type": "null"})
    assert compile_schema(deep_items).validate(nested(DEEP, lambda inner: [inner], None)) == []
    deep_choice = nested(DEEP, lambda inner: {"oneOf": [inner, {"type": "string"}]},
                         {"type": "integer"})
    compiled = compile_schema(deep_choice)
    assert compiled.validate(3) == []
    [message] = compiled.validate(1.5)
    assert message.startswith("the value must match exactly one oneOf branch (matched 0)")


def test_a_deep_value_against_any_and_open_schemas() -> None:
    value = nested(DEEP, lambda inner: {"a": [inner]}, None)
    for schema in [{}, {"type": "object"}, obj({"a": {"type": "array"}}), obj({"b": {}})]:
        assert compile_schema(schema).validate(value) == []
    assert compile_schema({"enum": [value]}).validate(value) == []
    assert compile_schema({"const": value}).validate({"a": [None]}) != []


# -- jsonschema as the oracle --------------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "c"])
SCALARS = (st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([1.0, 2.5, -0.5])
           | st.text(alphabet="ab", max_size=2))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), inner, max_size=3),
                    max_leaves=8)
BY_TYPE = {
    "string": st.text(alphabet="ab", max_size=2), "boolean": st.booleans(), "null": st.none(),
    "integer": st.integers(-2, 2) | st.sampled_from([1.0, -2.0]),
    "number": st.integers(-2, 2) | st.sampled_from([1.0, 2.5, -0.5]),
    "array": st.lists(SCALARS, max_size=3),
    "object": st.dictionaries(st.sampled_from(["a", "b", "d"]), SCALARS, max_size=3),
}


@st.composite
def leaf_schemas(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    type_name = draw(st.none() | st.sampled_from(SUPPORTED_TYPES))
    members = JSON if type_name is None else BY_TYPE[type_name]
    if type_name is not None:
        schema["type"] = type_name
    kind = draw(st.sampled_from(["plain", "plain", "enum", "const"]))
    if kind == "enum":
        schema["enum"] = draw(st.lists(members, min_size=1, max_size=4))
    elif kind == "const":
        schema["const"] = draw(members)
    if draw(st.integers(0, 4)) == 0:
        schema["description"] = "annotations change nothing"
    return schema


@st.composite
def container_schemas(draw: st.DrawFn, child: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    shape = draw(st.sampled_from(["object", "array", "oneOf"]))
    schema: dict[str, Any] = {}
    if draw(st.booleans()):
        schema["type"] = {"oneOf": "object"}.get(shape, shape)
    if shape == "array":
        schema["items"] = draw(child)
    elif shape == "oneOf":
        schema["oneOf"] = draw(st.lists(child, min_size=1, max_size=3))
    else:
        properties = draw(st.dictionaries(NAMES, child, max_size=3))
        # None, a boolean, or (dict[str, X]) the schema X of every undeclared property
        closed: bool | dict[str, Any] | None = draw(st.sampled_from([None, True, False])
                                                     | child)
        declare_empty: bool = draw(st.booleans())
        if properties or declare_empty:
            schema["properties"] = properties
        if closed is not None:
            schema["additionalProperties"] = closed
        allowed = sorted(properties) if closed is False else ["a", "b", "c"]
        names: list[str] = draw(st.lists(st.sampled_from(allowed), unique=True)) if allowed else []
        if names:
            schema["required"] = names
    return schema


@functools.cache
def schemas(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    if depth == 0:
        return leaf_schemas()
    return leaf_schemas() | container_schemas(schemas(depth - 1))


def values_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values near the schema (often valid, often just wrong), plus arbitrary JSON."""
    options: list[st.SearchStrategy[Any]] = [JSON]
    if "type" in schema:
        options.append(BY_TYPE[schema["type"]])
    if "const" in schema:
        options.append(st.just(schema["const"]))
    if "enum" in schema:
        options.append(st.sampled_from(schema["enum"]))
    if "items" in schema:
        options.append(st.lists(values_for(schema["items"]), max_size=3))
    if "oneOf" in schema:
        options.extend(values_for(branch) for branch in schema["oneOf"])
    extra = schema.get("additionalProperties")
    if "properties" in schema or "required" in schema or isinstance(extra, dict):
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        undeclared = values_for(extra if isinstance(extra, dict) else {})
        options.append(st.fixed_dictionaries(
            {name: values_for(properties[name]) if name in properties else undeclared
             for name in required},
            optional={name: values_for(sub) for name, sub in properties.items()
                      if name not in required} | {"d": undeclared}))
    return st.one_of(options)


@settings(max_examples=examples(1000), deadline=None)
@given(data=st.data())
def test_validity_matches_jsonschema(data: st.DataObject) -> None:
    schema = data.draw(schemas(4), label="schema")
    assert schema_violations(schema) == []
    value = data.draw(values_for(schema), label="value")
    compiled = compile_schema(schema)
    ours = compiled.validate(value)
    assert (ours == []) is Draft202012Validator(schema).is_valid(value), ours
    # validate() answers from the compiled quick check when it can; the full engine must agree.
    assert (schema_module._evaluate(compiled._root, value).count == 0) is (ours == [])


def test_a_frozen_value_found_valid_is_not_checked_again() -> None:
    """A sub-call's arguments are validated when classified and when run: the second
    check of the same frozen value is free; a new value, or a plain dict, is checked."""
    compiled = compile_schema({"type": "object", "properties": {"n": {"type": "integer"}}})
    frozen = snapshot_json({"n": 1})
    assert compiled.validate(frozen) == []
    calls: list[object] = []
    quick = compiled._root.quick
    assert quick is not None
    compiled._root.quick = lambda value: calls.append(value) or quick(value)  # type: ignore[func-returns-value]
    assert compiled.validate(frozen) == []
    assert calls == []
    assert compiled.validate({"n": 1}) == [] and len(calls) == 1
    assert compiled.validate(snapshot_json({"n": "x"})) == ['"n" must be an integer']
