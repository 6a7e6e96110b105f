"""The Python SDK that Code Mode shows the model: typed stubs for every visible tool.

:func:`render_python_sdk` turns tool definitions (name, description, JSON Schemas
of the arguments and of the canonical output) into the text of a Python module:
a ``ToolCallError`` class, one ``TypedDict`` per object schema, a ``Tools``
protocol with one ``async`` method per tool, and the injected ``tools: Tools``.
:func:`python_sdk_instructions` is the fixed usage text the module follows.

What the tests hold this module to:

- deterministic: tools are sorted by name, so one tool set gives one byte string
  (property order is kept: it is part of the tool's definition);
- total: any input renders; what the supported subset does not cover (``$ref``,
  ``allOf``, type arrays, malformed values, cycles, absurd nesting) becomes ``Any``, but
  for an ``anyOf`` alone, which is the union of its branches (``Optional[X]`` is
  ``X | None``);
- inert: descriptions become comments and docstrings that cannot end early, so a
  hostile description stays text;
- valid: the module compiles and passes ``mypy --strict``.

Example::

    >>> json_schema_to_py({"type": "array", "items": {"enum": ["a", "b", None]}})
    'list[Literal["a", "b"] | None]'
"""

from __future__ import annotations

import keyword
import math
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class SdkTool:
    """One visible tool as the SDK presents it; the schemas are plain JSON Schema."""

    name: str
    description: str
    parameters: Mapping[str, object]
    output: Mapping[str, object]


def render_python_sdk(tools: Iterable[SdkTool]) -> str:
    """The SDK module text for ``tools``: the same tool set always gives the same bytes.

    Names are unique in a registry; should two tools share one, the first by
    ``(name, description)`` is kept. Never raises on malformed schemas.
    """
    return python_sdk_parts(tools).module()


@dataclass(frozen=True, slots=True, kw_only=True)
class SdkToolPart:
    """One tool's share of the SDK module: the type blocks declared for its arguments and
    output (nested classes included), and its ``Tools`` member, as the module holds them."""

    name: str
    blocks: tuple[str, ...]
    member: str

    def text(self) -> str:
        """The blocks, then the member, separated as in the module (what ``describe`` shows)."""
        return "\n\n\n".join((*self.blocks, self.member)) + "\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class SdkParts:
    """The SDK module cut by tool: :meth:`module` joins the parts into exactly the text of
    :func:`render_python_sdk`, so a tool's part is byte-identical to its place in it."""

    imports: str
    tools: tuple[SdkToolPart, ...]

    def module(self) -> str:
        members = [part.member for part in self.tools]
        members.append(_GETITEM)
        parts = [
            self.imports,
            _TOOL_CALL_ERROR,
            *(block for part in self.tools for block in part.blocks),
            "class Tools(Protocol):\n" + "\n\n".join(members),
            "tools: Tools",
        ]
        return "\n\n\n".join(parts) + "\n"


def python_sdk_parts(tools: Iterable[SdkTool], *,
                     attribute_names: Collection[str] = ()) -> SdkParts:
    """The SDK for ``tools`` cut into one part per tool (sorted by name).

    A tool's class names depend on the whole set (the first to claim a name keeps it),
    so a part is only meaningful for the set it was rendered with. ``attribute_names``
    are taken on ``tools`` by something else (discovery's ``search`` and ``describe``):
    a tool with such a name is written in its subscript form, ``tools["search"](...)``.
    """
    unique: dict[str, SdkTool] = {}
    for tool in sorted(tools, key=lambda t: (t.name, t.description)):
        unique.setdefault(tool.name, tool)
    renderer = _Renderer(declare=True)
    # Claim every tool's own names first so nested classes can never take them.
    bases = {name: renderer.claim_base(_tool_base(name)) for name in unique}
    taken = frozenset(attribute_names)
    parts: list[SdkToolPart] = []
    for name, tool in unique.items():
        first = len(renderer.blocks)
        args = renderer.declare_root(tool.parameters, f"{bases[name]}Args")
        output = renderer.declare_root(tool.output, f"{bases[name]}Output")
        member = _tool_member(name, tool.description, args, output, method=name not in taken)
        parts.append(SdkToolPart(name=name, blocks=tuple(renderer.blocks[first:]),
                                 member=member))
    imports = ", ".join(sorted(renderer.imports | {"Any", "Protocol"}))
    return SdkParts(imports=f"from typing import {imports}", tools=tuple(parts))


