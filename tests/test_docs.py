"""Every ```python block in docs/**/*.md runs, in order, one namespace per page
(compiled without this module's ``from __future__`` flags, as a user would run it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SKIP_MARK = "# docs: not run"


def pages() -> list[tuple[str, list[str]]]:
    found = [(str(p.relative_to(DOCS)), BLOCK.findall(p.read_text()))
             for p in sorted(DOCS.rglob("*.md"))]
    return [(name, blocks) for name, blocks in found if blocks]


@pytest.mark.parametrize(("page", "blocks"), pages(), ids=[name for name, _ in pages()])
async def test_page_examples_run(page: str, blocks: list[str]) -> None:
    module = "docs_" + page.removesuffix(".md").replace("/", "_")
    namespace: dict[str, object] = {"__name__": module}
    for number, block in enumerate(blocks, start=1):
        if SKIP_MARK in block:
            continue
        code = compile(block, f"{page}[block {number}]", "exec",
                       flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        result = eval(code, namespace)
        if result is not None:
            await result
