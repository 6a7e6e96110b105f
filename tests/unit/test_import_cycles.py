"""No import cycle inside a package, found by walking its modules' import statements.

What counts as an edge from module A to module B of the same package:

- every ``import`` and ``from ... import`` in A that names B, with relative imports
  resolved against A's package;
- at module level *and* inside functions, methods and classes: an import in a function
  still runs, only later, and a cycle it closes fails then;
- ``from . import b`` is an edge to the submodule ``b`` when there is one, else to the
  package's ``__init__``.

What does not count:

- imports under ``if TYPE_CHECKING:`` (the ``else:`` branch does count), unless the walk
  is told ``typing_too``: they never run, they only feed the type checker;
- the implicit import of a package's ``__init__`` that importing any of its submodules
  performs (counted, it would make every package whose ``__init__`` re-exports one cycle).

Every package checked here is told ``typing_too`` (its flag in ``PACKAGES``), subpackages
included (``dsh_jupyter.kernel`` is mostly its seams: ``confine``, ``inkernel``, ``launch``,
``run``, ``transport``): ``dsh_jupyter.kernel``, ``dsh_jupyter.registry`` and
``dsh_jupyter.codemode`` count the ``TYPE_CHECKING`` imports too. Moving an import there is
how a cycle gets hidden: both modules still need each other, and mypy follows both edges.
In the registry, a call's view (``execution``) sits below the definitions and scopes that
take it, so it names them by what a call reads of them (``execution.ScopeView``,
``execution.DefinitionView``), and the layers' view of the registry (``scope.LayerOwner``)
lives with the layers.

Between the registry and Code Mode: Code Mode imports the registry's modules, and the
registry core imports nothing of Code Mode, not even for type checking; it knows Code
Mode only through its seams (the lifecycle listener and ``assembly.CodePresentation``).
Only the package facade (``dsh_jupyter.registry``, which exports ``ToolRegistry``) and
the re-export shims of the modules that moved import from ``dsh_jupyter.codemode``, and
Code Mode never imports the facade (importing it from inside would need the half-made
facade).

No module of ``dsh_jupyter`` imports its test helpers (``dsh_jupyter.testing``), and only
the entry points import the command line.

Budgets: no module of ``dsh_jupyter`` is over 600 lines, and ``dsh_jupyter.kernel`` keeps
at most 15 modules and subpackages at its top level. The code that runs where the package
may not be importable (in the kernel, in the keeper and the fork server, loaded by path)
imports nothing of it beyond its own package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [("dsh_jupyter.kernel", True), ("dsh_jupyter.registry", True),
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


def test_no_module_is_over_600_lines() -> None:
    long = {name: lines for name, path in modules_of("dsh_jupyter").items()
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 600}
    assert long == {}


KERNEL_SEAMS = {"confine", "inkernel", "launch", "run", "transport"}


def test_the_kernel_package_is_its_seams_and_a_few_modules() -> None:
    # At most 15 modules and subpackages at its top level: the rest lives in the
    # subpackage of its seam, and the cycle walk above goes through all of them.
    top = ROOT / "dsh_jupyter" / "kernel"
    entries = sorted(path.name for path in top.iterdir()
                     if path.suffix == ".py" or (path / "__init__.py").is_file())
    assert len(entries) <= 15, entries
    assert set(entries) >= KERNEL_SEAMS
    graph = import_graph("dsh_jupyter.kernel", typing_too=True)
    for seam in KERNEL_SEAMS:
        inside = [name for name in graph if name.startswith(f"dsh_jupyter.kernel.{seam}.")]
        assert inside and any(graph[name] for name in inside), seam


LOADED_BY_PATH = {
    "dsh_jupyter.kernel.inkernel": "the in-kernel package (the setup cell, the fork server)",
    "dsh_jupyter.kernel.confine._confine": "the confiner (the keeper, the fork server)",
    "dsh_jupyter.kernel.launch._child": "the child setup (the keeper, the fork server)",
    "dsh_jupyter.kernel.launch._keeper": "the keeper (run from its source)",
    "dsh_jupyter.kernel.launch._forkserver": "the fork server (run by path)",
    "dsh_jupyter.kernel.launch._kernelapp": "the kernel application the fork server prepares",
    "dsh_jupyter.kernel.launch.proctree": "loaded by path by the fork server",
    "dsh_jupyter.kernel.run.removal": "loaded by path by the fork server",
}
"""Code that runs where dsh-jupyter may not be importable, and so imports nothing of it
beyond its own package."""


@pytest.mark.parametrize("unit", sorted(LOADED_BY_PATH))
def test_code_loaded_by_path_imports_nothing_of_the_package(unit: str) -> None:
    modules = modules_of("dsh_jupyter")
    own = {name for name in modules if name == unit or name.startswith(unit + ".")}
    assert own, unit
    outside = {name: sorted(edges_of(name, modules[name], set(modules), typing_too=True)
                            - own)
               for name in own}
    assert {name: edges for name, edges in outside.items() if edges} == {}
    for name in own:
        tree = ast.parse(modules[name].read_text(encoding="utf-8"))
        absolute = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    and not node.level and (node.module or "").startswith("dsh_jupyter")]
        assert absolute == [], name


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


def test_only_the_entry_points_import_the_command_line() -> None:
    # The CLI sits on top: it imports the package, the package never imports it (what an
    # exported notebook and the CLI share, resolving MODULE:ATTR, is dsh_jupyter.loading).
    modules = modules_of("dsh_jupyter")
    known = set(modules)
    importers = {name for name, path in modules.items()
                 if "dsh_jupyter.cli" in edges_of(name, path, known, typing_too=True)}
    assert importers <= {"dsh_jupyter.__main__"}


def test_no_module_of_the_package_imports_the_test_helpers() -> None:
    # dsh_jupyter.testing is for tests: InProcessRuntime, which the evaluation runs too,
    # lives in dsh_jupyter.kernel and testing only re-exports it.
    modules = modules_of("dsh_jupyter")
    known = set(modules)
    importers = {name for name, path in modules.items()
                 if "dsh_jupyter.testing" in edges_of(name, path, known, typing_too=True)}
    assert importers == set()
