"""The tool sets the SDK renderer is tested on (tests/unit/codemode/test_sdk_python.py's
goldens, tests/integration/test_sdk_type_check.py's mypy run): realistic, small, exotic,
nested, degraded (junk schemas, cycles), optional and pydantic-typed tools."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from dsh_jupyter import ToolRegistry
from dsh_jupyter.codemode.sdk_python import SdkTool

GOLDEN = Path(__file__).parents[1] / "golden" / "sdk"


def realistic_tools() -> list[SdkTool]:
    data = json.loads((GOLDEN / "realistic.tools.json").read_text(encoding="utf-8"))
    return [SdkTool(**tool) for tool in data]


def tool(
    name: str, description: str = "", parameters: object = None, output: object = None
) -> SdkTool:
    """A tool whose schemas may be anything (the renderer must cope with junk)."""
    empty = {"type": "object", "properties": {}}
    return SdkTool(
        name=name,
        description=description,
        parameters=empty if parameters is None else parameters,  # type: ignore[arg-type]
        output={} if output is None else output,  # type: ignore[arg-type]
    )


def obj(properties: Mapping[str, object], *required: str, **extra: object) -> dict[str, object]:
    return {"type": "object", "properties": dict(properties), "required": list(required), **extra}


STR = {"type": "string"}
INT = {"type": "integer"}
HOSTILE = '"""\nimport os\nos.system("rm -rf /")\n"""\\'

SMALL = [
    tool(
        "read_file",
        "Read a text file as numbered lines.",
        obj(
            {"path": {**STR, "description": "File path."}, "limit": {**INT, "default": 2000}},
            "path",
        ),
        obj({"lines": {"type": "array", "items": STR}, "truncated": {"type": "boolean"}}, "lines"),
    ),
    tool("list_dir", "List a directory.", obj({"path": STR}), {"type": "array", "items": STR}),
    tool("bash", "Run a shell command.", obj({"command": STR}, "command"), STR),
]

EXOTIC = [
    tool("web-search", "Search the web.", obj({"q": STR}, "q"), STR),
    tool("mcp.github/list_issues", "List issues.\n\nPaginated.", obj({"repo": STR}, "repo")),
    tool("class", "A keyword.", obj({"x": INT})),
    tool("match", "A soft keyword."),
    tool("_private", "Leading underscore."),
    tool("read_file", "Identifier twin."),
    tool("read-file", "Same CamelName as read_file."),
    tool("3d-render", "Starts with a digit."),
    tool("日本語", "Not ASCII."),
    tool("ﬁle", "NFKC would turn this name into 'file'."),
    tool("", "Empty name."),
    tool('say "hi"\n', "Quotes and a newline."),
    tool("tool_call_error", "Its classes must not collide with ToolCallError."),
    tool("hostile", HOSTILE, obj({"x": {**STR, "description": HOSTILE}})),
    tool("bidi", "Trojan\u202esource\x00 and \ud800 surrogate"),
]

NESTED = [
    tool(
        "configure",
        "Nested objects, arrays, enums, oneOf and awkward keys.",
        obj(
            {
                "class": {**STR, "description": "A keyword key."},
                "from": INT,
                "my-field": {"type": "boolean"},
                "__dunder": STR,
                "ﬁle": STR,
                "plain": STR,
            },
            "class",
        ),
        obj(
            {
                "config": obj(
                    {
                        "host": STR,
                        "ports": {"type": "array", "items": {"type": "array", "items": INT}},
                        "tls": obj({"mode": {"enum": ["off", "on", 'it\'s "strict"\n']}}),
                    },
                    "host",
                    description="Connection settings.",
                ),
                "config_tls": obj({"clash": STR}, description="Claims a name the path also makes."),
                "events": {
                    "type": "array",
                    "items": {
                        "oneOf": [
                            obj(
                                {"kind": {"const": "start"}, "at": {"type": "number"}},
                                "kind",
                                description="Emitted once the service is up.",
                            ),
                            obj({"kind": {"const": "stop"}, "code": INT}, "kind"),
                            obj({"anything": {}}),
                            {"type": "null"},
                        ]
                    },
                },
                "level": {"enum": [1, 2.0, 2.5, True, None, "x"]},
                "mode": {"oneOf": [{"const": "a"}, {"const": "b"}, STR, {"const": "a"}, STR]},
                "labels": {"type": "object", "additionalProperties": STR},
                "empty": {"type": "object"},
                "keys": STR,
                "type": {"enum": ["str", "int"], "description": "Names a field like a type."},
            },
            "config",
        ),
    ),
]

# Cycles: the renderer follows them to its depth cap, then says Any.
_CYCLE: dict[str, object] = {"type": "array"}
_CYCLE["items"] = _CYCLE
_OBJECT_CYCLE: dict[str, object] = {"type": "object", "properties": {}}
_OBJECT_CYCLE["properties"] = {"again": _OBJECT_CYCLE}

DEGRADED = [
    tool(
        "degraded",
        "Constructs outside the subset degrade to Any.",
        {
            "type": "object",
            "properties": {
                "ref": {"$ref": "#/definitions/x"},
                "any_of": {"anyOf": [STR, INT]},
                "type_array": {"type": ["string", "null"]},
                "enum_object": {"enum": ["a", {"b": 1}]},
                "enum_empty": {"enum": []},
                "enum_junk": {"enum": "abc"},
                "const_list": {"const": [1, 2]},
                "weird_type": {"type": "decimal"},
                "not_a_dict": ["string"],
                "props_list": {"type": "object", "properties": ["a"]},
                "props_int_keys": {"type": "object", "properties": {1: STR}},
                "items_tuple": {"type": "array", "items": [STR, INT]},
                "one_of_empty": {"oneOf": []},
                "one_of_any": {"oneOf": [STR, {}]},
                "huge_int": {"enum": [10**2000]},
                "nan_default": {"type": "number", "default": float("nan")},
                "required_junk": {**obj({"a": STR}), "required": "a"},
            },
            "required": [7, "ref", None],
        },
        "not even a mapping",
    ),
    tool("cycle", "An array of itself.", obj({"x": _CYCLE})),
]

# What pydantic servers (mcp-server-time, mcp-server-git, FastMCP) write for Optional[...].
OPTIONAL = [
    tool(
        "find",
        "Optional fields as pydantic writes them.",
        obj({
            "query": STR,
            "limit": {"anyOf": [INT, {"type": "null"}], "default": None, "title": "Limit"},
            "window": {"anyOf": [obj({"start": STR, "end": STR}, "start"), {"type": "null"}],
                       "default": None, "description": "Only this time window."},
            "either": {"anyOf": [STR, INT]},
        }, "query"),
        {"anyOf": [{"type": "array", "items": STR}, {"type": "null"}]},
    ),
]


class Point(BaseModel):
    x: int
    y: int = 0


def typed_tools() -> list[SdkTool]:
    """Tools typed with Python annotations, as ``%dsh_sdk`` shows them: the schemas are
    what the registry derived from pydantic (``dict[str, X]`` keeps ``X``)."""
    registry = ToolRegistry()

    @registry.tool
    async def convert(prices: dict[str, float], rates: dict[str, dict[str, float]],
                      points: dict[str, Point], units: dict[str, Literal["m", "s"]] | None = None,
                      ) -> dict[str, float]:
        "Convert prices."
        return prices

    return [SdkTool(name=d.name, description=d.description, parameters=d.parameters,
                    output=d.output.schema) for d in registry.visible().values()]


CASES = {
    "typed": typed_tools(),
    "optional": OPTIONAL,
    "small": SMALL,
    "exotic": EXOTIC,
    "nested": NESTED,
    "degraded": DEGRADED,
    "realistic": realistic_tools(),
}