def python_sdk_instructions() -> str:
    """The fixed usage instructions (markdown) shown before the SDK module."""
    return _INSTRUCTIONS


def json_schema_to_py(schema: object) -> str:
    """A Python type expression for ``schema``, e.g. ``list[str] | None``.

    Outside the SDK there is nowhere to declare a ``TypedDict``, so objects
    become ``dict[str, Any]``. Never raises; unsupported constructs become ``Any``.
    """
    return _Renderer(declare=False).type_of(schema, "", depth=0, doc=False)


def argument_shape(parameters: object, *, limit: int = 160) -> str:
    """The argument dict of a tool with ``parameters`` on one line, typed as the SDK
    types it: what a program that called the tool wrongly (``tools.add(1, 2)``) is shown.

    Fields keep their order; optional ones are ``NotRequired[...]``; nested objects are
    ``dict[str, Any]`` (their ``TypedDict`` is in the SDK); past ``limit`` characters the
    remaining fields are ``...``. Never raises.

    >>> argument_shape({"type": "object", "properties": {"a": {"type": "integer"},
    ...                 "b": {"type": "string"}}, "required": ["a"]})
    '{"a": int, "b": NotRequired[str]}'
    """
    props = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(props, Mapping) or not props:
        text = json_schema_to_py(parameters)
        return "{}" if text == "dict[str, Any]" else text
    required = parameters.get("required") if isinstance(parameters, Mapping) else None
    needed = set(required) if isinstance(required, list) else set()
    fields: list[str] = []
    size = 2  # the braces
    for key, sub in props.items():
        text = json_schema_to_py(sub)  # one line: literals are escaped
        field = f"{_py_str(str(key))}: {text if key in needed else f'NotRequired[{text}]'}"
        size += len(field) + 2
        if size > limit:
            fields.append("...")
            break
        fields.append(field)
    return "{" + ", ".join(fields) + "}"


_INSTRUCTIONS = """\
## Writing code for run_code

`run_code` takes two required arguments: `code` — the body of an async Python function \
(top-level `await` and `return` work; `asyncio`, `tools` and `ToolCallError` are already \
defined) — and `description`, a short summary of what the program does. Every run starts in \
a fresh kernel: nothing carries over from earlier runs. Inside the program:

- Call tools as `await tools.name({...})` with plain dicts — subscript access for names that \
are not identifiers: `await tools["my-tool"]({...})`. The `TypedDict`s below only describe \
shapes; never construct or import them. Every call resolves to the tool's canonical JSON value \
(plain dicts and lists). Tool arguments must be JSON: `dict`, `list`, `str`, `int`, `float`, \
`bool`, `None`.
- A FAILED tool call raises `ToolCallError`, whose `tool_name` identifies the failed tool and \
whose `message` is human-readable — `try`/`except ToolCallError` to handle it and continue.
- Independent read-only calls MAY overlap under `asyncio.gather` (safe calls run concurrently; \
mutating calls run alone, in submission order). Sequence dependent work with `await`.
- Emit results with `return` and/or `print(...)`. ONLY what you print or return comes back to \
you — intermediate tool results never enter the conversation, so extract just what you need.

The available tools:"""

# Declarations only: the kernel defines the real class, the instructions say what it means.
_TOOL_CALL_ERROR = """\
class ToolCallError(Exception):
    tool_name: str
    message: str"""

_GETITEM = "    def __getitem__(self, name: str) -> Any: ..."

_MAX_DEPTH = 32  # schemas are trees a few levels deep; beyond this (or a cycle): Any
_MAX_NODES = 10_000  # per root: bounds work on schemas built as DAGs in Python
_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
# Constructs that can replace or extend a node's whole shape: its own type says too little.
_OPAQUE = ("$ref", "$dynamicRef", "anyOf", "allOf")
# A node whose only shape is its anyOf (annotations aside) is the union of its branches
# (pydantic writes Optional[X] as {"anyOf": [X, {"type": "null"}], "default": null}).
_ANY_OF_ALONE = frozenset({"anyOf", "description", "title", "default", "examples", "$comment",
                           "deprecated", "readOnly", "writeOnly"})
_RESERVED = frozenset(
    {"Any", "Literal", "NotRequired", "Protocol", "Required", "TypeAlias", "TypedDict",
     "ToolCallError"}
    | {"Tools", "tools"}
)
_TOTAL_FALSE = ", total=False"
_NON_ALNUM = re.compile(r"[^0-9A-Za-z]+")
_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_TYPING_NAME = re.compile(r"\b(?:Any|Literal|NotRequired|Required)\b")
_QUOTE_RUN = re.compile(r'"{3,}')

