"""What a type check of a program reports: the program wrapped for the checker, and the
checker's diagnostics turned into the program's own problems.

A program is the body of an async function (see ``compile_program`` in the kernel
package), so the checker reads it as one, below the SDK the model was shown::

    from _dsh_sdk_<hash> import *      # the SDK module, byte for byte as rendered
    import asyncio
    tools: Tools
    display: Any
    get_ipython: Any
    async def __program():
        <the program, each line indented by four spaces>

Only what a run would also fail on is reported, each at the program's own line:

- diagnostics of the SDK and of the lines above are dropped, and so is anything below an
  error (warnings, hints);
- a dict or list the checker only knows as ``dict[...]``/``list[...]`` (built in a variable,
  a loop, a comprehension, ``**`` unpacked, or holding one that was) is taken on trust
  where a ``TypedDict`` or a typed list is wanted: a literal written out at the call is
  checked key by key, and only its innermost mismatches are reported; a value built from
  variables is not (no type says which keys it holds);
- writing, deleting, popping or updating a key of a result is allowed: results are plain
  dicts;
- ``tools.x(path="a")`` (keywords alone, which the kernel turns into the dict) is not held
  to the one-dict signature;
- on a stateful runtime a name the program does not define may be an earlier run's.

A syntax error needs no checker: :func:`syntax_problem` reports what ``ast`` says.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from .sdk_python import SdkTool, python_sdk_parts, render_python_sdk
from .ty_server import Diagnostic

CheckPrograms = Literal["off", "warn", "error"]
CHECK_PROGRAMS: tuple[CheckPrograms, ...] = ("off", "warn", "error")

PREAMBLE = """\
from {module} import *
import asyncio
tools: Tools
display: Any
get_ipython: Any
async def __program():
"""
PREAMBLE_LINES = PREAMBLE.count("\n")
INDENT = "    "
MAX_PROBLEMS = 20
"""The most problems a check reports (the rest are counted)."""
MAX_MESSAGE_CHARS = 300

_DISCOVERY_HELPERS = """\
    async def search(self, query: str, limit: int = 10) -> list[dict[str, str]]: ...
    async def describe(self, name: str) -> str: ...
"""
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
# ty's words for "this value, of that type, is not the declared type":
_MISMATCH = (
    re.compile(r"Expected `(?P<declared>[^`]+)`, found `(?P<found>[^`]+)`"),
    re.compile(r"declared type `(?P<declared>[^`]+)` on TypedDict `[^`]*`: "
               r"value of type `(?P<found>[^`]+)`"),
    re.compile(r"Object of type `(?P<found>[^`]+)` is not assignable to `(?P<declared>[^`]+)`"),
)
_SCALARS = frozenset({"str", "int", "float", "bool", "bytes", "None", "Literal"})
_KEYWORD_CALL_RULES = frozenset({"missing-argument", "unknown-argument",
                                 "parameter-already-assigned", "invalid-argument-type",
                                 "too-many-positional-arguments"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgramProblem:
    """One problem the check found, at the program's own 1-based ``line``."""

    line: int
    rule: str
    message: str

    def text(self) -> str:
        """``line 3: <message> [<rule>]``: one line, as the model reads it."""
        return f"line {self.line}: {self.message} [{self.rule}]"


def check_document(program: str, module: str) -> str:
    """``program`` as the checker reads it: below :data:`PREAMBLE`, importing ``module``.
    Line ``n`` of the program is line ``PREAMBLE_LINES + n`` of the document."""
    body = "".join(INDENT + line if line.strip() else line for line in _lines(program))
    return PREAMBLE.format(module=module) + (body if body.strip() else INDENT + "pass\n")


def check_sdk(tools: Iterable[SdkTool], *, discovery: bool) -> str:
    """The SDK module a program is checked against: the one the prompt shows; under
    discovery the full SDK ``describe`` cuts, with ``search`` and ``describe`` methods."""
    if not discovery:
        return render_python_sdk(tools)
    from .discovery import HELPERS

    module = python_sdk_parts(tools, attribute_names=HELPERS).module()
    return module.replace("class Tools(Protocol):\n", "class Tools(Protocol):\n"
                          + _DISCOVERY_HELPERS, 1)


