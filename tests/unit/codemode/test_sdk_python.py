"""The Python SDK renderer: goldens, type-checking with mypy, determinism, totality.

Goldens live in ``tests/golden/sdk/<case>.py.txt``; ``DSH_UPDATE_GOLDENS=1``
rewrites them. ``realistic.tools.json`` there is an input (20 realistic tool
definitions), shared with ``bench/sdk.py``.
"""

from __future__ import annotations

import ast
import os
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_support import examples
from sdk_support import (
    _OBJECT_CYCLE,
    CASES,
    EXOTIC,
    GOLDEN,
    HOSTILE,
    INT,
    STR,
    obj,
    realistic_tools,
    tool,
)

from dsh_jupyter.codemode.sdk_python import (
    SdkTool,
    json_schema_to_py,
    python_sdk_instructions,
    render_python_sdk,
)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    text = render_python_sdk(CASES[case])
    path = GOLDEN / f"{case}.py.txt"
    if os.environ.get("DSH_UPDATE_GOLDENS") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{path.name} is stale: DSH_UPDATE_GOLDENS=1"


def test_every_golden_also_runs() -> None:
    """Dependencies come first, so the module executes as well as type-checks. Its
    ``ToolCallError`` only declares what a program reads: the kernel defines the real one."""
    for tools in CASES.values():
        namespace: dict[str, object] = {}
        exec(compile(render_python_sdk(tools), "sdk", "exec"), namespace)
        declared = namespace["ToolCallError"]
        assert isinstance(declared, type) and issubclass(declared, Exception)
        assert set(declared.__annotations__) == {"tool_name", "message"}


def test_an_object_cycle_ends_in_any() -> None:
    text = render_python_sdk([tool("loop", parameters=_OBJECT_CYCLE)])
    compile(text, "sdk", "exec")
    assert "    again: NotRequired[Any]\n" in text
    assert text.count("(TypedDict):") == 33  # the root, then one class per level followed


def test_field_notes_say_what_the_type_cannot() -> None:
    """Description, format, a default that matters and bounds, on the field's own line."""
    params = obj({
        "depth": {**INT, "description": "Levels.", "default": 1, "minimum": 1, "maximum": 5},
        "wait": {"type": "number", "exclusiveMinimum": 0},
        "picks": {"type": "array", "items": STR, "maxItems": 6},
        "url": {**STR, "format": "uri", "minLength": 1},
        "hidden": {"type": "boolean", "default": False},  # omitting it says as much
        "nothing": {**STR, "default": None, "description": "Or null."},
        "follow": {"type": "boolean", "default": True},
        "odd": {**INT, "minimum": True, "maximum": float("inf")},  # not numbers: no note
        "tags": {"type": "array", "items": STR, "uniqueItems": True},
        "slug": {**STR, "pattern": "^[a-z]+\n$"},
        "step": {**INT, "multipleOf": 5},
    })
    lines = {line.split(":")[0].strip(): line
             for line in render_python_sdk([tool("t", parameters=params)]).splitlines()}
    assert lines["depth"].endswith("  # Levels. (default 1; 1..5)")
    assert lines["wait"].endswith("  # > 0")
    assert lines["picks"].endswith("  # items <= 6")
    assert lines["url"].endswith("  # uri; length >= 1")
    assert lines["nothing"].endswith("  # Or null.")
    assert lines["follow"].endswith("  # default True")
    assert lines["tags"].endswith("  # unique items")
    assert lines["slug"].endswith("  # pattern ^[a-z]+ $")  # one line, whatever it holds
    assert lines["step"].endswith("  # multiple of 5")
    assert "#" not in lines["hidden"] and "#" not in lines["odd"]


def test_tool_order_does_not_matter() -> None:
    tools = realistic_tools() + EXOTIC
    expected = render_python_sdk(tools)
    for seed in range(5):
        shuffled = tools[:]
        random.Random(seed).shuffle(shuffled)
        assert render_python_sdk(shuffled) == expected


def test_property_order_is_kept() -> None:
    forward = render_python_sdk([tool("t", parameters=obj({"b": STR, "a": INT}))])
    backward = render_python_sdk([tool("t", parameters=obj({"a": INT, "b": STR}))])
    assert forward.index("    b: ") < forward.index("    a: ")
    assert backward.index("    a: ") < backward.index("    b: ")


def test_duplicate_names_keep_the_first_by_description() -> None:
    text = render_python_sdk([tool("x", "second"), tool("x", "first")])
    assert "first" in text and "second" not in text
    compile(text, "sdk", "exec")


def test_imports_only_what_is_used() -> None:
    text = render_python_sdk([tool("t", parameters=obj({"a": STR}, "a"), output=STR)])
    assert text.startswith("from typing import Any, Protocol, TypedDict\n")
    text = render_python_sdk([tool("t", parameters=obj({"a": {"enum": ["Any"]}}), output={})])
    assert text.startswith("from typing import Any, Literal, NotRequired, Protocol, TypedDict\n")
    described = {**STR, "description": "The answer."}
    text = render_python_sdk([tool("t", parameters=obj({"a": STR}, "a"), output=described)])
    assert text.startswith("from typing import Any, Protocol, TypeAlias, TypedDict\n")


def test_a_root_that_is_no_object_is_its_type_unless_described() -> None:
    """An alias would only repeat the signature; a description needs one to hang on."""
    text = render_python_sdk([
        tool("plain", parameters={"type": "object"}, output={"type": "array", "items": STR}),
        tool("told", output={**STR, "description": "The unified diff."}),
    ])
    assert "async def plain(self, args: dict[str, Any]) -> list[str]:" in text
    assert "# The unified diff.\nToldOutput: TypeAlias = str\n" in text
    assert "async def told(self, args: dict[str, Any]) -> ToldOutput:" in text


def test_identifier_names_are_methods_and_the_rest_are_listed() -> None:
    module = ast.parse(render_python_sdk(EXOTIC))
    protocol = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "Tools")
    methods = {n.name for n in protocol.body if isinstance(n, ast.AsyncFunctionDef)}
    assert methods == {"bidi", "hostile", "read_file", "tool_call_error", "日本語"}
    text = render_python_sdk(EXOTIC)
    assert '# tools["web-search"](args: WebSearchArgs) -> str' in text
    assert '# tools["class"](args: ClassArgs) -> Any' in text
    assert """# tools['say "hi"\\n'](args: dict[str, Any]) -> Any""" in text
    twins = [tool(name, parameters=obj({"a": STR})) for name in ("read_file", "read-file", "3d")]
    text = render_python_sdk(twins)
    assert '# tools["read-file"](args: ReadFileArgs) -> Any' in text  # "-" sorts first
    assert "async def read_file(self, args: ReadFile2Args) -> Any" in text
    assert '# tools["3d"](args: Tool3dArgs) -> Any' in text


def test_hostile_descriptions_stay_inert() -> None:
    text = render_python_sdk(
        [tool("hostile", HOSTILE, obj({"x": {**STR, "description": HOSTILE}}))]
    )
    module = ast.parse(text)
    assert not any(isinstance(node, ast.Import) for node in ast.walk(module))
    assert [type(node).__name__ for node in module.body] == [
        "ImportFrom", "ClassDef", "ClassDef", "ClassDef", "AnnAssign"
    ]  # fmt: skip
    protocol = module.body[3]
    assert isinstance(protocol, ast.ClassDef)
    method = protocol.body[0]
    assert isinstance(method, ast.AsyncFunctionDef)
    docstring = ast.get_docstring(method) or ""
    assert "import os" in docstring and 'os.system("rm -rf /")' in docstring


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, "str"),
        ({"type": "integer"}, "int"),
        ({"type": "number"}, "float"),
        ({"type": "boolean"}, "bool"),
        ({"type": "null"}, "None"),
        ({"type": "array"}, "list[Any]"),
        (
            {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
            "list[list[str]]",
        ),
        ({"type": "object", "properties": {"a": {"type": "string"}}}, "dict[str, Any]"),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, "dict[str, int]"),
        ({"enum": ["a", 1, 2.0, True, None]}, 'Literal["a", 1, 2, True] | None'),
        ({"enum": [1.5, "x"]}, 'float | Literal["x"]'),
        ({"enum": ["it's", 'say "hi"', "a\\b\n"]}, """Literal["it's", 'say "hi"', "a\\\\b\\n"]"""),
        ({"const": False}, "Literal[False]"),
        (
            {"oneOf": [{"type": "string"}, {"oneOf": [{"type": "null"}, {"type": "string"}]}]},
            "str | None",
        ),
        (
            {"oneOf": [{"const": "a"}, {"type": "integer"}, {"const": "b"}]},
            'Literal["a", "b"] | int',
        ),
        ({"oneOf": [{"type": "string"}, {"description": "anything"}]}, "Any"),
        ({}, "Any"),
        ({"description": "annotation only"}, "Any"),
        ({"$ref": "#/x"}, "Any"),
        ({"type": "string", "anyOf": [{"minLength": 1}]}, "Any"),
        ({"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}, "str | None"),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "str | int"),
        ({"anyOf": [{"type": "string"}, {"minLength": 1}]}, "Any"),
        ({"anyOf": [{"type": "string"}], "pattern": "a"}, "Any"),
        ({"type": ["string", "null"]}, "Any"),
        ({"enum": [[1]]}, "Any"),
        ({"enum": []}, "Any"),
        ({"oneOf": "x"}, "Any"),
        ({"type": {"x": 1}}, "Any"),
        ("string", "Any"),
        (None, "Any"),
    ],
)
def test_json_schema_to_py(schema: object, expected: str) -> None:
    assert json_schema_to_py(schema) == expected