_Alt = tuple[bool, str]  # one union member: (is a Literal member, its text)
_ANY: list[_Alt] = [(False, "Any")]


class _Renderer:
    """Schema → type expression; with ``declare``, objects become named TypedDicts."""

    def __init__(self, *, declare: bool) -> None:
        self.declare = declare
        self.taken: set[str] = set(_RESERVED)
        self.blocks: list[str] = []
        self.imports: set[str] = set()
        self.budget = _MAX_NODES

    def claim(self, hint: str) -> str:
        name, n = hint, 1
        while name in self.taken:
            n += 1
            name = f"{hint}{n}"
        self.taken.add(name)
        return name

    def claim_base(self, base: str) -> str:
        name, n = base, 1
        while f"{name}Args" in self.taken or f"{name}Output" in self.taken:
            n += 1
            name = f"{base}{n}"
        self.taken |= {f"{name}Args", f"{name}Output"}
        return name

    def declare_root(self, schema: object, name: str) -> str:
        """The type of a tool's arguments or output: ``name``, declared as the root schema's
        class; or, when the root is no object, its type expression itself (the signature
        says all an alias would), unless a description needs an alias to hang on."""
        self.budget = _MAX_NODES
        self.taken.discard(name)
        text = self.type_of(schema, name, depth=0, doc=True)
        if text == name:
            return name
        self.taken.add(name)
        self.imports |= _typing_names(text)
        doc = schema.get("description") if isinstance(schema, Mapping) else None
        comment = "".join(f"# {line}\n" for line in _lines(doc) if line)
        if not comment:
            return text
        self.imports.add("TypeAlias")
        self.blocks.append(f"{comment}{name}: TypeAlias = {text}")
        return name

    def type_of(self, schema: object, hint: str, *, depth: int, doc: bool) -> str:
        return _union(self.alts(schema, hint, depth, doc))

    def alts(self, schema: object, hint: str, depth: int, doc: bool) -> list[_Alt]:
        self.budget -= 1
        if not isinstance(schema, Mapping) or depth > _MAX_DEPTH or self.budget < 0:
            return _ANY
        if "anyOf" in schema and schema.keys() <= _ANY_OF_ALONE:
            return self.union_of(schema["anyOf"], hint, depth)
        if any(key in schema for key in _OPAQUE):
            return _ANY
        if "const" in schema:
            member = _literal(schema["const"])
            return [member] if member else _ANY
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list | tuple):
                return _ANY
            found = [member for value in values if (member := _literal(value))]
            return found if values and len(found) == len(values) else _ANY
        if "oneOf" in schema:
            return self.union_of(schema["oneOf"], hint, depth)
        kind = schema.get("type")
        if kind == "array":
            items = self.type_of(schema.get("items"), hint + "Item", depth=depth + 1, doc=True)
            return [(False, f"list[{items}]")]
        if kind == "object":
            return [(False, self.object_type(schema, hint, depth, doc))]
        if isinstance(kind, str) and kind in _SCALARS:
            return [(False, _SCALARS[kind])]
        return _ANY

    def union_of(self, branches: object, hint: str, depth: int) -> list[_Alt]:
        """The members of a ``oneOf``/``anyOf``; as types both are the union of the branches.
        ``X`` or null (``Optional[X]`` in pydantic) names ``X``'s class after the field."""
        if not isinstance(branches, list | tuple) or not branches:
            return _ANY
        optional = len([b for b in branches if b != {"type": "null"}]) == 1
        return [
            alt
            for i, branch in enumerate(branches, 1)
            for alt in self.alts(branch, hint if optional else hint + _branch_suffix(branch, i),
                                 depth + 1, True)
        ]

    def object_type(self, schema: Mapping[str, object], hint: str, depth: int, doc: bool) -> str:
        props = schema.get("properties")
        if not isinstance(props, Mapping) or not props:
            extra = schema.get("additionalProperties")
            value = "Any"
            if isinstance(extra, Mapping):
                value = self.type_of(extra, hint + "Value", depth=depth + 1, doc=True)
            return f"dict[str, {value}]"
        if not self.declare or not all(isinstance(key, str) for key in props):
            return "dict[str, Any]"
        required = schema.get("required")
        needed = (
            {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
        )
        name = self.claim(hint)  # before the fields, so the parent keeps the plain name
        fields: list[tuple[str, str, bool, str]] = []
        for key, sub in props.items():
            text = self.type_of(sub, hint + (_camel(key) or "Field"), depth=depth + 1, doc=False)
            self.imports |= _typing_names(text)
            fields.append((key, text, key in needed, _field_note(sub)))
        # Mark whichever kind costs less: the optional fields (NotRequired[...]) or, in a
        # total=False class, the required ones (Required[...]); a tie keeps NotRequired.
        optional = sum(not is_needed for _, _, is_needed, _ in fields)
        total = len("NotRequired[]") * optional <= len(_TOTAL_FALSE) + len("Required[]") * (
            len(fields) - optional)
        marker = "NotRequired" if total else "Required"
        self.imports.add("TypedDict")
        if any(is_needed != total for _, _, is_needed, _ in fields):
            self.imports.add(marker)
        typed = [(key, text if is_needed == total else f"{marker}[{text}]", note)
                 for key, text, is_needed, note in fields]
        docstring = _docstring(schema.get("description") if doc else None, "    ")
        options = "" if total else _TOTAL_FALSE
        if all(_is_field_name(key) for key, _, _ in typed):
            body = "".join(f"    {key}: {text}{note}\n" for key, text, note in typed)
            self.blocks.append(f"class {name}(TypedDict{options}):\n{docstring}{body}".rstrip())
        else:
            body = "".join(f"    {_py_str(k)}: {text},{note}\n" for k, text, note in typed)
            self.blocks.append(f'{name} = TypedDict("{name}", {{\n{body}}}{options})')
        return name


def _union(alts: list[_Alt]) -> str:
    """``A | B`` in first-seen order, duplicates dropped, Literal members merged; Any absorbs."""
    if not alts or (False, "Any") in alts:
        return "Any"
    members: list[str] = []
    literals: list[str] = []
    for is_literal, text in alts:
        if is_literal and not literals:
            members.append("")  # the merged Literal[...] goes where the first member was
        if is_literal and text not in literals:
            literals.append(text)
        elif not is_literal and text not in members:
            members.append(text)
    merged = f"Literal[{', '.join(literals)}]"
    return " | ".join(member or merged for member in members)


def _literal(value: object) -> _Alt | None:
    """A JSON scalar as a union member; ``None`` when ``value`` is not a JSON scalar."""
    if value is None:
        return (False, "None")
    if type(value) is float and not value.is_integer():
        return (False, "float")  # Literal has no float form
    text = _scalar_text(value)
    return None if text is None else (True, text)


def _scalar_text(value: object) -> str | None:
    """Python source for a JSON scalar (``1.0`` is the integer 1, as in JSON), else ``None``."""
    if value is None or type(value) is bool:
        return repr(value)
    if type(value) is int:
        return str(value) if value.bit_length() < 4000 else None  # str() refuses huge ints
    if type(value) is float:
        return str(int(value)) if value.is_integer() else repr(value)
    return _py_str(value) if type(value) is str else None


def _py_str(text: str) -> str:
    """A Python string literal for ``text``, double-quoted where that needs no escapes."""
    literal = repr(text)
    return f'"{literal[1:-1]}"' if literal[0] == "'" and '"' not in text else literal


def _typing_names(type_text: str) -> set[str]:
    return set(_TYPING_NAME.findall(_STRING_LITERAL.sub("", type_text)))


def _camel(name: str) -> str:
    """``read_file`` → ``ReadFile``, ``mcp.github/list`` → ``McpGithubList`` (ASCII only)."""
    return "".join(part[:1].upper() + part[1:] for part in _NON_ALNUM.split(name))


def _tool_base(name: str) -> str:
    camel = _camel(name)
    return camel if camel[:1].isalpha() else f"Tool{camel}"


def _branch_suffix(branch: object, index: int) -> str:
    """Name a oneOf branch after its string discriminator (``kind: {const: "x"}`` → ``X``)."""
    props = branch.get("properties") if isinstance(branch, Mapping) else None
    for sub in props.values() if isinstance(props, Mapping) else ():
        const = sub.get("const") if isinstance(sub, Mapping) else None
        if isinstance(const, str) and _camel(const):
            return _camel(const)
    return f"Option{index}"


def _is_identifier(name: str) -> bool:
    # NFKC: Python normalises identifiers, so "ﬁle" written as a name would mean "file".
    return (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and unicodedata.normalize("NFKC", name) == name
    )


def _is_field_name(key: str) -> bool:
    return _is_identifier(key) and not key.startswith("__")  # __x would be name-mangled


def _is_method_name(name: str) -> bool:
    return _is_identifier(name) and not keyword.issoftkeyword(name) and not name.startswith("_")


def _printable(line: str) -> str:
    """Control, format and separator characters (bidi overrides, NUL, ...) become spaces."""
    return line if line.isprintable() else "".join(c if c.isprintable() else " " for c in line)


def _lines(text: object) -> list[str]:
    """``text`` as printable lines without trailing space or repeated blank lines."""
    if not isinstance(text, str):
        return []
    lines: list[str] = []
    for raw in text.strip().splitlines():
        line = _printable(raw).rstrip()
        if line or (lines and lines[-1]):
            lines.append(line)
    return lines


def _field_note(schema: object) -> str:
    """The trailing ``  # ...`` of a field: its description, then what its type cannot say
    (format, default, constraints), or ``""``. A default that omitting the field already implies
    (``False``, ``None``) is left out."""
    if not isinstance(schema, Mapping):
        return ""
    words = _one_line(schema.get("description"))
    notes = [fmt] if (fmt := _one_line(schema.get("format"))) else []
    default = schema.get("default", False)
    if default is not False and default is not None and (text := _scalar_text(default)):
        notes.append(f"default {text}")  # repr-style: already one printable line
    notes += _constraints(schema)
    if notes:
        words = f"{words} ({'; '.join(notes)})" if words else "; ".join(notes)
    return f"  # {words}" if words else ""


def _constraints(schema: Mapping[str, object]) -> list[str]:
    """The constraints a type cannot carry, as short notes: ``1..5``, ``> 0``, ``items <= 6``,
    ``multiple of 5``, ``unique items``, ``pattern ^[a-z]+$``."""
    found: list[str] = []
    for low, high, unit in (("minimum", "maximum", ""), ("minLength", "maxLength", "length "),
                            ("minItems", "maxItems", "items ")):
        lo, hi = _number_text(schema.get(low)), _number_text(schema.get(high))
        if lo is not None and hi is not None:
            found.append(f"{unit}{lo}..{hi}")
        elif lo is not None:
            found.append(f"{unit}>= {lo}")
        elif hi is not None:
            found.append(f"{unit}<= {hi}")
    for key, op in (("exclusiveMinimum", ">"), ("exclusiveMaximum", "<")):
        if (bound := _number_text(schema.get(key))) is not None:
            found.append(f"{op} {bound}")
    if (step := _number_text(schema.get("multipleOf"))) is not None:
        found.append(f"multiple of {step}")
    if schema.get("uniqueItems") is True:
        found.append("unique items")
    if pattern := _one_line(schema.get("pattern")):
        found.append(f"pattern {pattern}")
    return found


def _number_text(value: object) -> str | None:
    """A JSON number as written in a note, else ``None`` (booleans are not numbers)."""
    finite = type(value) is int or (type(value) is float and math.isfinite(value))
    return _scalar_text(value) if finite else None


def _one_line(text: object) -> str:
    return " ".join(" ".join(_lines(text)).split())


def _docstring(text: object, indent: str) -> str:
    """A docstring line block for ``text`` that no content can terminate early, or ``""``."""
    lines = _lines(text)
    if not lines:
        return ""
    body = "\n".join(f"{indent}{line}" if line else "" for line in lines)[len(indent) :]
    raw = "r" if "\\" in body else ""  # raw: backslashes in descriptions stay as written
    body = _QUOTE_RUN.sub(_escape_quote_run, body)
    if body.endswith(('"', "\\")):
        body += " "
    closing = f"\n{indent}" if len(lines) > 1 else ""
    return f'{indent}{raw}"""{body}{closing}"""\n'


def _escape_quote_run(run: re.Match[str]) -> str:
    # Every third quote escaped: no three in a row can close the docstring early.
    return "".join('\\"' if i % 3 == 2 else '"' for i in range(len(run.group())))


def _tool_member(name: str, description: str, args: str, output: str, *,
                 method: bool = True) -> str:
    if method and _is_method_name(name):
        head = f"    async def {name}(self, args: {args}) -> {output}:"
        docstring = _docstring(description, "        ")
        return f"{head}\n{docstring}".rstrip() if docstring else f"{head} ..."
    usage = f"    # tools[{_py_str(name)}](args: {args}) -> {output}"
    return "\n".join([usage, *(f"    #     {line}".rstrip() for line in _lines(description))])
