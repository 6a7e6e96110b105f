"""The code that runs inside the throwaway kernel (standard library plus ``comm``).

The host sends this file's *source* to the kernel (it is never imported from
the package there, so a kernel without dsh-jupyter installed works too) and
executes it as the module ``_dsh_jupyter_inkernel``. The host is the only peer:
everything arrives over one comm whose target is :data:`TARGET_NAME`.

Inside the program::

    hits = await tools.search({"query": "kernels"})      # attribute access
    page = await tools["fetch-page"](url=hits[0]["url"])  # any binding name, keywords
    try:
        await tools.delete({"id": 1})
    except ToolCallError as error:
        print(error.tool_name, error.message)
    await tools.delete(1)  # TypeError: tools.delete takes one dict of arguments: ...

Under discovery the host also names *helpers* (``{method: binding}``): methods of
``tools`` whose positional arguments become the binding's object, per
:data:`HELPER_PARAMETERS`: ``await tools.search("kernels", limit=5)`` calls binding
``tools.search`` with ``{"query": "kernels", "limit": 5}``. A helper's binding is not a
tool of ``tools``, and a tool the helper's name shadows stays reachable by subscript.

Messages (the shapes are mirrored by ``dsh_jupyter.kernel.protocol``)::

    kernel -> host  {"kind": "call", "id", "name", "args"}
                    {"kind": "call", "id", "name", "framed": true}
                    {"kind": "done", "ok": true, "value"}
                    {"kind": "done", "ok": true, "framed": true}
                    {"kind": "done", "ok": false, "error", "message"}
                    {"kind": "frame", "for": "call" | "done", "id"?, "text"}
    host -> kernel  {"kind": "result", "id", "ok": true, "value"}
                    {"kind": "result", "id", "ok": false, "message"}

Arguments and return values whose JSON is over :data:`FRAME_BYTES` travel as
*frames* first (see :func:`frame_texts`), so that no message is large and the
host can build the value a frame at a time without holding its event loop.

A call awaits a future that the comm's ``on_msg`` handler resolves, so the
program must await on the kernel's event loop (ipykernel >= 7.4 delivers comm
messages to a cell that is awaiting; a thread-blocking wait would deadlock).

Rich output (``display(obj)``, matplotlib figures) goes to the host as the kernel's
own ``display_data`` messages. Two things differ from a notebook cell: figures the
program left open are shown when it ends, *before* its ``done`` message (a cell's
``post_execute`` would show them only after the host has settled the run), and a
display too big for one message (over :data:`MAX_DISPLAY_BYTES`) is replaced by a
short note instead of being sent (the host would end the run for it).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import itertools
import json
import keyword
import linecache
import math
import sys
import threading
import traceback
import types
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypedDict

# The host imports these names from here (importing this module runs nothing else).
TARGET_NAME = "dsh_jupyter.tools"
MODULE_NAME = "_dsh_jupyter_inkernel"
SOURCE_FILENAME = "<dsh_jupyter.inkernel>"
PROGRAM_FILENAME = "<program>"
MIN_IPYKERNEL = (7, 4)
OUTPUT_CHUNK = 64 * 1024
MAX_DEPTH = 500
FRAME_BYTES = 64 * 1024  # ~3 ms to apply on the host, ~10 ms at worst
MAX_MESSAGE_TEXT = 128 * 1024
MAX_DISPLAY_BYTES = 2 * 1024 * 1024 - 64 * 1024  # below the host's message cap (2 MiB)
STRING_PIECE = FRAME_BYTES // 8  # characters: escaped, at most 6 bytes each

JsonValue = Any  # the kernel side checks values at run time (see json_problem)


class CallMessage(TypedDict):
    kind: Literal["call"]
    id: str
    name: str
    args: JsonValue


class DoneOkMessage(TypedDict):
    kind: Literal["done"]
    ok: Literal[True]
    value: JsonValue


class DoneErrorMessage(TypedDict):
    kind: Literal["done"]
    ok: Literal[False]
    error: Literal["exception", "invalid-output", "output-limit"]
    message: str


class ToolCallError(Exception):
    """A tool call failed on the host; ``tool_name`` and ``message`` say which and why."""

    __module__ = "builtins"  # tracebacks say ToolCallError, not this private module

    def __init__(self, tool_name: str, message: str) -> None:
        super().__init__(message)  # str(error) is the message
        self.add_note(f"tool: {tool_name}")  # an uncaught one's traceback names the tool
        self.tool_name = tool_name
        self.message = message


class _Pending:
    __slots__ = ("future", "loop", "name", "thread")

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.loop = loop
        self.thread = threading.get_ident()
        self.future: asyncio.Future[JsonValue] = loop.create_future()


class Bridge:
    """The kernel end of the tool calls: sends calls, resolves their futures from replies.

    Calls travel over the comm unless the host offered a local socket (``carrier``)
    and the kernel could connect to it; ``done`` always goes over the comm, so it
    arrives on iopub after the program's output."""

    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        self._comm_send = send
        self._send = send
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)
        self._carrier: asyncio.Task[None] | None = None

    async def call(self, name: str, args: JsonValue) -> JsonValue:
        problem = json_problem(args)
        text = None
        if problem is None:
            try:
                text = compact_json(args)
            except (ValueError, RecursionError) as error:
                problem = f"they cannot be encoded ({type(error).__name__}: {error})"
        if problem is not None or text is None:
            # Like every call the host refuses: the program catches ToolCallError.
            raise ToolCallError(
                name, f"arguments for tool {name!r} are not lossless JSON: {problem}")
        # What the program printed before this call reaches the host before the call
        # (cards show it in order; an abort while the call runs keeps it).
        flush_streams()
        call_id = str(next(self._ids))
        pending = _Pending(name, asyncio.get_running_loop())
        self._pending[call_id] = pending
        try:
            if len(text) > FRAME_BYTES:
                for frame in frame_texts(args):
                    self._send({"kind": "frame", "for": "call", "id": call_id, "text": frame})
                self._send({"kind": "call", "id": call_id, "name": name, "framed": True})
            else:
                message: CallMessage = {"kind": "call", "id": call_id, "name": name,
                                        "args": args}
                self._send(dict(message))
            return await pending.future
        finally:
            self._pending.pop(call_id, None)

    def on_msg(self, msg: Mapping[str, Any]) -> None:
        """The comm's ``on_msg`` handler."""
        content = msg.get("content") if isinstance(msg, Mapping) else None
        self.receive(content.get("data") if isinstance(content, Mapping) else None)

    def use_carrier(self, path: str, token: str) -> None:
        """Connect to the host's socket (named by the setup cell, and only there)."""
        if self._carrier is None:
            self._carrier = asyncio.ensure_future(self._connect(path, token))

    def receive(self, data: object) -> None:
        """A message from the host: anything that is not a reply we wait for is ignored."""
        if not isinstance(data, Mapping) or data.get("kind") != "result":
            return
        call_id = data.get("id")
        pending = self._pending.get(call_id) if isinstance(call_id, str) else None
        if pending is None:
            return
        if data.get("ok") is True:
            settle: Callable[[], None] = _resolver(pending.future, data.get("value"))
        else:
            text = data.get("message")
            error = ToolCallError(pending.name, text if isinstance(text, str) else "failed")
            settle = _rejecter(pending.future, error)
        if threading.get_ident() == pending.thread:
            settle()  # ipykernel >= 7.4 dispatches comm messages on the awaiting loop
        else:
            pending.loop.call_soon_threadsafe(settle)

    def done(self, message: DoneOkMessage | DoneErrorMessage, text: str | None = None) -> None:
        """Report the end of the run (over the comm, after the output); ``text`` is the
        value's compact JSON when it is large enough to go as frames."""
        if message.get("ok") is True and text is not None and len(text) > FRAME_BYTES:
            for frame in frame_texts(message.get("value")):
                self._comm_send({"kind": "frame", "for": "done", "text": frame})
            self._comm_send({"kind": "done", "ok": True, "framed": True})
            return
        self._comm_send(dict(message))

    async def _connect(self, path: str, token: str) -> None:
        """Switch calls to the host's unix socket: newline-delimited JSON, same shapes."""
        try:
            reader, writer = await asyncio.open_unix_connection(path, limit=1 << 30)
        except OSError:
            return  # stay on the comm
        writer.write(token.encode() + b"\n")

        def send_line(data: dict[str, Any]) -> None:
            if writer.is_closing():
                self._send = self._comm_send
                self._comm_send(data)
                return
            writer.write(json.dumps(data, allow_nan=False, separators=(",", ":")).encode() + b"\n")

        self._send = send_line
        try:
            while line := await reader.readline():
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                self.receive(data)
        finally:
            self._send = self._comm_send
            writer.close()


