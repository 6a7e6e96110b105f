"""Every ```python block in docs/*.md runs, in order, one namespace per page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SKIP_MARK = "# docs: not run"


def pages() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if BLOCK.search(p.read_text()))


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
async def test_page_examples_run(page: Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for number, block in enumerate(BLOCK.findall(page.read_text()), start=1):
        if SKIP_MARK in block:
            continue
        code = compile(block, f"{page.name}[block {number}]", "exec",
                       flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)  # noqa: S307 - our own docs
        if result is not None:
            await result
