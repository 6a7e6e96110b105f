"""A session recorded in JupyterLab, exported, and run again (Debian's chromium, Playwright).

A polling loop that would run 70 s is stopped with its card's Stop button: the log says
the call was stopped and by what, the exported cell keeps that kind (``stopped``, not a
failure) and skips the program with a note, so a papermill re-run of the export does not
run it again in full. Run alone with
``pytest -m browser tests/integration/widgets/test_export_browser.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import papermill
import pytest
from lab_harness import (
    LabServer,
    browser_marks,
    browser_page,
    jupyterlab,
)

from dsh_jupyter import export_notebook

SAMPLE = "dsh_jupyter.demo.tools:sample_registry"
POLL = '''\
import asyncio

for attempt in range(140):
    found = await tools.list_files({"pattern": "report.csv"})
    print("poll", attempt, found)
    await asyncio.sleep(0.5)'''
RECORD = f'''\
%load_ext dsh_jupyter
from contextlib import AsyncExitStack

from dsh_jupyter import JsonlSessionWriter
from dsh_jupyter.sessions import open_session_registry

resources = AsyncExitStack()
registry = await resources.enter_async_context(open_session_registry({SAMPLE!r}))
log = resources.enter_context(JsonlSessionWriter("session.jsonl"))
undo = registry.on_event(log)'''


pytestmark = browser_marks("jupyterlab", "playwright", seconds=300)


def _notebook(path: Path, *sources: str) -> None:
    cells = [nbformat.v4.new_code_cell(source) for source in sources]  # type: ignore[no-untyped-call]
    nb = nbformat.v4.new_notebook(cells=cells, metadata={  # type: ignore[no-untyped-call]
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, path)  # type: ignore[no-untyped-call]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabServer]:
    root = tmp_path / "root"
    root.mkdir()
    with jupyterlab(root, tmp_path / "lab") as server:
        yield server


@pytest.fixture
def page(lab: LabServer) -> Iterator[Any]:
    with browser_page() as page:
        yield page


def _open_and_run_all(page: Any, lab: LabServer, name: str) -> Any:
    page.goto(f"{lab.url}/lab/tree/{name}?reset")
    page.wait_for_function(
        "() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel"
        "?.status === 'idle'", timeout=90_000)
    # Not awaited: it resolves when every cell has run, and a cell waits for our click.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    return page.locator(".jp-Notebook .jp-Cell")


def _program(nb: Any) -> Any:
    return next(cell for cell in nb.cells if cell.source.startswith("%%run_code"))


def test_a_stopped_program_is_recorded_and_its_export_skips_it(lab: LabServer, page: Any,
                                                               tmp_path: Path) -> None:
    _notebook(lab.root / "poll.ipynb", RECORD,
              f'%%run_code --description "Poll until the report is there"\n{POLL}',
              'await resources.aclose()\nprint("log closed")')
    cells = _open_and_run_all(page, lab, "poll.ipynb")
    card = cells.nth(1).locator(".dsh-card-widget.dsh-run-code")
    card.locator(".dsh-live", has_text="poll 3").wait_for(timeout=120_000)
    card.locator("button.dsh-stop").click()
    cells.nth(1).locator(".dsh-run-code", has_text="Stopped by the user after").wait_for(
        timeout=60_000)
    cells.nth(2).locator(".jp-OutputArea", has_text="log closed").wait_for(timeout=60_000)

    # The log says the program was stopped, and by what.
    events = [json.loads(line) for line in (lab.root / "session.jsonl").read_text().splitlines()]
    (result,) = [e for e in events if e["kind"] == "tool/result"]
    assert result["name"] == "run_code" and result["is_error"]
    assert result["stopped"] == "stopped by the user"
    seconds = result["ended"] - result["started"]
    assert 1 < seconds < 60, seconds

    # The exported cell keeps the kind, says so, and skips the program.
    exported = tmp_path / "exported.ipynb"
    nb = export_notebook(lab.root / "session.jsonl", exported, tools=SAMPLE)
    program = _program(nb)
    line, body = program.source.split("\n", 1)
    assert body == POLL
    assert line == ("%%run_code --description 'Poll until the report is there' --skip "
                    f"'stopped by the user after {seconds:.1f} s in the recorded session'")
    assert program.metadata["dsh_jupyter"]["outcome"] == "stopped"
    assert program.metadata["dsh_jupyter"]["stopped"] == {"reason": "stopped by the user",
                                                          "seconds": round(seconds, 1)}
    recorded = program.outputs[0].data["text/plain"]
    assert recorded.startswith("[stopped] Poll until the report is there — run_code"), recorded
    assert "poll 3" in recorded

    # Run again headless: the program is skipped with a visible note, not run for 70 s.
    started = time.monotonic()
    papermill.execute_notebook(str(exported), str(tmp_path / "ran.ipynb"), kernel_name="python3",
                               progress_bar=False, cwd=str(tmp_path))
    took = time.monotonic() - started
    ran = nbformat.read(tmp_path / "ran.ipynb", as_version=4)  # type: ignore[no-untyped-call]
    outputs = _program(ran).outputs
    assert [o.output_type for o in outputs] == ["stream"], outputs
    assert outputs[0].text == (f"skipped: stopped by the user after {seconds:.1f} s in the "
                               "recorded session (remove --skip from the first line to run "
                               "it)\n")
    assert took < 45, f"the re-run took {took:.0f} s: the stopped program ran again"


TOOLS_MODULE = '''\
from dsh_jupyter import Ask
from dsh_jupyter.demo.tools import sample_registry


def registry():
    tools = sample_registry()
    tools.on_pre_execute(lambda execution, decision: Ask("counting is costly")
                         if execution.name == "word_count" else None)
    return tools
'''
COUNT = '''\
n = await tools.word_count({"text": "a b c"})
print("counted", n)
try:
    await tools.word_count({"text": "two words"})
except ToolCallError as error:
    print("refused:", error.message)
return n'''


def _answer(cell: Any, *, reject_because: str) -> Any:
    """Approve the first count and reject the second, by clicking in the card; the card."""
    card = cell.locator(".dsh-card-widget.dsh-run-code")
    calls = card.locator(".dsh-card-widget.dsh-sub-call")
    first = calls.nth(0).locator("button.dsh-approve")
    first.wait_for(state="visible", timeout=120_000)
    assert "Approve word_count?" in calls.nth(0).inner_text()
    first.click()
    second = calls.nth(1).locator("button.dsh-reject")
    second.wait_for(state="visible", timeout=60_000)
    calls.nth(1).locator(".dsh-reject-reason input").fill(reject_because)
    second.click()
    cell.locator(".dsh-run-code .dsh-header", has_text="ok Count the words").wait_for(
        timeout=60_000)
    return cell.locator(".dsh-run-code")


def test_an_exported_session_asks_its_approvals_again_with_the_card(
        lab: LabServer, page: Any, tmp_path: Path) -> None:
    """Approvals given in a notebook are asked again, with the buttons, when its export
    runs in a notebook (``approvals = "ask"``): the recorded answers are not assumed."""
    (lab.root / "asking_tools.py").write_text(TOOLS_MODULE)
    record = RECORD.replace(repr(SAMPLE), "'asking_tools:registry'") + (
        "\nfrom dsh_jupyter.widgets import NotebookApprovals\n\n"
        "registry.approval = NotebookApprovals()  # the buttons")
    _notebook(lab.root / "count.ipynb", record,
              f'%%run_code --description "Count the words"\n{COUNT}',
              'await resources.aclose()\nprint("log closed")')
    cells = _open_and_run_all(page, lab, "count.ipynb")
    card = _answer(cells.nth(1), reject_because="not that one")
    assert "refused: counting is costly (rejected by user: not that one)" in card.inner_text()
    cells.nth(2).locator(".jp-OutputArea", has_text="log closed").wait_for(timeout=60_000)

    nb = export_notebook(lab.root / "session.jsonl", lab.root / "again.ipynb",
                         tools="asking_tools:registry")
    cells = _open_and_run_all(page, lab, "again.ipynb")
    program = next(i for i, cell in enumerate(nb.cells) if cell.source.startswith("%%run_code"))
    card = _answer(cells.nth(program), reject_because="still no")
    text = card.inner_text()
    assert "counted 3" in text and "rejected by user: still no" in text, text
    assert "word_count approved by you" in text
    assert "\napprovals = 'ask'" in "".join(cell.source for cell in nb.cells)
    cells.last.locator(".jp-InputArea", has_text="await resources.aclose()").wait_for()
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
        " === 'idle'", timeout=60_000)