def _resolver(future: asyncio.Future[JsonValue], value: JsonValue) -> Callable[[], None]:
    def settle() -> None:
        if not future.done():
            future.set_result(value)

    return settle


def _rejecter(future: asyncio.Future[JsonValue], error: BaseException) -> Callable[[], None]:
    def settle() -> None:
        if not future.done():
            future.set_exception(error)

    return settle


class Tool:
    """One binding: ``await tool({...})`` with one dict, or ``await tool(key=value, ...)``.
    Any other call (``tool(1, 2)``, ``tool([1])``, a dict and keywords) calls nothing and
    raises ``TypeError`` showing how to call it: ``signature`` is the argument dict as the
    host describes it (``{"a": int}``), ``label`` how the program reaches the tool."""

    __slots__ = ("_bridge", "_describe", "_label", "_signature", "name")

    def __init__(self, bridge: Bridge, name: str, *, signature: str | None = None,
                 label: str | None = None, describe: bool = False) -> None:
        self._bridge = bridge
        self.name = name
        self._signature = signature
        self._label = label or f"tools[{_quoted(name)}]"
        self._describe = describe

    async def __call__(self, *args: JsonValue, **kwargs: JsonValue) -> JsonValue:
        if not args:
            return await self._bridge.call(self.name, kwargs)
        if len(args) == 1 and not kwargs and (args[0] is None or isinstance(args[0], dict)):
            return await self._bridge.call(self.name, {} if args[0] is None else args[0])
        if len(args) == 1 and not kwargs and self._signature is None and not self._describe:
            return await self._bridge.call(self.name, args[0])  # a plain binding: any JSON
        raise TypeError(self.usage())

    def usage(self) -> str:
        """One line: the tool takes one dict, and the dict it takes."""
        text = (f"{self._label} takes one dict of arguments: "
                f"await {self._label}({self._signature or '{...}'})")
        if self._describe and self._signature is None:
            text += f"; tools.describe({_quoted(self.name)}) shows its fields"
        return text

    def __repr__(self) -> str:
        return f"<tool {self.name!r}>"


