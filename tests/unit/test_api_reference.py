"""docs/api.md lists exactly the public names, each once, under the module that owns it.

An entry is a list item that starts with the name in backticks (``- `name(...)` — ...``);
a ``## `module` `` heading says which module the entries below it belong to. The
top-level package documents its ``__all__``; each other module documents the names of
its ``__all__`` that no section above it documents (a name two modules export, such as
``ModelError`` in ``dsh_jupyter.errors`` and ``dsh_jupyter.agent``, is documented under
the first). Regenerate the page with ``python docs/gen_api.py``.
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from pathlib import Path

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"
MODULE_HEADING = re.compile(r"^## `([\w.]+)`$")
ENTRY = re.compile(r"^- `([A-Za-z_]\w*)")


def documented() -> dict[str, list[str]]:
    """Entry names per module heading, in page order."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in API_MD.read_text(encoding="utf-8").splitlines():
        heading = MODULE_HEADING.match(line)
        if heading:
            current = heading.group(1)
            sections.setdefault(current, [])
        elif (entry := ENTRY.match(line)) is not None:
            assert current is not None, f"entry before any module heading: {line}"
            sections[current].append(entry.group(1))
    return sections


def expected() -> dict[str, set[str]]:
    sections = documented()
    top = set(importlib.import_module("dsh_jupyter").__all__)
    wanted = {"dsh_jupyter": top}
    above = set(top)
    for module_name in sections:  # page order
        if module_name != "dsh_jupyter":
            wanted[module_name] = set(importlib.import_module(module_name).__all__) - above
            above |= wanted[module_name]
    return wanted


def test_every_public_name_is_documented_once_and_nothing_else() -> None:
    sections = documented()
    assert "dsh_jupyter" in sections
    counts = Counter(name for names in sections.values() for name in names)
    assert [name for name, n in counts.items() if n > 1] == []
    for module_name, names in expected().items():
        listed = set(sections[module_name])
        assert sorted(names - listed) == [], f"public in {module_name} but not in api.md"
        assert sorted(listed - names) == [], f"in api.md under {module_name} but not public"


def test_the_subpackages_with_public_names_have_a_section() -> None:
    for module_name in ("dsh_jupyter.registry", "dsh_jupyter.errors", "dsh_jupyter.events",
                        "dsh_jupyter.runtime", "dsh_jupyter.json_value", "dsh_jupyter.kernel",
                        "dsh_jupyter.agent", "dsh_jupyter.widgets", "dsh_jupyter.mcp",
                        "dsh_jupyter.evaluation"):
        assert module_name in documented(), f"api.md has no section for {module_name}"


def test_every_entry_has_a_summary() -> None:
    for line in API_MD.read_text(encoding="utf-8").splitlines():
        if ENTRY.match(line):
            summary = line.partition("` — ")[2]
            assert summary.strip(), f"no summary: {line}"
