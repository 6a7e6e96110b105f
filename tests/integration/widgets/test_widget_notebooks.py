"""Real kernels, no front end: what papermill stores and what nbval compares."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

NOTEBOOKS = Path(__file__).parent / "notebooks"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(180)]


def execute(name: str, tmp_path: Path, **parameters: Any) -> Any:
    papermill = pytest.importorskip("papermill")
    import nbformat

    out = tmp_path / name
    papermill.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=parameters,
                               cwd=str(tmp_path), kernel_name="python3", progress_bar=False)
    return nbformat.read(out, as_version=4)


def displays(cell: Any) -> list[dict[str, Any]]:
    return [o["data"] for o in cell.outputs if o["output_type"] in ("display_data",
                                                                   "execute_result")]


def stdout(cell: Any) -> str:
    return "".join(o["text"] for o in cell.outputs if o["output_type"] == "stream")


def test_live_notebook_without_a_front_end_falls_back_to_the_policy(tmp_path: Path) -> None:
    nb = execute("widgets_live.ipynb", tmp_path, FRONTEND_TIMEOUT=1.0)
    code = [c for c in nb.cells if c.cell_type == "code"]
    live = displays(code[2])
    assert len(live) == 1 and set(live[0]) == {"text/plain", "text/html", "text/markdown",
                                               WIDGET_MIME}
    text = live[0]["text/plain"]  # displayed before the run, brought up to date since
    assert text.startswith('[error: CODE_RUN_FAILED] Tidy the notes <img src=x onerror='
                           '"window.__dsh_xss = 2"> — run_code')
    assert ('    [error: DENIED] delete_file — path="notes/todo.md"\n'
            "      deleting a file cannot be undone (rejected by policy 'reject': "
            "no widget front end)\n"
            "      approval: rejected by policy 'reject': no widget front end") in text
    assert "  failure: exception\n" in text
    html = live[0]["text/html"]
    assert "<img" not in html and "&lt;img src=x onerror=" in html
    assert "run_code is_error: True" in stdout(code[3])
    gallery = displays(code[5])
    assert len(gallery) == 6 and "showing 3 of 7 matches" in gallery[1]["text/plain"]


def test_batch_notebook_is_deterministic_for_nbval(tmp_path: Path) -> None:
    nb = execute("widgets_batch.ipynb", tmp_path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    first = displays(code[1])[0]["text/plain"]
    assert first.endswith("  logs:\n    alpha <img src=x onerror=alert(1)>\n    \n"
                          "    caught: KeyError: 'missing.txt'\n  result:\n    deleted a.txt")
    assert "approval: approved by policy 'approve': non-interactive" in first
    failed = displays(code[2])[0]["text/plain"]
    assert "  failure: exception\n  message:\n    Traceback (most recent call last):" in failed
    assert "ValueError: <b>no</b>\n  logs:\n    about to fail" in failed
    replayed = displays(code[3])[0]["text/plain"]
    assert replayed == "\n\n".join([first, failed]).replace(
        "\n      approval: approved by policy 'approve': non-interactive", "")
    # nbval re-runs the notebook and compares every text mime type with papermill's.
    run = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-q",
                          "-p", "no:cacheprovider", "-p", "no:asyncio", "--rootdir", str(tmp_path),
                          str(tmp_path / "widgets_batch.ipynb")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=150)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout
