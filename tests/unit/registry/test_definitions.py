"""define_tool from typed functions, pydantic models and raw schemas."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

import pydantic
import pytest

from dsh_jupyter import (
    ToolCall,
    ToolExecution,
    ToolRegistry,
    ToolRunContext,
    default_render,
    define_tool,
)
from dsh_jupyter.errors import RegistrationError, UnsupportedSchemaError
from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.registry import DefinitionView, DurableResult, GenericCallView
from dsh_jupyter.registry.definition import _DUMP_SLICE


def test_schema_from_type_hints() -> None:
    async def read_file(path: str, offset: int | None = None,
                        mode: Literal["text", "bytes"] = "text") -> str:
        """Read a file."""
        return ""

    definition = define_tool(read_file)
    assert definition.name == "read_file"
    assert definition.description == "Read a file."
    params: Any = definition.parameters
    assert params["type"] == "object"
    assert params["required"] == ["path"]
    assert params["properties"]["path"] == {"type": "string"}
    assert params["properties"]["mode"]["enum"] == ["text", "bytes"]
    assert definition.output.schema == {"type": "string"}


class SearchArgs(pydantic.BaseModel):
    query: str = pydantic.Field(description="What to look for")
    limit: int = 10


@dataclass
class Hit:
    path: str
    line: int


async def test_pydantic_model_parameter_and_dataclass_output() -> None:
    registry = ToolRegistry()

    @registry.tool
    async def search(args: SearchArgs, ctx: ToolRunContext) -> list[Hit]:
        assert ctx.call_id == "c1"
        return [Hit(path=args.query, line=args.limit)]

    definition = registry.get("search")
    assert definition is not None
    properties: Any = definition.parameters["properties"]
    assert properties["query"]["description"] == "What to look for"
    assert "ctx" not in properties
    result = await registry.execute(ToolCall(call_id="c1", name="search",
                                             arguments={"query": "q", "limit": 2}))
    assert result.value == [{"path": "q", "line": 2}]


async def test_long_list_output_is_dumped_and_rendered_like_a_short_one() -> None:
    registry = ToolRegistry()
    count = 2 * _DUMP_SLICE + 5  # dumped a slice at a time

    @registry.tool
    async def hits(n: int) -> list[Hit]:
        """Many hits."""
        return [Hit(path=f"p{i}", line=i) for i in range(n)]

    for n in (3, count):
        result = await registry.execute(ToolCall(call_id="c1", name="hits", arguments={"n": n}))
        expected = [{"path": f"p{i}", "line": i} for i in range(n)]
        assert result.value == expected
        assert result.text == json.dumps(expected, indent=2, ensure_ascii=False)


async def test_default_render_writes_deep_values_compactly_past_a_thousand_levels() -> None:
    def nest(args: Any, ctx: ToolRunContext) -> Any:
        value: list[Any] = []
        for _ in range(args["depth"]):
            value = [value]
        return value

    registry = ToolRegistry()
    registry.register(define_tool(name="nest", parameters={"type": "object"}, execute=nest,
                                  output={"schema": {"type": "array"}, "render": default_render}))
    shallow = await registry.execute(ToolCall(call_id="c1", name="nest", arguments={"depth": 50}))
    assert shallow.text == json.dumps(shallow.value, indent=2)
    deep = await registry.execute(ToolCall(call_id="c2", name="nest", arguments={"depth": 5000}))
    assert not deep.is_error, deep.text[:300]  # json.dumps(indent=2) hit the recursion limit
    compact = "[" * 4001 + "]" * 4001  # the levels from 1,000 down
    assert "\n" + " " * 2000 + compact + "\n" + " " * 1998 + "]" in deep.text


async def test_pydantic_constraints_still_enforced() -> None:
    registry = ToolRegistry()

    @registry.tool
    async def pick(n: pydantic.conint(ge=1, le=3)) -> int:  # type: ignore[valid-type]
        return n  # type: ignore[no-any-return]

    ok = await registry.execute(ToolCall(call_id="1", name="pick", arguments={"n": 2}))
    bad = await registry.execute(ToolCall(call_id="2", name="pick", arguments={"n": 7}))
    assert ok.value == 2
    assert bad.error is not None and bad.error.code == "INVALID_ARGS"
    assert '"n"' in bad.error.message


async def test_sync_functions_run_off_the_loop() -> None:
    import threading

    registry = ToolRegistry()
    main = threading.get_ident()

    @registry.tool
    def where() -> bool:
        return threading.get_ident() != main

    assert (await registry.execute(ToolCall(call_id="1", name="where"))).value is True


def test_missing_return_annotation_is_explained() -> None:
    async def f(x: int):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(RegistrationError, match="return annotation"):
        define_tool(f)


def test_missing_parameter_annotation_is_explained() -> None:
    async def f(x) -> int:  # type: ignore[no-untyped-def]
        return 1

    with pytest.raises(RegistrationError, match="needs a type annotation"):
        define_tool(f)


@pytest.mark.parametrize("bad", [0, -5, math.inf, math.nan, True, "10"])
def test_timeout_ms_must_be_positive_and_finite(bad: Any) -> None:
    async def f() -> str:
        return ""

    with pytest.raises(RegistrationError, match="timeout_ms"):
        define_tool(f, timeout_ms=bad)


def test_output_declaration_is_mandatory_for_raw_tools() -> None:
    with pytest.raises(RegistrationError, match="output declaration is required"):
        define_tool(name="t", parameters={"type": "object"}, output={},
                    execute=lambda a, c: "")
    with pytest.raises(RegistrationError, match="render"):
        define_tool(name="t", parameters={"type": "object"},
                    output={"schema": {"type": "string"}}, execute=lambda a, c: "")


def test_unsupported_raw_schema_is_rejected_with_every_violation() -> None:
    schema = {"type": "object", "properties": {
        "a": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "b": {"type": "string", "pattern": "^x"}}}
    with pytest.raises(UnsupportedSchemaError) as info:
        define_tool(name="t", parameters=schema,
                    output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                    execute=lambda a, c: "")
    assert info.value.code == "UNSUPPORTED_SCHEMA"
    assert len(info.value.violations) >= 2
    # opting out leaves validation to the tool
    definition = define_tool(name="t", parameters=schema, allow_unsupported_schema=True,
                             output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                             execute=lambda a, c: "")
    assert definition.validator is None


def test_parameters_must_be_an_object_schema() -> None:
    with pytest.raises(RegistrationError, match="must describe an object"):
        define_tool(name="t", parameters={"type": "string"},
                    output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                    execute=lambda a, c: "")


async def test_raw_tool_validates_its_declared_subset() -> None:
    registry = ToolRegistry()
    registry.register(define_tool(
        name="cfg",
        parameters={"type": "object", "additionalProperties": False,
                    "properties": {"config": {"type": "object",
                                              "properties": {"host": {"type": "string"}},
                                              "required": ["host"]},
                                   "tags": {"type": "array", "items": {"type": "string"}}}},
        output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
        execute=lambda a, c: "ok"))
    result = await registry.execute(ToolCall(call_id="1", name="cfg", arguments={
        "config": {}, "tags": ["a", 2], "x": 1}))
    assert result.error is not None and result.error.code == "INVALID_ARGS"
    message = result.error.message
    assert 'missing required property "config.host"' in message
    assert '"tags[1]" must be a string' in message
    assert '"x" is not a declared property' in message


async def test_presentation_meta_only_for_top_level_calls() -> None:
    registry = ToolRegistry()
    calls: list[Any] = []

    def meta(args: Any, value: Any) -> Any:
        calls.append(value)
        return {"length": len(value)}

    registry.register(define_tool(
        name="t", parameters={"type": "object"},
        output={"schema": {"type": "string"}, "render": lambda a, v: str(v),
                "presentation_meta": meta},
        present_call=lambda args: GenericCallView(title="T", kind="read"),
        execute=lambda a, c: "four"))
    top = await registry.execute(ToolCall(call_id="1", name="t"))
    parent_token = object()
    nested = await registry.execute(ToolCall(call_id="2", name="t",
                                             parent=parent_token))  # type: ignore[arg-type]
    assert top.meta == {"length": 4}
    assert nested.meta is None
    assert calls == ["four"]
    definition = registry.get("t")
    assert definition is not None and definition.present_call is not None
    assert definition.present_call({}) == GenericCallView(title="T", kind="read")


def test_presenters_see_only_valid_arguments() -> None:
    """000: defineTool soft-validates older logged arguments and falls back: a logged call
    whose arguments miss or mistype a field never reaches the presenter (which would raise
    KeyError or AttributeError); every consumer gets None, the generic view."""
    seen: list[Any] = []

    def call_view(args: Any) -> GenericCallView:
        seen.append(args)
        return GenericCallView(title=args["path"].upper(), kind="read")

    def result_view(args: Any, durable: Any) -> Any:
        seen.append(args)
        return None

    tool = define_tool(
        name="read", parameters={"type": "object", "properties": {"path": {"type": "string"}},
                                 "required": ["path"], "additionalProperties": False},
        output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
        present_call=call_view, present_result=result_view, execute=lambda a, c: "")
    assert tool.present_call is not None and tool.present_result is not None
    assert tool.present_call({"path": "a.txt"}) == GenericCallView(title="A.TXT", kind="read")
    stale: tuple[JsonValue, ...] = ({}, {"path": 3}, {"file": "a.txt"}, "not an object", None)
    durable = DurableResult(is_error=False, content=())
    for old in stale:
        assert tool.present_call(old) is None
        assert tool.present_result(old, durable) is None
    assert seen == [{"path": "a.txt"}]


def test_presenters_of_a_pydantic_tool_see_only_what_the_model_accepts() -> None:
    class Args(pydantic.BaseModel):
        path: str
        lines: int = pydantic.Field(default=10, ge=1)

    def call_view(args: Any) -> GenericCallView:
        return GenericCallView(title=args["path"])

    tool = define_tool(name="head", parameters=Args,
                       output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                       present_call=call_view, execute=lambda a, c: "")
    assert tool.present_call is not None
    assert tool.present_call({"path": "x"}) == GenericCallView(title="x")
    assert tool.present_call({"path": "x", "lines": 0}) is None  # fails the model's check


def test_define_tool_as_decorator_with_options() -> None:
    @define_tool(name="renamed", description="Explicit.")
    async def f() -> str:
        return ""

    assert f.name == "renamed" and f.description == "Explicit."


async def test_execution_carries_the_definition() -> None:
    registry = ToolRegistry()
    seen: list[Any] = []

    @registry.tool(timeout_ms=500)
    async def t() -> str:
        return ""

    def pre(execution: ToolExecution, decision: Any) -> None:
        seen.append(execution.definition)

    registry.on_pre_execute(pre)
    await registry.execute(ToolCall(call_id="1", name="t"))
    assert seen[0].timeout_ms == 500 and seen[0] is registry.get("t")


def test_a_definition_is_the_definition_view_an_execution_carries() -> None:
    # execution.definition is typed by what a call reads of it (execution.py may not name
    # ToolDefinition: that would close an import cycle); mypy checks the assignment.
    @define_tool(timeout_ms=250)
    async def t(path: str) -> str:
        """Read."""
        return path

    view: DefinitionView = t
    assert isinstance(view, DefinitionView)
    assert (view.name, view.description, view.timeout_ms) == ("t", "Read.", 250)
    assert view.parameters == t.parameters
