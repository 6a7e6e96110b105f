"""The tutorials in ``notebooks/`` run top to bottom and still print what they saved.

nbval re-runs each tutorial in a fresh kernel (real ``KernelRuntime`` kernels, a real
MCP server process) and compares every text output with the saved one, after the
patterns in ``notebooks/sanitize.cfg``. It runs in a subprocess so that its kernels and
its pytest plugins stay out of this session. After changing a tutorial or anything it
prints, re-save the outputs with ``python notebooks/regenerate.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SANITIZE = NOTEBOOKS / "sanitize.cfg"
NOT_TUTORIALS = {"evaluation.ipynb"}  # papermill runs it (`dsh-jupyter eval`), not nbval
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def tutorials() -> list[Path]:
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb") if p.name not in NOT_TUTORIALS)


def test_the_tutorials_are_there() -> None:
    assert [p.name for p in tutorials()] == [
        "01-quickstart.ipynb", "02-policies.ipynb", "03-code-mode.ipynb",
        "04-widgets-and-replay.ipynb", "05-agents.ipynb", "06-mcp.ipynb",
        "07-notebook-experience.ipynb", "08-sessions.ipynb"]


@pytest.mark.parametrize("path", tutorials(), ids=lambda p: p.name)
def test_tutorial_is_saved_executed_top_to_bottom(path: Path) -> None:
    """What nbval compares against: run in order, no errors, text fallbacks only."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert "widgets" not in nb.metadata, "widget state: run notebooks/regenerate.py"
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), (
        "not run top to bottom in one kernel: run notebooks/regenerate.py")
    for cell in code:
        for output in cell.outputs:
            assert output.output_type != "error", cell.source
            assert WIDGET_VIEW not in output.get("data", {}), cell.source


def _markdown(path: Path) -> list[str]:
    return [cell.source for cell in nbformat.read(path, as_version=4).cells
            if cell.cell_type == "markdown"]


def test_the_quickstarts_next_list_names_every_later_tutorial() -> None:
    [listed] = [text for text in _markdown(NOTEBOOKS / "01-quickstart.ipynb")
                if text.startswith("## Next")]
    assert re.findall(r"`(\d\d-[\w-]+\.ipynb)`", listed) == [p.name for p in tutorials()[1:]]


def test_pointers_to_real_approve_buttons_name_the_tutorial_that_has_them() -> None:
    pointers = [text for path in tutorials() for text in _markdown(path)
                if "real buttons" in text and ".ipynb" in text]
    assert pointers, "02 sends the reader to the tutorial with real Approve buttons"
    for text in pointers:
        assert re.findall(r"\d\d-[\w-]+\.ipynb", text) == ["07-notebook-experience.ipynb"], text


def test_07s_stop_example_is_a_cell_that_runs() -> None:
    """Not a program in the markdown to copy: a cell to run (and press Stop on)."""
    path = NOTEBOOKS / "07-notebook-experience.ipynb"
    assert not [text for text in _markdown(path) if re.search(r"```\w*\n%%run_code", text)]
    cells = nbformat.read(path, as_version=4).cells
    [counting] = [cell for cell in cells if cell.cell_type == "code"
                  and cell.source.startswith('%%run_code --description "Count slowly"')]
    assert "tick 0" in counting.outputs[0]["data"]["text/plain"]


@pytest.mark.kernel
@pytest.mark.timeout(600)
def test_tutorials_pass_nbval() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env",
         "--nbval-sanitize-with", str(SANITIZE), "-p", "no:cacheprovider", "-q",
         *(str(p) for p in tutorials())],
        cwd=ROOT, capture_output=True, text=True, timeout=570)
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]