def _quoted(text: str) -> str:
    """A string literal for ``text``, double-quoted where that needs no escapes (as the SDK
    writes names)."""
    literal = repr(text)
    return f'"{literal[1:-1]}"' if literal[0] == "'" and '"' not in text else literal


def _attribute_name(name: str) -> bool:
    """Whether the SDK writes ``name`` as ``tools.name`` (else ``tools["name"]``)."""
    return (name.isidentifier() and not keyword.iskeyword(name)
            and not keyword.issoftkeyword(name) and not name.startswith("_")
            and unicodedata.normalize("NFKC", name) == name)


HELPER_PARAMETERS: dict[str, tuple[str, ...]] = {
    "search": ("query", "limit"),
    "describe": ("name",),
}
"""The helpers this module knows, and their parameters in positional order."""


class Helper:
    """A helper method of ``tools`` (``tools.search("words", limit=5)``): its arguments,
    positional or by keyword, become the argument object of its binding."""

    __slots__ = ("_binding", "_bridge", "_parameters", "name")

    def __init__(self, bridge: Bridge, name: str, binding: str) -> None:
        self._bridge = bridge
        self._binding = binding
        self._parameters = HELPER_PARAMETERS[name]
        self.name = name

    async def __call__(self, *args: JsonValue, **kwargs: JsonValue) -> JsonValue:
        usage = f"tools.{self.name}({', '.join(self._parameters)})"
        if len(args) > len(self._parameters):
            raise TypeError(f"{usage} takes at most {len(self._parameters)} arguments")
        values: dict[str, JsonValue] = dict(zip(self._parameters, args, strict=False))
        for key, value in kwargs.items():
            if key not in self._parameters or key in values:
                raise TypeError(f"{usage}: unexpected or repeated argument {key!r}")
            values[key] = value
        return await self._bridge.call(self._binding, values)

    def __repr__(self) -> str:
        return f"<tools.{self.name}({', '.join(self._parameters)})>"


