"""No import cycle among the modules of a package, found by reading their imports with ``ast``.

What counts as an import of module A by module B: every ``import`` and ``from ... import``
statement in B's source, wherever it stands: at module level, under ``if TYPE_CHECKING:``
and inside functions. The last two are counted on purpose: moving an import into a
function or under ``TYPE_CHECKING`` is how a cycle gets hidden, not removed (the two
modules still need each other, and mypy still follows both edges). A package that needs a
deferred import for an optional dependency (``runtime`` importing ``gateway``) has no
cycle through it, so nothing is lost by counting it.

Relative imports are resolved against the importing module's package; ``from . import
name`` is an import of the submodule ``name`` when there is one, else of the package's
``__init__`` (a module like the others). Imports of modules outside the package are not
followed: the test is about one package at a time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = [
    "dsh_jupyter.kernel",
    # "dsh_jupyter.registry": nine of its modules form one cycle today (issue 16, "The
    # registry's private surface"); add it here once that is untangled.
]

Graph = dict[str, set[str]]


def modules_of(package: str, root: Path = ROOT) -> dict[str, Path]:
    """Every module of ``package`` (its subpackages included) by dotted name."""
    directory = root.joinpath(*package.split("."))
    modules: dict[str, Path] = {}
    for path in sorted(directory.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules among ``modules`` that the module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in modules and target != name)
    return found


def import_graph(package: str, root: Path = ROOT) -> Graph:
    modules = modules_of(package, root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: Graph) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or ``None`` when there is none."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        while stack:
            following = next(stack[-1], None)
            if following is None:
                stack.pop()
                done.add(path.pop())
            elif following in path:
                return [*path[path.index(following):], following]
            elif following not in done:
                path.append(following)
                stack.append(iter(sorted(graph[following])))
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside(package: str) -> None:
    graph = import_graph(package)
    assert len(graph) > 1, f"no modules found for {package}"
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle in {package}: {' -> '.join(cycle or [])}"


def test_the_walk_sees_deferred_and_type_only_imports(tmp_path: Path) -> None:
    """A cycle closed by an import inside a function or under TYPE_CHECKING is found,
    and ``from . import name`` of a submodule is not an import of the package."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .a import A\n")
    (package / "a.py").write_text("from . import b\nA = 1\n")
    (package / "b.py").write_text("def f():\n    from .sub.c import C\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import A\nC = 1\n")
    graph = import_graph("pkg", tmp_path)
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.a"] == {"pkg.b"}  # not the package itself
    assert graph["pkg.sub.c"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]
    (package / "b.py").write_text("")
    assert find_cycle(import_graph("pkg", tmp_path)) is None
