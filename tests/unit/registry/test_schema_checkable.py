"""What of a schema outside the subset can still be checked (MCP servers' input schemas).

The derived schema only ever loosens the server's: jsonschema, reading the server's schema,
is the oracle, and no value it accepts may be refused.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from dsh_jupyter.registry.schema import compile_schema
from dsh_jupyter.registry.schema_checkable import checkable_schema

NULLABLE = {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None,
            "title": "Since"}

# (the server's schema, values to try)
CASES: dict[str, tuple[dict[str, Any], list[Any]]] = {
    "optional (pydantic)": ({"type": "object", "properties": {
        "repo": {"type": "string"}, "since": NULLABLE}, "required": ["repo"]},
        [{"repo": "r"}, {"repo": "r", "since": None}, {"repo": "r", "since": "monday"},
         {"repo": "r", "since": 5}, {"since": "x"}, {"repo": 1}, {"repo": "r", "since": []}]),
    "bounds (fetch)": ({"type": "object", "properties": {
        "url": {"type": "string", "minLength": 1, "format": "uri"},
        "max_length": {"type": "integer", "exclusiveMinimum": 0, "maximum": 10},
        "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
        "required": ["url"]},
        [{"url": "u"}, {"url": ""}, {"url": "u", "max_length": 0}, {"url": "u", "max_length": 99},
         {"url": "u", "max_length": "9"}, {"url": "u", "paths": []}, {"url": "u", "paths": [1]},
         {"url": 3}]),
    "optional list with a bound": ({"type": "object", "properties": {"tags": {
        "anyOf": [{"type": "array", "items": {"type": "string"}, "maxItems": 2},
                  {"type": "null"}]}}},
        [{"tags": None}, {"tags": ["a"]}, {"tags": ["a", "b", "c"]}, {"tags": [1]},
         {"tags": "a"}]),
    "enum or null": ({"type": "object", "properties": {"kind": {
        "anyOf": [{"enum": ["local", "remote"]}, {"type": "null"}]}}},
        [{"kind": "local"}, {"kind": None}, {"kind": "all"}, {"kind": 1}]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_checkable_schema_refuses_nothing_the_servers_accepts(name: str) -> None:
    schema, values = CASES[name]
    checkable = checkable_schema(schema)
    assert checkable is not None
    validator = compile_schema(checkable)
    oracle = jsonschema.Draft202012Validator(schema)
    refused_by_both = 0
    for value in values:
        accepted = oracle.is_valid(value)
        violations = validator.validate(value)
        if accepted:
            assert violations == [], (value, violations)
        elif violations:
            refused_by_both += 1
    assert refused_by_both >= 2  # and it is a real check: wrong types never reach the server


def test_a_nullable_field_is_checked_as_x_or_none() -> None:
    checkable = checkable_schema({"type": "object", "properties": {"since": NULLABLE}})
    assert checkable == {"type": "object", "properties": {"since": {
        "oneOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Since"}}}
    validator = compile_schema(checkable)
    assert validator.validate({"since": None}) == validator.validate({"since": "x"}) == []
    [message] = validator.validate({"since": 5})
    assert '"since" must be a string' in message


def test_a_schema_inside_the_subset_is_itself() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert checkable_schema(schema) is schema


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"n": {"anyOf": [{"type": "integer"},
                                                      {"type": "number"}]}}},  # overlap
    {"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {}}},
    {"type": "object", "properties": {"a": {"allOf": [{"type": "string"}]}}},
    {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
    {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {}]}}},
    # with their bounds gone the branches overlap, and "exactly one" would refuse 5
    {"type": "object", "properties": {"a": {"oneOf": [
        {"type": "integer", "minimum": 0}, {"type": "integer", "maximum": -1}]}}},
], ids=["overlapping anyOf", "$ref", "allOf", "type array", "anyOf with any", "oneOf bounds"])
def test_what_cannot_be_checked_is_left_to_the_server(schema: dict[str, Any]) -> None:
    assert checkable_schema(schema) is None


def test_absurd_nesting_is_left_to_the_server() -> None:
    schema: dict[str, Any] = {"type": "string", "minLength": 1}
    for _ in range(5000):
        schema = {"type": "object", "properties": {"a": schema}}
    assert checkable_schema(schema) is None
