"""pydantic v2 JSON Schema -> the supported subset: realistic types, loosening, recursion, and
soundness (whatever pydantic accepts or emits, the subset schema accepts too)."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_support import examples
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from dsh_jupyter.errors import UnsupportedSchemaError
from dsh_jupyter.registry.pydantic_schema import subset_from_pydantic
from dsh_jupyter.registry.schema import compile_schema, schema_violations


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Point(BaseModel):
    x: int
    y: int = 0


class Config(BaseModel):
    """A configuration."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Who it is for", min_length=1, max_length=10, pattern="^[a-z]+$")
    origin: Point = Field(description="Where to start")
    target: Point | None = None
    color: Color = Color.RED
    priority: Priority = Priority.LOW
    ratio: float = Field(default=0.5, ge=0, le=1)


class Movie(TypedDict):
    title: str
    year: int
    tags: list[str]


@dataclasses.dataclass
class Size:
    width: float
    unit: Literal["px", "em"] = "px"


class Cat(BaseModel):
    kind: Literal["cat"]
    meows: bool


class Dog(BaseModel):
    kind: Literal["dog"]
    barks: bool


class Owner(BaseModel):
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]
    other: Cat | Dog | None = None


class Node(BaseModel):
    value: int
    children: list[Node] = []


class Even(BaseModel):
    odd: Odd | None = None


class Odd(BaseModel):
    even: list[Even]


def subset(type_: Any) -> dict[str, Any]:
    result = subset_from_pydantic(TypeAdapter(type_).json_schema())
    assert schema_violations(result) == []
    return result


