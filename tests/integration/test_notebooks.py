"""The tutorials in ``notebooks/`` run top to bottom and still print what they saved.

nbval re-runs each tutorial in a fresh kernel (real ``KernelRuntime`` kernels, a real
MCP server process) and compares every text output with the saved one, after the
patterns in ``notebooks/sanitize.cfg``. It runs in a subprocess so that its kernels and
its pytest plugins stay out of this session. After changing a tutorial or anything it
prints, re-save the outputs with ``python notebooks/regenerate.py``.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
SANITIZE = NOTEBOOKS / "sanitize.cfg"
NOT_TUTORIALS = {"evaluation.ipynb"}  # papermill runs it (`dsh-jupyter eval`), not nbval
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
LAB_VENV = os.environ.get("DSH_LAB_VENV")
"""A venv with only ``.[lab]`` (plus nbval and pytest): the tutorials run there under
nbval instead (``.ci/run`` makes one), proving that ``[lab]`` is all they need."""
# Top-level modules a tutorial imports, in its own cells, in its %%run_code programs and
# in the programs it starts (`import x`, `from x import y`, `"-m", "x"`).
IMPORT = re.compile(r'^\s*(?:import|from)\s+([A-Za-z_]\w*)|"-m",\s*"([A-Za-z_]\w*)',
                    re.MULTILINE)


def tutorials() -> list[Path]:
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb") if p.name not in NOT_TUTORIALS)


def test_the_tutorials_are_there() -> None:
    assert [p.name for p in tutorials()] == [
        "01-quickstart.ipynb", "02-policies.ipynb", "03-code-mode.ipynb",
        "04-widgets-and-replay.ipynb", "05-agents.ipynb", "06-mcp.ipynb",
        "07-notebook-experience.ipynb", "08-sessions.ipynb", "09-checked-and-readable.ipynb"]


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


def _imported_modules() -> set[str]:
    modules = set()
    for path in tutorials():
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                modules |= {a or b for a, b in IMPORT.findall(cell.source)}
    return modules


def _lab_closure() -> set[str]:
    """Every distribution ``pip install '.[lab]'`` brings: the project's requirements with
    the ``lab`` extra (read from pyproject.toml), then theirs as installed here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in (*project["dependencies"],
                                     *project["optional-dependencies"]["lab"])]
    found: set[str] = {canonicalize_name(project["name"])}
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found.add(name)
        for text in importlib.metadata.requires(requirement.name) or ():
            needed = Requirement(text)
            extras = requirement.extras or {""}
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra})
                                            for extra in extras):
                todo.append(needed)
    return found


def test_the_lab_extra_brings_everything_the_tutorials_import() -> None:
    """README, the quickstart and 07 say `pip install -e '.[lab]'` runs the tutorials."""
    modules = _imported_modules() - set(sys.stdlib_module_names)
    assert {"dsh_jupyter", "matplotlib", "mcp", "papermill"} <= modules
    owners = importlib.metadata.packages_distributions()
    needed = {module: canonicalize_name(owners[module][0]) if module in owners
              else canonicalize_name(module) for module in modules}
    lab = _lab_closure()
    missing = sorted(f"{module} ({dist})" for module, dist in needed.items() if dist not in lab)
    assert not missing, f"the tutorials import what [lab] does not bring: {missing}"


def test_the_lab_extra_brings_the_type_checker() -> None:
    """09 checks programs with ty, a program it runs and never imports (so the test above
    cannot see it): [lab] carries the [check] extra's requirement, pinned the same."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(extras["check"]) <= set(extras["lab"]), (extras["check"], extras["lab"])


@pytest.mark.kernel
@pytest.mark.timeout(600)
def test_tutorials_pass_nbval() -> None:
    """Every tutorial under nbval, in this environment or (``DSH_LAB_VENV``) in a venv
    with only ``.[lab]`` installed."""
    python = str(Path(LAB_VENV, "bin", "python")) if LAB_VENV else sys.executable
    run = subprocess.run(
        [python, "-m", "pytest", "--nbval", "--nbval-current-env",
         "--nbval-sanitize-with", str(SANITIZE), "-p", "no:cacheprovider", "-q",
         *(str(p) for p in tutorials())],
        cwd=ROOT, capture_output=True, text=True, timeout=570)
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]
