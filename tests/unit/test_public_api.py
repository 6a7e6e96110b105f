"""The public surface: a small sorted top level, the rest in subpackages, nothing at import.

The top level holds what the quickstart, the tutorials and the how-tos import, plus the
types of the values those give back; every other public name lives in its subpackage
(docs/api.md, "Where names live"), and a name that moved still resolves from the top
level with a ``DeprecationWarning`` naming its new home.
"""

from __future__ import annotations

import ast
import importlib
import re
import warnings
from pathlib import Path

import nbformat
import pytest

import dsh_jupyter

ROOT = Path(__file__).resolve().parents[2]

# Not imported by any page, but what the imported names hand back: registry.scope(),
# AbortController().signal, what every hook receives, what registry.execute returns,
# and the base of every error.
RETURNED_TYPES = {"AbortSignal", "AgentScope", "DshError", "ToolExecution", "ToolResult",
                  "ToolSuccess"}


def test_all_is_sorted_and_complete() -> None:
    assert dsh_jupyter.__all__ == sorted(dsh_jupyter.__all__)
    for name in dsh_jupyter.__all__:
        assert hasattr(dsh_jupyter, name), name


def test_spec_names_exist() -> None:
    expected = {"ToolRegistry", "define_tool", "ToolCall", "AbortController", "Allow", "Deny",
                "Ask", "Accept", "Block", "AgentScope", "ToolResult", "DshError"}
    assert expected <= set(dsh_jupyter.__all__)


def _code_blocks() -> list[tuple[str, str]]:
    """Python source of the README, every docs page and every tutorial, by file."""
    found: list[tuple[str, str]] = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for block in re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M):
            found.append((str(page.relative_to(ROOT)), block))
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(notebook, as_version=4).cells:
            if cell.cell_type == "code":
                source = "\n".join(line for line in cell.source.splitlines()
                                   if not line.lstrip().startswith(("%", "!")))
                found.append((str(notebook.relative_to(ROOT)), source))
    return found


def _top_level_imports() -> dict[str, set[str]]:
    """Names imported with ``from dsh_jupyter import ...``, and where."""
    names: dict[str, set[str]] = {}
    for where, source in _code_blocks():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module == "dsh_jupyter":
                for alias in node.names:
                    names.setdefault(alias.name, set()).add(where)
    return names


def test_the_top_level_is_what_the_docs_import() -> None:
    imported = _top_level_imports()
    assert len(imported) > 10, "found too few imports: is the scan broken?"
    moved = {name: sorted(where) for name, where in imported.items()
             if name not in dsh_jupyter.__all__}
    assert moved == {}, "pages import names the top level no longer exports"
    unused = set(dsh_jupyter.__all__) - set(imported)
    assert unused <= RETURNED_TYPES, (
        f"exported at the top level but imported by no page: {sorted(unused - RETURNED_TYPES)}"
        "; move them to their subpackage, or list them in RETURNED_TYPES with the reason")


def test_a_moved_name_resolves_with_a_warning_naming_its_home() -> None:
    moved: dict[str, str] = dsh_jupyter._MOVED
    assert set(moved).isdisjoint(dsh_jupyter.__all__)
    since_0_1_0 = {"export_notebook"}  # added to the top level after 0.1.0
    assert len(moved) + len(set(dsh_jupyter.__all__) - since_0_1_0) == 87  # the 0.1.0 top level
    for name, home in moved.items():
        module = importlib.import_module(home)
        assert name in module.__all__, f"{name} is not public in {home}"
        with pytest.warns(DeprecationWarning, match=rf"import it from {re.escape(home)}"):
            value = getattr(dsh_jupyter, name)
        assert value is getattr(module, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'Nope'"):
            dsh_jupyter.Nope  # noqa: B018
        assert not hasattr(dsh_jupyter, "Nope")


OLD_PATHS = {
    "dsh_jupyter.registry.code_mode": ("dsh_jupyter.codemode.run_code",),
    "dsh_jupyter.registry.bridge": ("dsh_jupyter.codemode.bridge",),
    "dsh_jupyter.registry.run_files": ("dsh_jupyter.codemode.run_files",),
    "dsh_jupyter.registry.sdk_python": ("dsh_jupyter.codemode.sdk_python",),
    "dsh_jupyter.registry.discovery": ("dsh_jupyter.codemode.discovery",),
    "dsh_jupyter.registry.prompt": ("dsh_jupyter.codemode.prompt",
                                    "dsh_jupyter.registry.assembly"),
    "dsh_jupyter.registry.registry": ("dsh_jupyter.codemode.registry",
                                      "dsh_jupyter.registry.core"),
}


@pytest.mark.parametrize(("old", "homes"), OLD_PATHS.items())
def test_the_old_paths_of_code_mode_still_import_without_a_warning(
        old: str, homes: tuple[str, ...]) -> None:
    """Code Mode moved to ``dsh_jupyter.codemode``; the old module paths re-export what
    they held (the very objects), quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shim = importlib.reload(importlib.import_module(old))
    modules = [importlib.import_module(home) for home in homes]
    assert shim.__all__
    for name in shim.__all__:
        assert any(getattr(shim, name) is getattr(module, name, None) for module in modules)
    assert importlib.import_module("dsh_jupyter.registry.registry").ToolRegistry is (
        dsh_jupyter.ToolRegistry)
