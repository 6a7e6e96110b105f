"""A tutorial as a new user runs it: a venv with nothing but ``pip install -e '.[lab]'``
(what README, the quickstart and the notebook itself say), that venv's own
``jupyter lab``, and Run All on ``notebooks/07-notebook-experience.ipynb`` in Debian's
chromium: the live plot, an approval clicked, the counting program stopped, and the
last cell reached, with no error anywhere. ``$DSH_LAB_VENV`` names a ready venv
(``.ci/run`` makes one); otherwise the test makes one (~15 s).
Run it alone with ``pytest -m browser tests/integration/widgets/test_tutorial_browser.py``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_harness import (
    LabServer,
    browser_marks,
    browser_page,
    jupyterlab,
    lab_only_venv,
)

REPO = Path(__file__).resolve().parents[3]
TUTORIAL = REPO / "notebooks" / "07-notebook-experience.ipynb"


pytestmark = browser_marks("playwright", seconds=480)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabServer]:
    root = tmp_path / "notebooks"
    root.mkdir()
    shutil.copy(TUTORIAL, root / TUTORIAL.name)
    python = lab_only_venv(tmp_path)
    with jupyterlab(root, tmp_path / "lab", python=python) as server:
        yield server


@pytest.fixture
def page(lab: LabServer) -> Iterator[Any]:
    with browser_page() as page:
        yield page


def _text(locator: Any) -> str:
    return " ".join(locator.inner_text().split())


def test_run_all_of_the_notebook_experience_in_a_lab_only_venv(lab: LabServer,
                                                               page: Any) -> None:
    page.goto(f"{lab.url}/lab/tree/{TUTORIAL.name}?reset")
    page.wait_for_function(
        "() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel"
        "?.status === 'idle'", timeout=90_000)
    # Not awaited: Run All resolves when every cell has run, and one waits for a click.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    cards = page.locator(".jp-Notebook .dsh-card-widget.dsh-run-code")

    # The approval prompt shows once the plot's cell is done: by then its card is final.
    approve = page.locator("button.dsh-approve")
    approve.wait_for(state="visible", timeout=180_000)
    plot = cards.filter(has_text="Plot monthly sales per region")
    assert "ModuleNotFoundError" not in plot.inner_text()
    assert _text(plot.locator(".dsh-header").first).startswith("ok Plot monthly sales")
    figure = plot.locator("img[src^='data:image/png;base64,']")
    assert figure.count() == 1 and figure.evaluate("img => img.naturalWidth") > 100

    approve.click()
    cards.filter(has_text="archived south").wait_for(timeout=60_000)

    counting = cards.filter(has_text="Count slowly")
    counting.locator(".dsh-live", has_text="tick 1").wait_for(timeout=60_000)
    counting.locator("button.dsh-stop").click()
    outputs = page.locator(".jp-Notebook .jp-OutputArea")
    outputs.filter(has_text="stopped by: the user").wait_for(timeout=60_000)
    outputs.filter(has_text="archived: ['south']").wait_for(timeout=60_000)  # the last cell

    notebook = page.locator(".jp-Notebook").inner_text()
    for unwanted in ("Traceback", "Error:", "ModuleNotFoundError", "FileNotFoundError"):
        assert unwanted not in notebook, unwanted
    assert page.locator("[data-mime-type='application/vnd.jupyter.error']").count() == 0