class Tools:
    """The ``tools`` namespace of one run: ``tools.name(...)`` or ``tools["any-name"](...)``,
    plus the run's helper methods (``tools.search``, ``tools.describe``) if any."""

    __slots__ = ("_helpers", "_tools")

    def __init__(self, bridge: Bridge, names: list[str],
                 helpers: Mapping[str, str] | None = None,
                 signatures: Mapping[str, str] | None = None) -> None:
        helpers = {name: binding for name, binding in (helpers or {}).items()
                   if name in HELPER_PARAMETERS}
        bindings = set(helpers.values())
        signatures = signatures or {}
        self._tools = {
            name: Tool(bridge, name, signature=signatures.get(name),
                       label=f"tools.{name}" if _attribute_name(name)
                       and name not in helpers else None, describe="describe" in helpers)
            for name in names if name not in bindings}
        self._helpers = {name: Helper(bridge, name, binding)
                         for name, binding in helpers.items()}

    def __getitem__(self, name: str) -> Tool:
        tool = self._tools.get(name)
        if tool is None:
            raise KeyError(self._unknown(name))
        return tool

    def __getattr__(self, name: str) -> Tool | Helper:
        if name.startswith("__"):
            raise AttributeError(name)
        helper = self._helpers.get(name)
        if helper is not None:
            return helper
        tool = self._tools.get(name)
        if tool is None:
            raise AttributeError(self._unknown(name))
        return tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __dir__(self) -> list[str]:
        return sorted({*self._tools, *self._helpers})

    def __repr__(self) -> str:
        return f"<tools: {', '.join(sorted(self._tools)) or 'none'}>"

    def _unknown(self, name: str) -> str:
        if "search" in self._helpers:  # a catalog too big to list: point at the search
            return (f"no tool named {name!r} in this run; tools.search('words') finds "
                    "tools, tools.describe(name) shows how to call one")
        known = ", ".join(repr(n) for n in sorted(self._tools)) or "none"
        return f"no tool named {name!r} in this run; known tools: {known}"


def json_problem(value: object) -> str | None:
    """Why ``value`` is not lossless JSON (naming the type and path), or ``None``. Values
    nested deeper than :data:`MAX_DEPTH` are refused too: JSON codecs recurse, and the
    host's would fail on them."""
    # Paths are linked (parent, key) pairs, rendered only for the problem found.
    stack: list[tuple[object, _Path]] = [(value, None)]
    active: set[int] = set()
    exits: list[int] = []
    while stack:
        item, path = stack.pop()
        if item is _EXIT:
            active.discard(exits.pop())
            continue
        if len(exits) >= MAX_DEPTH and (type(item) is dict or type(item) is list):
            return (f"it is nested more than {MAX_DEPTH} levels deep ({_where(path)}): "
                    "flatten it")
        cls = type(item)
        if item is None or cls is bool or cls is int or cls is str:
            continue
        if cls is float:
            number: float = item  # type: ignore[assignment]
            if math.isnan(number) or math.isinf(number):
                return f"{_where(path)} is {number!r}, which is not JSON"
            if number == 0.0 and math.copysign(1.0, number) < 0:
                return f"{_where(path)} is -0.0, which does not survive JSON"
            continue
        if cls is list and _plain_list(item):  # type: ignore[arg-type]
            continue  # a column of plain scalars: checked in C, nothing to walk
        if cls is dict or cls is list:
            if id(item) in active:
                return f"{_where(path)} is part of a reference cycle"
            active.add(id(item))
            exits.append(id(item))
            stack.append((_EXIT, path))
            if cls is dict:
                for key, child in reversed(list(item.items())):  # type: ignore[attr-defined]
                    if type(key) is not str:
                        return (f"{_where(path)} has a key of type {type(key).__name__}:"
                                " keys must be str")
                    stack.append((child, (path, key)))
            else:
                children: list[object] = item  # type: ignore[assignment]
                for index in reversed(range(len(children))):
                    stack.append((children[index], (path, index)))
            continue
        if cls is tuple:
            return f"{_where(path)} is a tuple, which is not a JSON array: use a list"
        return f"{_where(path)} is of type {cls.__name__}, which is not JSON"
    return None


_Path = tuple[Any, "str | int"] | None
_PLAIN = frozenset((str, int, bool, type(None)))


def _plain_list(items: list[object]) -> bool:
    """Whether ``items`` holds only plain scalars and JSON-safe floats (types checked in C;
    a list that is not skips nothing: the walk then names the problem)."""
    if len(items) < 64:
        return False
    kinds = set(map(type, items))
    if kinds <= _PLAIN:
        return True
    return kinds <= _PLAIN | {float} and all(
        math.isfinite(x) and (x or math.copysign(1.0, x) > 0)
        for x in items if type(x) is float)