def sdk_module_name(text: str) -> str:
    """A module name that stands for ``text`` alone (its hash)."""
    return f"_dsh_sdk_{hashlib.sha256(text.encode()).hexdigest()[:20]}"


def syntax_problem(error: SyntaxError) -> ProgramProblem:
    """A syntax error as a problem, at the program's line."""
    return ProgramProblem(line=error.lineno or 1, rule="syntax", message=error.msg)


def program_problems(program: str, tree: ast.Module, diagnostics: Iterable[Diagnostic], *,
                     stateful: bool = False) -> tuple[ProgramProblem, ...]:
    """The program's problems among the checker's ``diagnostics`` of
    :func:`check_document` (see the module docstring), in order, each once."""
    lines = _lines(program)
    spots = _Spots(tree)
    kept: list[tuple[_Point, ProgramProblem, _Span | None]] = []
    for diagnostic in diagnostics:
        index = diagnostic.line - PREAMBLE_LINES
        if diagnostic.severity != 1 or not 0 <= index < len(lines):
            continue
        point = (index + 1, diagnostic.column - (len(INDENT) if lines[index].strip() else 0))
        message = _first_line(diagnostic.message)
        verdict = _verdict(diagnostic.code, message, point, spots, stateful=stateful)
        if verdict is not _TRUSTED:
            problem = ProgramProblem(line=point[0], rule=diagnostic.code or "type",
                                     message=message)
            kept.append((point, problem, verdict))
    found: dict[str, tuple[_Point, ProgramProblem]] = {}
    for point, problem, literal in kept:
        # A literal's mismatch is told where it is: inside, if something is reported there.
        if literal is None or not any(literal[0] <= other < literal[1] and other != point
                                      for other, _, _ in kept):
            found.setdefault(problem.text(), (point, problem))
    return tuple(problem for _, problem in sorted(found.values(), key=lambda item: item[0]))


def problem_lines(problems: Sequence[ProgramProblem]) -> list[str]:
    """One line per problem, at most :data:`MAX_PROBLEMS` (then how many more)."""
    lines = [problem.text() for problem in problems[:MAX_PROBLEMS]]
    if len(problems) > MAX_PROBLEMS:
        lines.append(f"(and {len(problems) - MAX_PROBLEMS} more)")
    return lines


def failure_text(problems: Sequence[ProgramProblem]) -> str:
    """The message of a ``type-check`` failure: what happened, then one line per problem."""
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    head = (f"the program was not run: checked against the tools' SDK, it has {count} "
            "(fix and run it again)")
    return "\n".join([head, *problem_lines(problems)])


WARN_HEAD = "Type check (the program ran anyway):"
"""Above the problems a ``warn`` check appends to a run's result."""


# --- which diagnostics a run would not fail on -----------------------------------------

_Point = tuple[int, int]
_Span = tuple[_Point, _Point]
_TRUSTED: _Span = ((0, 0), (0, 0))
"""The verdict on a diagnostic the run would not fail on."""


def _verdict(rule: str, message: str, point: _Point, spots: _Spots, *,
             stateful: bool) -> _Span | None:
    """:data:`_TRUSTED`, or ``None`` (a problem), or the span of a literal whose mismatch
    is a problem unless one is reported inside it."""
    if stateful and rule == "unresolved-reference":
        return _TRUSTED
    if spots.written(point):
        return _TRUSTED
    if rule == "invalid-typed-dict-key" and not spots.read(point):
        return _TRUSTED  # o.get("new"), o.setdefault("new", ...): plain dict methods
    if rule == "missing-typed-dict-key" and spots.unpacked(point):
        return _TRUSTED
    if rule in _KEYWORD_CALL_RULES and spots.keyword_call(point):
        return _TRUSTED
    structural = any((match := pattern.search(message)) is not None
                     and _structural(match["declared"], match["found"])
                     for pattern in _MISMATCH)
    if not structural:
        return None
    literal = spots.literal(point)
    return literal if literal is not None else _TRUSTED


