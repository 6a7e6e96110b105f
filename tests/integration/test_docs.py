"""The docs' examples run.

Every ```python block in docs/**/*.md runs, in order, one namespace per page (compiled
without this module's ``from __future__`` flags, as a user would run it).

README.md and docs/quickstart.md, the first pages a reader meets, run as a reader pastes
them into a notebook: each ```python and ```ipython block a cell, in order, in a real
IPython kernel whose working directory is the checkout, cell magics (``%load_ext``,
``%%run_code``) included; a ``%%run_code`` cell must also end ``ok``, not with a failed
program. Their shell blocks (installs, ``dsh-jupyter demo``, ``jupyter lab``) are what
``.ci/run`` does.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
CELL = re.compile(r"^```(?:python|ipython)\n(.*?)^```", re.S | re.M)
SKIP_MARK = "# docs: not run"
AS_PASTED = (ROOT / "README.md", DOCS / "quickstart.md")


def pages() -> list[tuple[str, list[str]]]:
    found = [(str(p.relative_to(DOCS)), BLOCK.findall(p.read_text()))
             for p in sorted(DOCS.rglob("*.md")) if p not in AS_PASTED]
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


@pytest.mark.kernel
@pytest.mark.timeout(240)
@pytest.mark.parametrize("page", AS_PASTED, ids=lambda p: p.name)
def test_page_runs_as_pasted_into_a_notebook(page: Path) -> None:
    cells = [block.removesuffix("\n") for block in CELL.findall(page.read_text())
             if SKIP_MARK not in block]
    assert cells, f"no python or ipython block in {page.name}"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    # Raises at the first cell that raises, with its traceback.
    NotebookClient(nb, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    for cell in nb.cells:
        if cell.source.startswith("%%run_code"):
            [card] = [o["data"]["text/plain"] for o in cell.outputs
                      if o["output_type"] == "execute_result"]
            assert card.startswith("[ok]"), f"{page.name}: a program failed as written:\n{card}"