def test_enum_literals_round_trip() -> None:
    values = ["it's", 'say "hi"', "back\\slash", "new\nline", "\x00", "\ud800", "日本", -3, 10**30]
    parsed = ast.parse(json_schema_to_py({"enum": values}), mode="eval").body
    assert isinstance(parsed, ast.Subscript) and isinstance(parsed.slice, ast.Tuple)
    assert [ast.literal_eval(element) for element in parsed.slice.elts] == values


def test_instructions() -> None:
    text = python_sdk_instructions()
    assert text.startswith("## Writing code for run_code\n")
    assert text.endswith("The available tools:")
    for phrase in [
        "`code`",
        "`description`",
        "await tools.name({...})",
        'tools["my-tool"]',
        "`ToolCallError`",
        "`tool_name`",
        "asyncio.gather",
        "`print(...)`",
        "fresh kernel",
        "ONLY what you print or return comes back",
    ]:
        assert phrase in text, phrase


# Totality: junk of every shape, biased towards almost-valid schemas.
_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
_KEYS = st.sampled_from(
    [
        "type",
        "properties",
        "required",
        "items",
        "enum",
        "const",
        "oneOf",
        "anyOf",
        "$ref",
        "additionalProperties",
        "description",
        "default",
        "format",
        "class",
        "__x",
        "ﬁle",
    ]
)
_TYPES = st.sampled_from(["string", "number", "integer", "boolean", "null", "array", "object"])
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | _TEXT | _TYPES
_JUNK = st.recursive(
    _SCALARS,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(_KEYS | _TEXT, kids, max_size=5),
    max_leaves=20,
)
_SCHEMAS: st.SearchStrategy[Any] = st.deferred(
    lambda: (
        _JUNK
        | st.fixed_dictionaries(
            {"type": _TYPES},
            optional={"description": _TEXT, "default": _SCALARS, "enum": st.lists(_SCALARS)},
        )
        | st.fixed_dictionaries(
            {
                "type": st.just("object"),
                "properties": st.dictionaries(_KEYS | _TEXT, _SCHEMAS, max_size=4),
            },
            optional={
                "required": st.lists(_KEYS | _TEXT) | _JUNK,
                "additionalProperties": _SCHEMAS,
            },
        )
        | st.fixed_dictionaries({"type": st.just("array")}, optional={"items": _SCHEMAS})
        | st.fixed_dictionaries({"oneOf": st.lists(_SCHEMAS, max_size=3)})
    )
)
_TOOLS = st.lists(
    st.builds(SdkTool, name=_TEXT | _KEYS, description=_TEXT, parameters=_SCHEMAS, output=_SCHEMAS),
    max_size=4,
)


@settings(max_examples=examples(300), deadline=None)
@given(_TOOLS)
def test_any_input_renders_a_module_that_compiles_and_runs(tools: list[SdkTool]) -> None:
    text = render_python_sdk(tools)
    exec(compile(text, "sdk", "exec"), {})
    module = ast.parse(text)
    assert isinstance(module.body[-1], ast.AnnAssign)  # tools: Tools, still the last statement
    protocol = module.body[-2]
    assert isinstance(protocol, ast.ClassDef) and protocol.name == "Tools"
    assert all(isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef) for n in protocol.body)


@settings(max_examples=examples(300), deadline=None)
@given(st.text("\"\\'\n\r #xr", max_size=40), st.text("\"\\'\n #x", max_size=40))
def test_any_description_stays_a_docstring_or_comment(description: str, field: str) -> None:
    params = obj({"x": {**STR, "description": field, "default": field}})
    module = ast.parse(render_python_sdk([tool("t", description, params)]))
    assert [type(node).__name__ for node in module.body] == [
        "ImportFrom", "ClassDef", "ClassDef", "ClassDef", "AnnAssign"
    ]  # fmt: skip
    protocol = module.body[3]
    assert isinstance(protocol, ast.ClassDef)
    method = protocol.body[0]
    assert isinstance(method, ast.AsyncFunctionDef)
    assert all(isinstance(node, ast.Expr) for node in method.body)


@settings(max_examples=examples(300), deadline=None)
@given(_SCHEMAS)
def test_any_schema_is_a_type_expression(schema: object) -> None:
    compile(json_schema_to_py(schema), "type", "eval")