def _structural(declared: str, found: str) -> bool:
    """A plain dict or list where a type that can hold one (a ``TypedDict``, a typed list)
    is declared: the checker cannot tell whether it fits; the run's validation can."""
    if not found.startswith(("dict[", "list[")):
        return False
    bare = re.sub(r"Literal\[[^\]]*\]", "Literal", declared)
    members = [member.strip() for member in bare.split("|")]
    return any(member.split("[", 1)[0] not in _SCALARS for member in members)


class _Spots:
    """Where a program writes result keys (and calls a dict's mutating methods), reads them,
    unpacks dicts, calls a tool with keywords alone, and writes literals: spans of ``ast``
    nodes, in the program's coordinates (1-based lines, UTF-8 byte columns)."""

    def __init__(self, tree: ast.Module) -> None:
        self._written: list[_Span] = []
        self._read: list[_Span] = []
        self._unpacked: list[_Span] = []
        self._keyword_calls: list[_Span] = []
        self._displays: dict[_Point, tuple[_Span, bool]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript):
                bucket = self._read if isinstance(node.ctx, ast.Load) else self._written
                bucket.append(_span(node))
            elif isinstance(node, ast.Call):
                if (isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS
                        and node.args):
                    self._written.append((_span(node.args[0])[0], _span(node)[1]))
                if node.keywords and not node.args and _on_tools(node.func):
                    self._keyword_calls.append(_span(node))
            if isinstance(node, ast.Dict) and None in node.keys:
                self._unpacked.append(_span(node))
            if isinstance(node, ast.Dict | ast.List | ast.Tuple | ast.Set):
                span = _span(node)
                known = self._displays.get(span[0])
                if known is None or known[0][1] < span[1]:  # the outermost display there
                    self._displays[span[0]] = (span, _literal(node))

    def written(self, point: _Point) -> bool:
        return _inside(self._written, point)

    def read(self, point: _Point) -> bool:
        return _inside(self._read, point)

    def unpacked(self, point: _Point) -> bool:
        return _inside(self._unpacked, point)

    def keyword_call(self, point: _Point) -> bool:
        return _inside(self._keyword_calls, point)

    def literal(self, point: _Point) -> _Span | None:
        """The span of the display starting at ``point`` when it is a literal all the way
        down (constants and displays of them), else ``None``."""
        display = self._displays.get(point)
        return display[0] if display is not None and display[1] else None


_MUTATORS = frozenset({"pop", "setdefault", "update", "__setitem__", "__delitem__"})


def _literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, ast.Dict):
        return all(key is not None and _literal(key) for key in node.keys) and all(
            _literal(value) for value in node.values)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return all(_literal(element) for element in node.elts)
    return False


def _on_tools(func: ast.expr) -> bool:
    """``tools.x`` or ``tools["x"]``."""
    target = func.value if isinstance(func, ast.Attribute | ast.Subscript) else None
    return isinstance(target, ast.Name) and target.id == "tools"


def _span(node: ast.expr) -> _Span:
    end = (node.end_lineno or node.lineno, node.end_col_offset or node.col_offset)
    return (node.lineno, node.col_offset), end


def _inside(spans: list[_Span], point: _Point) -> bool:
    return any(start <= point < end for start, end in spans)


def _lines(program: str) -> list[str]:
    """The program's lines as Python counts them (``\\n``, ``\\r\\n``, ``\\r``), ends kept."""
    return _LINE.findall(program)


def _first_line(message: str) -> str:
    line = message.strip().split("\n", 1)[0].strip()
    return line if len(line) <= MAX_MESSAGE_CHARS else line[: MAX_MESSAGE_CHARS - 1] + "…"
