"""Every ```python block in docs/*.md runs, in order, one namespace per page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SKIP_MARK = "# docs: not run"


def pages() -> list[tuple[str, list[str]]]:
    found = [(p.name, BLOCK.findall(p.read_text())) for p in sorted(DOCS.glob("*.md"))]
    return [(name, blocks) for name, blocks in found if blocks]


@pytest.mark.parametrize(("page", "blocks"), pages(), ids=[name for name, _ in pages()])
async def test_page_examples_run(page: str, blocks: list[str]) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{page.removesuffix('.md')}"}
    for number, block in enumerate(blocks, start=1):
        if SKIP_MARK in block:
            continue
        code = compile(block, f"{page}[block {number}]", "exec",
                       flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if result is not None:
            await result
