"""The program: compiled as the body of an async function (top-level ``await`` and
``return`` work, line numbers are the program's own), and its exceptions formatted
without the frames of this package.

Every module of the package is compiled under the file name :data:`SOURCE_FILENAME`
(``_loader``), so a traceback leaves out exactly the frames that are not the program's.
"""

from __future__ import annotations

import ast
import linecache
import traceback
import types

SOURCE_FILENAME = "<dsh_jupyter.inkernel>"
PROGRAM_FILENAME = "<program>"


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