def _where(path: _Path) -> str:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    if not keys:
        return "the value"
    text = ""
    for key in reversed(keys):
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return f"at {text}"


_EXIT = object()


def compile_program(source: str, *, keep: bool = False) -> types.CodeType:
    """Compile ``source`` as the body of an async function, keeping its line numbers.

    With ``keep`` (a stateful session), every name the body binds at its own level
    (assignments, imports, ``def``, ``class``, ``for`` and ``with`` targets, ``except``
    names, walrus) is declared ``global``: the function's globals are the session's
    namespace, so those names outlive the run and ``return`` still works. Annotations on
    such names are dropped (Python refuses an annotated global)."""
    tree = ast.parse(source, PROGRAM_FILENAME, "exec")
    body: list[ast.stmt] = tree.body or [ast.Pass(lineno=1, col_offset=0)]
    if keep:
        body = [_TopLevelAnnotations().visit(statement) for statement in body]
        names = _TopLevelNames.of(body)
        if names:
            body = [ast.Global(names=names, lineno=1, col_offset=0), *body]
    function = ast.AsyncFunctionDef(
        name="<module>",
        args=ast.arguments(
            posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
            defaults=[],
        ),
        body=body,
        decorator_list=[],
        returns=None,
        lineno=1,
        col_offset=0,
    )
    module = ast.Module(body=[function], type_ignores=[])
    ast.fix_missing_locations(module)
    code = compile(module, PROGRAM_FILENAME, "exec", dont_inherit=True)
    linecache.cache[PROGRAM_FILENAME] = (
        len(source), None, source.splitlines(keepends=True), PROGRAM_FILENAME,
    )
    return code


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class _TopLevelNames(ast.NodeVisitor):
    """The names a function body binds in its own scope (not in nested functions, classes,
    lambdas or comprehensions, whose names are their own; a walrus in a comprehension
    binds in the body, so it counts)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    @classmethod
    def of(cls, body: list[ast.stmt]) -> list[str]:
        finder = cls()
        for statement in body:
            finder.visit(statement)
        return sorted(finder.names)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            self.names.add(node.id)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.names.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self.names.add(alias.asname or alias.name)

    def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.names.add(node.name)
        for expression in node.decorator_list:  # evaluated in the body's scope
            self.visit(expression)
        if isinstance(node, ast.ClassDef):
            for part in (*node.bases, *node.keywords):
                self.visit(part)
        else:
            self._defaults(node.args)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _definition

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._defaults(node.args)

    def _defaults(self, args: ast.arguments) -> None:
        for expression in (*args.defaults, *args.kw_defaults):
            if expression is not None:
                self.visit(expression)

    def _comprehension(self, node: ast.expr) -> None:
        for child in ast.walk(node):
            if isinstance(child, ast.NamedExpr) and isinstance(child.target, ast.Name):
                self.names.add(child.target.id)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.names.add(node.name)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self.names.add(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self.names.add(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self.names.add(node.rest)
        self.generic_visit(node)


class _TopLevelAnnotations(ast.NodeTransformer):
    """``x: T = v`` becomes ``x = v`` (and ``x: T`` nothing) in the body's own scope:
    an annotated name cannot be declared global."""

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt:
        if not isinstance(node.target, ast.Name):
            return node
        if node.value is None:
            return ast.copy_location(ast.Pass(), node)
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)

    def _leave(self, node: ast.AST) -> ast.AST:
        return node  # a nested scope keeps its annotations

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _leave


def format_exception(error: BaseException) -> str:
    """The traceback of ``error`` without this module's frames (the program's own remain)."""
    summary = traceback.TracebackException.from_exception(error)
    seen: set[int] = set()
    queue: list[traceback.TracebackException] = [summary]
    while queue:
        current = queue.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        # A syntax error of the program was raised by the compiler, not by its code: the
        # frames are the compiler's (a host path of ast.py), never the program's own.
        current.stack = traceback.StackSummary.from_list(
            [] if current.exc_type is not None and issubclass(current.exc_type, SyntaxError)
            and current.filename == PROGRAM_FILENAME
            else [frame for frame in current.stack if frame.filename != SOURCE_FILENAME]
        )
        queue.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return "".join(summary.format()).rstrip("\n")


def flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        flush = getattr(stream, "flush", None)
        if flush is not None:
            with contextlib.suppress(Exception):
                flush()


def patch_flush(stream: Any) -> None:
    """Make ``stream.flush()`` return at once when nothing is buffered: ipykernel flushes
    both streams after *every* shell message (comm replies included), and each flush
    of an ``OutStream`` is a round trip to the IOPub thread."""
    flush: Callable[[], Any] | None = getattr(stream, "flush", None)
    if flush is None or getattr(flush, "_dsh_quick", False):
        return

    def quick_flush() -> Any:
        if _has_pending_output(stream):
            return flush()
        return None

    quick_flush._dsh_quick = True  # type: ignore[attr-defined]
    with contextlib.suppress(AttributeError, TypeError):
        stream.flush = quick_flush


def patch_write(stream: Any) -> None:
    """Split big writes and flush every :data:`OUTPUT_CHUNK` characters, so no stream
    message grows huge (the host caps message size and counts output line by line).
    Installed per run: IPython wraps and restores ``write`` around every cell."""
    write: Callable[[str], Any] | None = getattr(stream, "write", None)
    if write is None:
        return
    pending = [0]

    def chunked_write(text: str) -> Any:
        if not isinstance(text, str) or len(text) + pending[0] < OUTPUT_CHUNK:
            pending[0] += len(text) if isinstance(text, str) else 0
            return write(text)
        for start in range(0, len(text), OUTPUT_CHUNK):
            piece = text[start:start + OUTPUT_CHUNK]
            write(piece)
            pending[0] += len(piece)
            if pending[0] >= OUTPUT_CHUNK:
                pending[0] = 0
                stream.flush()
        return len(text)

    with contextlib.suppress(AttributeError, TypeError):
        stream.write = chunked_write


class Runtime:
    """Per-kernel state: the comm, its bridge, and :meth:`run` for the one program (in a
    stateful session, for each program in turn).

    ``output`` (the host's in-process test runtime only) is a ``(stdout, stderr)`` pair
    the program's ``print`` writes to instead of the kernel's streams."""

    def __init__(self, send: Callable[[dict[str, Any]], None],
                 output: tuple[Any, Any] | None = None) -> None:
        self.bridge = Bridge(send)
        self._output = output
        self._kept: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self._guarded = False

    async def run(self, names: list[str], source: str, max_output_bytes: int,
                  helpers: Mapping[str, str] | None = None, *, keep: bool = False,
                  signatures: Mapping[str, str] | None = None) -> None:
        """Run ``source`` with ``tools`` for ``names`` (and ``helpers``, ``{method:
        binding}``); always ends with one ``done`` message. With ``keep`` (a stateful
        session: this kernel serves several runs) the program's top-level names live in
        one namespace shared by every ``keep`` run (see :func:`compile_program`); each run
        still gets its own ``tools``. ``signatures`` (``{binding: argument dict}``) say how
        to call a tool to a program that called it wrongly."""
        tools = Tools(self.bridge, names, helpers, signatures)
        if self._output is None:
            patch_write(sys.stdout)
            patch_write(sys.stderr)
            if not self._guarded:
                self._guarded = True
                guard_display_size()
        try:
            code = compile_program(source, keep=keep)
            namespace: dict[str, Any] = self._kept if keep else {
                "__name__": "__main__", "__builtins__": builtins}
            namespace.update(tools=tools, ToolCallError=ToolCallError, asyncio=asyncio)
            if self._output is not None:
                namespace["print"] = self._print
            exec(code, namespace)
            program = namespace.pop("<module>")
            value = await program()
        except BaseException as error:  # the program's failure is data, whatever it is
            self._finish({
                "kind": "done", "ok": False, "error": "exception",
                "message": clip(format_exception(error)),
            })
            return
        problem = json_problem(value)
        text = ""
        if problem is None:
            try:
                text = compact_json(value)
            except (ValueError, RecursionError, MemoryError) as error:
                problem = f"it cannot be encoded ({type(error).__name__}: {error})"
        size = len(text.encode("utf-8", "surrogatepass"))
        if problem is not None:
            self._finish({
                "kind": "done", "ok": False, "error": "invalid-output",
                "message": f"the program's return value is not lossless JSON: {problem}",
            })
            return
        if size > max_output_bytes:
            self._finish({
                "kind": "done", "ok": False, "error": "output-limit",
                "message": f"the return value is {size} bytes of JSON, over the {max_output_bytes}"
                " byte output limit",
            })
            return
        self._finish({"kind": "done", "ok": True, "value": value}, text)

    def _print(self, *values: object, file: Any = None, **options: Any) -> None:
        assert self._output is not None
        builtins.print(*values, file=self._output[0] if file is None else file, **options)

    def _finish(self, message: DoneOkMessage | DoneErrorMessage, text: str | None = None) -> None:
        if self._output is None:
            show_open_figures()
        # Flush first: stream messages then precede "done" on iopub.
        for stream in (sys.stdout, sys.stderr, *(self._output or ())):
            with contextlib.suppress(Exception):
                stream.flush()
        self.bridge.done(message, text)


def show_open_figures() -> None:
    """Show the matplotlib figures the program left open, as a notebook does after a
    cell (matplotlib's inline backend, when the program used it; nothing else is
    imported). A figure that fails to draw becomes one line on stderr."""
    backend = sys.modules.get("matplotlib_inline.backend_inline")
    flush = getattr(backend, "flush_figures", None)
    if flush is None:
        return
    try:
        flush()
    except Exception as error:
        print(f"(the program's open matplotlib figures could not be shown: "
              f"{type(error).__name__}: {error})", file=sys.stderr)


def guard_display_size() -> None:
    """Replace each display whose content is over :data:`MAX_DISPLAY_BYTES` by a short
    ``text/plain`` note before it is sent (an ipykernel display hook, on this thread:
    the program's). Installed once per kernel: a stateful session's serves several runs."""
    try:
        publisher = sys.modules["IPython"].get_ipython().display_pub
        register: Callable[[Callable[[Any], Any]], None] = publisher.register_hook
    except Exception:
        return  # not ipykernel: nothing to guard

    def hook(message: Any) -> Any:
        try:
            content = message["content"]
            size = len(json.dumps(content, separators=(",", ":")))  # ASCII: bytes >= UTF-8's
        except Exception:
            return message
        if size > MAX_DISPLAY_BYTES:
            content["data"] = {"text/plain": f"[a display of {size} bytes was not sent: over "
                               f"the {MAX_DISPLAY_BYTES} byte limit of one message]"}
            content["metadata"] = {}
        return message

    register(hook)


def compact_json(value: JsonValue) -> str:
    """The compact JSON the host counts (non-ASCII kept, no spaces)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def clip(text: str) -> str:
    """A failure message short enough for one message (the host caps message size)."""
    if len(text) <= MAX_MESSAGE_TEXT:
        return text
    return text[:MAX_MESSAGE_TEXT] + f"… ({len(text) - MAX_MESSAGE_TEXT} more characters)"


def frame_texts(value: JsonValue) -> list[str]:
    """``value`` as frames: JSON arrays of operations, each about :data:`FRAME_BYTES` at
    most, that the host applies in order to rebuild it::

        ["v", X]     a complete value        ["a"] / ["o"]  open an array / object
        ["e", [..]]  more array elements     ["m", {..}]    more object members
        ["k", K]     the next member's key   ["c"]          close the open container
        ["s", S]     a piece of a long string, ended by ["t"] (a value) or ["K"] (a key)

    Containers too big for one frame are opened, filled with slices that fit (their
    size found by halving), and closed; serialising a slice is C work, so a flat list of
    millions of numbers costs little more than one ``json.dumps``."""
    frames: list[str] = []
    ops: list[str] = []
    used = 0

    def put(op: str) -> None:
        nonlocal used
        if ops and used + len(op) + 1 > FRAME_BYTES:
            frames.append("[" + ",".join(ops) + "]")
            ops.clear()
            used = 0
        ops.append(op)
        used += len(op) + 1

    def put_string(text: str, end: str) -> None:
        for start in range(0, len(text), STRING_PIECE):
            put('["s",' + compact_json(text[start:start + STRING_PIECE]) + "]")
        put(end)

    # A task: ("v", value) | ("op", text) | ("e", list, start, size) | ("m", items, start, size)
    tasks: list[tuple[Any, ...]] = [("v", value)]
    while tasks:
        task = tasks.pop()
        kind = task[0]
        if kind == "op":
            put(task[1])
        elif kind == "v":
            item = task[1]
            text = compact_json(item)
            if len(text) <= FRAME_BYTES:
                put('["v",' + text + "]")
            elif type(item) is str:
                put_string(item, '["t"]')
            elif type(item) is list:
                put('["a"]')
                tasks += [("op", '["c"]'), ("e", item, 0, 1024)]
            else:
                put('["o"]')
                tasks += [("op", '["c"]'), ("m", list(item.items()), 0, 1024)]
        else:
            _, items, start, size = task
            if start >= len(items):
                continue
            chunk = items[start:start + size]
            text = compact_json(chunk if kind == "e" else dict(chunk))
            if len(text) <= FRAME_BYTES:
                put(f'["{kind}",' + text + "]")
                grown = size * 2 if len(text) < FRAME_BYTES // 2 else size
                tasks.append((kind, items, start + len(chunk), grown))
            elif size > 1:
                tasks.append((kind, items, start, size // 2))
            elif kind == "e":  # one element too big: build it in place, then go on
                tasks += [(kind, items, start + 1, 1), ("v", items[start])]
            else:
                key, member = items[start]
                tasks += [(kind, items, start + 1, 1), ("v", member)]
                key_text = compact_json(key)
                if len(key_text) <= FRAME_BYTES:
                    tasks.append(("op", '["k",' + key_text + "]"))
                else:
                    put_string(key, '["K"]')
    if ops:
        frames.append("[" + ",".join(ops) + "]")
    return frames


def _has_pending_output(stream: Any) -> bool:
    """Whether an ipykernel ``OutStream`` holds unsent text (any other stream: assume so).
    A flush costs a round trip to the IOPub thread, so skip it when there is nothing."""
    buffers = getattr(stream, "_buffers", None)
    if not isinstance(buffers, Mapping):
        return True
    try:
        return any(buffer.tell() for buffer in list(buffers.values()))
    except Exception:
        return True


def ipykernel_problem(version: str | None, where: str = "") -> str | None:
    """Why ipykernel ``version`` (``None``: not installed) cannot run programs, or ``None``
    when it can. ``where`` says whose ipykernel it is (``" in the kernel"``). The host
    checks its own with this function too."""
    minimum = ".".join(map(str, MIN_IPYKERNEL))
    if version is None:
        return f"needs ipykernel >= {minimum}{where}: it is not installed"
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts >= MIN_IPYKERNEL:
        return None
    return (f"needs ipykernel >= {minimum}{where} (found {version}): older versions do not "
            "deliver comm replies to a cell that awaits them")


def check_ipykernel() -> None:
    """Fail clearly on an ipykernel that cannot deliver comm replies to an awaiting cell."""
    module = sys.modules.get("ipykernel")
    version = getattr(module, "__version__", None) if module is not None else None
    if not isinstance(version, str):
        return  # not ipykernel: the kernel is trusted to deliver comm messages mid-cell
    problem = ipykernel_problem(version, " in the kernel")
    if problem is not None:
        raise RuntimeError(problem)


def unlimit_iopub() -> None:
    """Make iopub queue instead of drop. At zmq's default high-water mark (1,000 messages)
    the kernel's PUB socket silently drops what a busy host has not taken yet, tool calls
    included, and a program then waits for a reply until its wall budget. ipykernel's
    IOPub thread owns the socket, so the option is set there (libzmq applies it to the
    host's existing connection too)."""
    try:
        import zmq

        kernel = sys.modules["IPython"].get_ipython().kernel
        thread, socket = kernel.iopub_thread, kernel.iopub_thread.socket
        setsockopt: Callable[[int, int], None] = socket.setsockopt
    except Exception:
        return  # not ipykernel: nothing to do
    thread.schedule(lambda: setsockopt(zmq.SNDHWM, 0))


def start(carrier: tuple[str, str] | None = None) -> Runtime:
    """Open the comm to the host (its ``comm_open`` tells the host which comm to trust)
    and, when the setup cell names one, connect to the host's socket carrier."""
    check_ipykernel()
    from comm import create_comm

    patch_flush(sys.stdout)
    patch_flush(sys.stderr)
    unlimit_iopub()
    comm = create_comm(target_name=TARGET_NAME, data={"kind": "hello", "protocol": 1})
    runtime = Runtime(lambda data: comm.send(data))
    comm.on_msg(runtime.bridge.on_msg)
    if carrier is not None:
        runtime.bridge.use_carrier(*carrier)
    return runtime