@pytest.mark.parametrize(("type_", "expected"), [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (None, {"type": "null"}),
    (Any, {}),
    (list[str], {"type": "array", "items": {"type": "string"}}),
    (set[int], {"type": "array", "items": {"type": "integer"}}),
    (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
    (dict[str, dict[str, float | None]], {"type": "object", "additionalProperties": {
        "type": "object", "additionalProperties": {"oneOf": [{"type": "number"},
                                                              {"type": "null"}]}}}),
    (dict[str, Any], {"type": "object", "additionalProperties": True}),
    (tuple[int, str], {"type": "array"}),
    (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
    (int | None, {"oneOf": [{"type": "integer"}, {"type": "null"}]}),
    (int | float, {"type": "number"}),
    (int | float | None, {"oneOf": [{"type": "number"}, {"type": "null"}]}),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    (Literal["a"], {"type": "string", "const": "a"}),
    (Literal[1, "a", True], {"enum": [1, "a", True]}),
    (Literal["a"] | str, {"type": "string"}),
    (Color, {"type": "string", "enum": ["red", "green"]}),
    (Priority, {"type": "integer", "enum": [1, 2]}),
    (Annotated[int, Field(ge=0, le=9, multiple_of=3)], {"type": "integer"}),
    (Annotated[str, Field(min_length=2, pattern="^x")], {"type": "string"}),
])
def test_simple_types(type_: Any, expected: dict[str, Any]) -> None:
    assert subset(type_) == expected


def test_nested_model_is_inlined_with_descriptions_and_without_titles_or_constraints() -> None:
    assert subset(Config) == {
        "type": "object",
        "description": "A configuration.",
        "additionalProperties": False,
        "required": ["name", "origin"],
        "properties": {
            "name": {"type": "string", "description": "Who it is for"},
            "origin": {"type": "object", "description": "Where to start", "required": ["x"],
                       "properties": {"x": {"type": "integer"},
                                      "y": {"type": "integer", "default": 0}}},
            "target": {"default": None, "oneOf": [
                {"type": "object", "required": ["x"],
                 "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}}},
                {"type": "null"}]},
            "color": {"type": "string", "enum": ["red", "green"], "default": "red"},
            "priority": {"type": "integer", "enum": [1, 2], "default": 1},
            "ratio": {"type": "number", "default": 0.5},
        },
    }


def test_typed_dict_and_dataclass() -> None:
    assert subset(Movie) == {
        "type": "object", "required": ["title", "year", "tags"],
        "properties": {"title": {"type": "string"}, "year": {"type": "integer"},
                       "tags": {"type": "array", "items": {"type": "string"}}}}
    assert subset(Size) == {
        "type": "object", "required": ["width"],
        "properties": {"width": {"type": "number"},
                       "unit": {"type": "string", "enum": ["px", "em"], "default": "px"}}}


def test_tagged_unions_become_one_of_and_untagged_ones_widen() -> None:
    schema = subset(Owner)["properties"]
    cat, dog = schema["pet"]["oneOf"]
    assert cat["properties"]["kind"] == {"type": "string", "const": "cat"}
    assert dog["properties"]["kind"] == {"type": "string", "const": "dog"}
    assert schema["other"]["oneOf"] == [cat, dog, {"type": "null"}]  # disjoint by tag
    untagged = subset(Point | Size)
    assert untagged == {"type": "object"}  # both are objects with no tag: any object


def test_unions_that_overlap_loosen_instead_of_tightening() -> None:
    # One branch subsumes the others, or the types overlap: keep only what pydantic allows.
    assert subset(Literal[1] | int | str) == {"oneOf": [{"type": "integer"}, {"type": "string"}]}
    assert subset(Any | None) == {}
    assert subset(Literal["a", "b"] | Literal["c"]) == {
        "oneOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "string", "const": "c"}]}


def test_field_metadata_survives_only_when_lossless() -> None:
    class Tool(BaseModel):
        count: int = Field(3, description="How many", examples=[1, 2], title="Count")
        when: str = Field(json_schema_extra={"x-internal": True}, deprecated=True)

    properties = subset(Tool)["properties"]
    assert properties["count"] == {"type": "integer", "default": 3, "description": "How many",
                                   "examples": [1, 2]}
    assert properties["when"] == {"type": "string", "deprecated": True}
    raw = {"type": "number", "default": float("nan"), "examples": [float("inf")]}
    assert subset_from_pydantic(raw) == {"type": "number"}


def test_formats_are_kept_as_annotations() -> None:
    import datetime

    assert subset(datetime.datetime) == {"type": "string", "format": "date-time"}


@pytest.mark.parametrize(("type_", "loop"), [
    (Node, "properties.children.items.$ref: Node contains itself (Node -> Node)"),
    (Even, "properties.odd.anyOf[0].properties.even.items.$ref: Even contains itself "
           "(Even -> Odd -> Even)"),
])
def test_recursive_models_are_rejected(type_: Any, loop: str) -> None:
    with pytest.raises(UnsupportedSchemaError) as caught:
        subset_from_pydantic(TypeAdapter(type_).json_schema(), what="tool 'walk' parameters")
    [violation] = caught.value.violations
    assert violation.startswith(loop)
    assert "recursive types are not supported" in violation
    assert str(caught.value).startswith("tool 'walk' parameters is outside")


def test_unresolvable_references_are_rejected() -> None:
    with pytest.raises(UnsupportedSchemaError, match="is not an entry of \\$defs"):
        subset_from_pydantic({"$ref": "https://example.com/schema.json"})


def test_type_arrays_and_old_style_all_of_wrappers() -> None:
    assert subset_from_pydantic({"type": ["string", "null"], "title": "T"}) == {
        "oneOf": [{"type": "string"}, {"type": "null"}]}
    assert subset_from_pydantic({"type": ["integer", "number"]}) == {"type": "number"}
    wrapped = {"$defs": {"P": {"type": "object", "title": "P"}},
               "allOf": [{"$ref": "#/$defs/P"}], "description": "a p"}
    assert subset_from_pydantic(wrapped) == {"type": "object", "description": "a p"}


def test_input_is_not_modified() -> None:
    schema = TypeAdapter(Config).json_schema()
    before = json.dumps(schema, sort_keys=True)
    subset_from_pydantic(schema)
    assert json.dumps(schema, sort_keys=True) == before


# -- soundness: never reject what pydantic accepts -------------------------------------------------

TYPES: list[Any] = [Config, Movie, Size, Owner, int | None, int | float | None, dict[str, int],
                    dict[str, Point | None], tuple[int, str], Literal[1, "a", True], Color,
                    list[Point | Size], Any]
JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2)
                    | st.sampled_from(["", "a", "px", "red", "cat", "dog"]),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(["x", "y", "kind", "meows", "pet", "name",
                                                       "origin", "width", "title", "year",
                                                       "tags"]), inner, max_size=4),
                    max_leaves=12)


BY_TYPE = {"string": st.sampled_from(["", "a", "abc", "px", "red", "cat"]),
           "integer": st.integers(-3, 3), "number": st.integers(-1, 1) | st.floats(-2, 2),
           "boolean": st.booleans(), "null": st.none(), "array": st.lists(JSON, max_size=3),
           "object": st.dictionaries(st.sampled_from(["x", "y", "kind"]), JSON, max_size=3)}


def near(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values built from the subset schema, with arbitrary JSON mixed in at every level."""
    options = [BY_TYPE[schema["type"]]] if "type" in schema else []
    options += [st.sampled_from([schema[k]] if k == "const" else schema[k])
                for k in ("const", "enum") if k in schema]
    options += [near(branch) for branch in schema.get("oneOf", [])]
    if "items" in schema:
        options.append(st.lists(near(schema["items"]), max_size=3))
    if "properties" in schema:
        properties, required = schema["properties"], schema.get("required", [])
        options.append(st.fixed_dictionaries(
            {name: near(properties[name]) for name in required},
            optional={name: near(sub) for name, sub in properties.items() if name not in required}))
    if isinstance(schema.get("additionalProperties"), dict):
        options.append(st.dictionaries(st.sampled_from(["x", "y", "kind"]),
                                       near(schema["additionalProperties"]), max_size=3))
    return st.one_of(*options, *options, JSON)  # mostly shaped, sometimes anything


@pytest.mark.parametrize("type_", TYPES, ids=repr)
@settings(max_examples=examples(100), deadline=None)
@given(data=st.data())
def test_every_value_pydantic_accepts_strictly_from_json_passes(type_: Any, data: Any) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(type_)
    schema = subset_from_pydantic(adapter.json_schema())
    value = data.draw(near(schema))
    try:
        adapter.validate_json(json.dumps(value), strict=True)
    except ValidationError:
        return
    assert compile_schema(schema).validate(value) == []


@pytest.mark.parametrize("type_", TYPES, ids=repr)
@settings(max_examples=examples(100), deadline=None)
@given(data=st.data())
def test_serialized_values_pass_the_serialization_schema(type_: Any, data: Any) -> None:
    # What a typed tool returns is dumped to JSON and checked against the output schema.
    adapter: TypeAdapter[Any] = TypeAdapter(type_)
    schema = subset_from_pydantic(adapter.json_schema(mode="serialization"))
    try:
        instance = adapter.validate_python(data.draw(near(schema)))  # lax: coerces where it can
    except ValidationError:
        return
    assert compile_schema(schema).validate(adapter.dump_python(instance, mode="json")) == []


@pytest.mark.parametrize(("type_", "instance"), [
    (Config, Config(name="abc", origin=Point(x=1), target=Point(x=2, y=3), ratio=1)),
    (Owner, Owner(pet=Dog(kind="dog", barks=True), other=Cat(kind="cat", meows=False))),
    (tuple[int, str], (1, "a")),
    (list[Point | Size], [Point(x=1), Size(width=2.5, unit="em")]),
    (Movie, {"title": "Up", "year": 2009, "tags": ["a"]}),
    (int | float | None, 2.5),
    (Literal[1, "a", True], True),
    (Priority, Priority.HIGH),
], ids=repr)
def test_known_instances_pass_both_schemas(type_: Any, instance: Any) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(type_)
    dumped = adapter.dump_python(instance, mode="json")
    for mode in ("validation", "serialization"):
        schema = subset_from_pydantic(adapter.json_schema(mode=mode))
        assert compile_schema(schema).validate(dumped) == [], mode


def test_a_lone_union_branch_merges_unless_its_keywords_clash() -> None:
    assert subset_from_pydantic({"description": "d", "anyOf": [{"type": "string"}]}) == {
        "description": "d", "type": "string"}
    clashing = {"type": "object", "properties": {"a": {}},
                "anyOf": [{"type": "object", "properties": {"b": {}},
                           "additionalProperties": False}]}
    assert subset_from_pydantic(clashing)["oneOf"] == [
        {"type": "object", "properties": {"b": {}}, "additionalProperties": False}]
