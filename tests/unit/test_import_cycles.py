"""No import cycle inside a package, found by walking its modules' import statements.

What counts as an edge from module A to module B of the same package:

- every ``import`` and ``from ... import`` in A that names B, with relative imports
  resolved against A's package;
- at module level *and* inside functions, methods and classes: an import in a function
  still runs, only later, and a cycle it closes fails then;
- ``from . import b`` is an edge to the submodule ``b`` when there is one, else to the
  package's ``__init__``.

What does not count:

- imports under ``if TYPE_CHECKING:`` (the ``else:`` branch does count): they never run,
  they only feed the type checker;
- the implicit import of a package's ``__init__`` that importing any of its submodules
  performs (counted, it would make every package whose ``__init__`` re-exports one cycle).

Each package is checked with its own rule: ``dsh_jupyter.kernel`` and
``dsh_jupyter.codemode`` count the ``TYPE_CHECKING`` imports too (moving an import there
is how a cycle gets hidden: both modules still need each other, and mypy follows both
edges); ``dsh_jupyter.registry`` counts what runs (its modules still meet at type level:
``definition``, ``execution`` and ``scope`` name each other's types).

Between the two: Code Mode imports the registry's modules, and the registry core imports
nothing of Code Mode, not even for type checking; it knows Code Mode only through its
seams (the lifecycle listener and ``assembly.CodePresentation``). Only the package facade
(``dsh_jupyter.registry``, which exports ``ToolRegistry``) and the re-export shims of the
modules that moved import from ``dsh_jupyter.codemode``, and Code Mode never imports the
facade (importing it from inside would need the half-made facade).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [("dsh_jupyter.kernel", True), ("dsh_jupyter.registry", False),
            ("dsh_jupyter.codemode", True)]


def modules_of(package: str, root: Path = ROOT) -> dict[str, Path]:
    """Every module of ``package`` (subpackages included), by dotted name."""
    base = root.joinpath(*package.split("."))
    found: dict[str, Path] = {}
    for path in sorted(base.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST, typing_too: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that can run: everything but the body of ``if TYPE_CHECKING:``
    (included when ``typing_too``)."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test) and not typing_too:
        for statement in node.orelse:
            yield from _imports(statement, typing_too)
        return
    for child in ast.iter_child_nodes(node):
        yield from _imports(child, typing_too)


def edges_of(name: str, path: Path, known: set[str], *, typing_too: bool = False) -> set[str]:
    """The modules of ``known`` that module ``name`` imports at run time (and for type
    checking, when ``typing_too``)."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in _imports(tree, typing_too):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    targets.add(alias.name)
            continue
        if node.level:
            parts = name.split(".") if is_package else name.split(".")[:-1]
            parts = parts[:len(parts) - (node.level - 1)]
            base = ".".join([*parts, node.module] if node.module else parts)
        else:
            base = node.module or ""
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in known:
                targets.add(submodule)
            elif base in known:
                targets.add(base)
    targets.discard(name)
    return targets


def import_graph(package: str, root: Path = ROOT, *,
                 typing_too: bool = False) -> dict[str, set[str]]:
    modules = modules_of(package, root)
    known = set(modules)
    return {name: edges_of(name, path, known, typing_too=typing_too)
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe(graph: dict[str, set[str]], component: list[str]) -> str:
    members = set(component)
    return "\n".join(f"  {a} -> {b}" for a in component for b in sorted(graph[a] & members))


@pytest.mark.parametrize(("package", "typing_too"), PACKAGES)
def test_no_import_cycle_inside_the_package(package: str, typing_too: bool) -> None:
    graph = import_graph(package, typing_too=typing_too)
    assert len(graph) > 1, f"found no modules of {package}"
    assert sum(map(len, graph.values())) > 0, f"found no imports inside {package}"
    found = cycles(graph)
    assert found == [], "import cycles (edges inside each):\n" + "\n\n".join(
        describe(graph, component) for component in found)


SEAM_MODULES = ["pipeline", "lifecycle", "session_events", "tracing", "assembly", "scope"]


@pytest.mark.parametrize("module", SEAM_MODULES)
def test_the_registry_is_seen_through_its_protocols(module: str) -> None:
    # Not even for type checking: these modules know the registry only as the
    # Protocols of registry/_view.py.
    graph = import_graph("dsh_jupyter.registry", typing_too=True)
    assert "dsh_jupyter.registry.core" not in graph[f"dsh_jupyter.registry.{module}"]


SHIMS = {"dsh_jupyter.registry", "dsh_jupyter.registry.registry",
         "dsh_jupyter.registry.code_mode", "dsh_jupyter.registry.bridge",
         "dsh_jupyter.registry.run_files", "dsh_jupyter.registry.sdk_python",
         "dsh_jupyter.registry.discovery", "dsh_jupyter.registry.prompt"}
"""The facade and the old paths of the modules that moved to ``dsh_jupyter.codemode``."""


def test_the_registry_core_imports_nothing_of_code_mode() -> None:
    registry, codemode = modules_of("dsh_jupyter.registry"), modules_of("dsh_jupyter.codemode")
    known = set(registry) | set(codemode)
    assert set(registry) >= SHIMS
    arrows = {name: sorted(edge for edge in edges_of(name, path, known, typing_too=True)
                           if edge in codemode)
              for name, path in registry.items() if name not in SHIMS}
    assert {name: edges for name, edges in arrows.items() if edges} == {}
    # The check sees such an arrow: the shims have one each.
    for shim in SHIMS:
        assert set(edges_of(shim, registry[shim], known)) & set(codemode), shim


def test_code_mode_never_imports_the_registry_facade_or_class() -> None:
    registry, codemode = modules_of("dsh_jupyter.registry"), modules_of("dsh_jupyter.codemode")
    known = set(registry) | set(codemode)
    for name, path in codemode.items():
        edges = edges_of(name, path, known, typing_too=True)
        assert "dsh_jupyter.registry" not in edges, name
        if name != "dsh_jupyter.codemode.registry":  # the one that plugs Code Mode in
            assert "dsh_jupyter.registry.core" not in edges, name


@pytest.mark.parametrize("package", ["dsh_jupyter.registry", "dsh_jupyter.codemode"])
def test_no_module_is_over_600_lines(package: str) -> None:
    long = {name: lines for name, path in modules_of(package).items()
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 600}
    assert long == {}


def test_the_walk_counts_what_runs_and_skips_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from .a import A\n",
        "a.py": ("from typing import TYPE_CHECKING\n"
                 "if TYPE_CHECKING:\n    from .b import B\nelse:\n    from . import c\n"
                 "class A:\n    def f(self):\n        from .sub.d import D\n"),
        "b.py": "from .a import A\n",
        "c.py": "import pkg.b\n",
        "sub/__init__.py": "",
        "sub/d.py": "from .. import a\nfrom ..a import A\nfrom .. import A as again\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph("pkg", tmp_path)
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.c", "pkg.sub.d"},  # not pkg.b: only under TYPE_CHECKING
        "pkg.b": {"pkg.a"},
        "pkg.c": {"pkg.b"},
        "pkg.sub": set(),
        "pkg.sub.d": {"pkg.a", "pkg"},
    }
    assert import_graph("pkg", tmp_path, typing_too=True)["pkg.a"] == {
        "pkg.b", "pkg.c", "pkg.sub.d"}
    assert cycles(graph) == [["pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.sub.d"]]
