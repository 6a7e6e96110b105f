"""define_tool's options are checked twice: by mypy (typed overloads) and at run time
(an unknown keyword is a ``TypeError``), and ``registry.tool`` takes the same options."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from mypy import api as mypy_api

from dsh_jupyter import ToolRegistry, define_tool
from dsh_jupyter.registry.definition import FunctionToolOptions, SchemaToolOptions

ROOT = Path(__file__).resolve().parents[3]

SNIPPET = '''\
from dsh_jupyter import ToolRegistry, define_tool
from dsh_jupyter.registry import ToolDefinition

registry = ToolRegistry()


@define_tool
async def plain(x: int) -> int:
    return x


@define_tool(name="named", timeout_ms=500)
async def named(x: int) -> int:
    return x


@registry.tool(is_concurrency_safe=lambda args: True)
async def registered(x: int) -> int:
    return x


echo: ToolDefinition = define_tool(
    name="echo", parameters={"type": "object"},
    output={"schema": {"type": "string"}, "render": lambda args, value: str(value)},
    execute=lambda args, ctx: args["text"])
again: ToolDefinition = define_tool(registered, description="Same body.")
typo = define_tool(  # line 27
    name="echo", paramters={"type": "object"},
    output={"schema": {"type": "string"}, "render": lambda args, value: str(value)},
    execute=lambda args, ctx: args["text"])


@define_tool(nmae="x")  # line 33
async def typo_decorated(x: int) -> int:
    return x


@registry.tool(timeout=5)  # line 38
async def typo_registered(x: int) -> int:
    return x


half = define_tool(name="echo", execute=lambda args, ctx: "")  # line 43
'''


def mypy_errors(source: str, tmp_path: Path) -> dict[int, str]:
    """mypy's errors on ``source`` (the project's strict settings), by line."""
    path = tmp_path / "snippet.py"
    path.write_text(source)
    out, err, _status = mypy_api.run([
        str(path), "--config-file", str(ROOT / "pyproject.toml"),
        "--cache-dir", str(ROOT / ".mypy_cache"), "--no-error-summary", "--no-pretty",
        "--hide-error-context", "--show-error-codes"])
    assert err == ""
    errors: dict[int, str] = {}
    for match in re.finditer(r"^.*?:(\d+): error: (.*)$", out, re.MULTILINE):
        number = int(match.group(1))
        errors[number] = errors.get(number, "") + match.group(2)
    return errors


@pytest.mark.timeout(300)  # a cold mypy cache analyses pydantic too
def test_mypy_reports_a_misspelled_option(tmp_path: Path) -> None:
    errors = mypy_errors(SNIPPET, tmp_path)
    assert sorted(errors) == [27, 33, 38, 43], errors
    assert '"paramters"' in errors[27] and 'did you mean "parameters"' in errors[27]
    assert '"nmae"' in errors[33]
    assert '"timeout"' in errors[38] and '"timeout_ms"' in errors[38]
    assert "define_tool" in errors[43]  # the schema form without parameters and output


def _body(args: Any, ctx: Any) -> str:
    return ""


OUTPUT: Any = {"schema": {"type": "string"}, "render": lambda args, value: str(value)}


async def _fn(x: int) -> int:
    return x


@pytest.mark.parametrize("build", [
    lambda: define_tool(_fn, nmae="x"),  # type: ignore[call-overload]
    lambda: define_tool(nmae="x"),  # type: ignore[call-overload]
    lambda: define_tool(  # type: ignore[call-overload]
        name="t", paramters={"type": "object"}, output=OUTPUT, execute=_body),
    lambda: ToolRegistry().tool(timeout=5)(_fn),  # type: ignore[call-overload]
    lambda: ToolRegistry().tool(_fn, timeout=5),  # type: ignore[call-overload]
], ids=["function", "decorator", "schemas", "registry-decorator", "registry-function"])
def test_an_unknown_keyword_is_a_type_error(build: Any) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        build()


def test_options_of_the_other_form_are_a_type_error() -> None:
    define: Any = define_tool
    with pytest.raises(TypeError, match="either a function or execute="):
        define(_fn, execute=_body)
    with pytest.raises(TypeError, match="schema form"):
        define(_fn, parameters={"type": "object"})
    with pytest.raises(TypeError, match="schema form"):
        define(name="t", parameters={"type": "object"}, output=OUTPUT)
    with pytest.raises(TypeError, match="also needs parameters=, output="):
        define(name="t", execute=_body)


def test_the_typed_options_are_exactly_the_keywords_define_tool_takes() -> None:
    keywords = {name for name, param in inspect.signature(define_tool).parameters.items()
                if param.kind is param.KEYWORD_ONLY}
    typed = set(FunctionToolOptions.__annotations__) | set(SchemaToolOptions.__annotations__)
    assert keywords == typed
    assert {"parameters", "execute", "allow_unsupported_schema"}.isdisjoint(
        FunctionToolOptions.__annotations__)


def test_registry_tool_takes_the_function_options() -> None:
    registry = ToolRegistry()

    @registry.tool(name="renamed", description="Explicit.", timeout_ms=5,
                   is_concurrency_safe=lambda args: True)
    async def f() -> str:
        return ""

    definition = registry.get("renamed")
    assert definition is not None and definition.description == "Explicit."
    assert definition.timeout_ms == 5 and f.__name__ == "f"
