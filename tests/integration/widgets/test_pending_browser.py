"""Approvals that survive a kernel restart, in JupyterLab and Debian's chromium.

A notebook's setup cell makes a journaled registry whose tools append a line per body
call to a counter file; a ``%%run_code`` cell waits on ``rm``'s card. The kernel process
is SIGKILLed (its pid is the run's host in the journal) and JupyterLab's server restarts
it, as it restarts any kernel that died. The user runs the setup cell again, then
``%dsh_approvals``, and clicks Approve in the browser: the run's card appears under the
question and ends ``ok`` with its first read marked "from the journal"; each tool body
ran once. Screenshots go to ``artifacts/widgets/`` (and ``docs/img/`` with
``DSH_UPDATE_DOC_SCREENSHOTS=1``). Run it alone with
``pytest -m browser tests/integration/widgets/test_pending_browser.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_harness import (
    PENDING_PROGRAM,
    PENDING_SETUP,
    LabServer,
    browser_marks,
    browser_page,
    jupyterlab,
)

REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = REPO / "artifacts" / "widgets"
DOCS_IMG = REPO / "docs" / "img"
NOTEBOOK = "pending.ipynb"


pytestmark = browser_marks("jupyterlab", "playwright", seconds=300)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabServer]:
    root = tmp_path / "root"
    root.mkdir()
    setup = PENDING_SETUP.format(counter=str(tmp_path / "bodies.txt"),
                                 journal=str(tmp_path / "journal.sqlite"))
    cells: list[dict[str, object]] = [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": source} for source in (setup, PENDING_PROGRAM, "%dsh_approvals")]
    (root / NOTEBOOK).write_text(json.dumps({
        "cells": cells, "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                    "name": "python3"}}}))
    with jupyterlab(root, tmp_path / "lab") as server:
        yield server


@pytest.fixture
def page(lab: LabServer) -> Iterator[Any]:
    with browser_page(device_scale_factor=1) as page:
        yield page


def _kernel_status(page: Any, status: str) -> None:
    page.wait_for_function(
        "status => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel"
        "?.status === status", arg=status, timeout=90_000)


def _run_cell(page: Any, index: int) -> None:
    """Select cell ``index`` and run it (not awaited: a cell may wait for a click)."""
    page.evaluate("""index => {
        const notebook = window.jupyterapp.shell.currentWidget.content;
        notebook.activeCellIndex = index;
        window.jupyterapp.commands.execute('notebook:run-cell');
    }""", index)


def _waiting_host(journal: Path) -> str:
    """The host (``pid@hostname``) of the one run waiting in the journal."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with sqlite3.connect(journal) as db:
            rows = db.execute("SELECT host FROM runs WHERE status = 'waiting'").fetchall()
        if rows:
            return str(rows[0][0])
        time.sleep(0.2)
    raise AssertionError("no run waiting in the journal")


def _save(locator: Any, name: str) -> None:
    """A screenshot in ``artifacts/widgets/``; with ``DSH_UPDATE_DOC_SCREENSHOTS=1`` also in
    ``docs/img/`` for docs/widgets.md (it shows durations and ids: rewritten only when
    asked)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    locator.screenshot(path=str(ARTIFACTS / name), animations="disabled")
    if os.environ.get("DSH_UPDATE_DOC_SCREENSHOTS") == "1":
        shutil.copy(ARTIFACTS / name, DOCS_IMG / name)


def test_an_approval_survives_a_kernel_restart_in_jupyterlab(lab: LabServer, page: Any,
                                                              tmp_path: Path) -> None:
    page.goto(f"{lab.url}/lab/tree/{NOTEBOOK}?reset")
    _kernel_status(page, "idle")
    cells = page.locator(".jp-Notebook .jp-Cell")
    _run_cell(page, 0)
    _run_cell(page, 1)  # queued behind the setup cell

    # The program waits on rm's card, which says the question is journaled.
    card = cells.nth(1).locator(".dsh-card-widget.dsh-run-code")
    prompt = card.locator(".dsh-card-widget.dsh-approval")
    prompt.locator("button.dsh-approve").wait_for(state="visible", timeout=120_000)
    assert "journaled: survives a restart" in prompt.inner_text()
    host = _waiting_host(tmp_path / "journal.sqlite")
    assert (tmp_path / "bodies.txt").read_text().splitlines() == ["read a.txt"]

    # The kernel dies; the server restarts it (JupyterLab says so in a dialog).
    os.kill(int(host.partition("@")[0]), signal.SIGKILL)
    page.locator(".jp-Dialog", has_text="restart").wait_for(timeout=60_000)
    page.locator(".jp-Dialog button", has_text="Ok").click()
    _kernel_status(page, "idle")

    # The setup cell again, then the waiting approvals; Approve in the browser.
    _run_cell(page, 0)
    _run_cell(page, 2)
    pending = cells.nth(2).locator(".dsh-pending")
    waiting = pending.locator(".dsh-pending-run")
    waiting.locator("button.dsh-approve").wait_for(state="visible", timeout=60_000)
    question = waiting.locator(".dsh-card-widget.dsh-approval")
    text = question.inner_text()
    for expected in ("Approve rm?", "rm deletes a file", "journaled: survives a restart",
                     f"its host {host} has stopped", '"path": "a.txt"'):
        assert expected in text, (expected, text)
    _save(pending, "pending-approval.png")
    waiting.locator("button.dsh-approve").click()

    run = waiting.locator(".dsh-card-widget.dsh-run-code")
    run.locator(".dsh-header", has_text="ok Resume run").first.wait_for(timeout=120_000)
    assert "rm approved by you" in question.inner_text()
    rows = [" ".join(row.split()) for row in run.locator(
        ".dsh-card-widget.dsh-sub-call .dsh-header").all_inner_texts()]
    assert rows[0].startswith('ok: from the journal read path="a.txt"'), rows
    assert rows[1].startswith('ok rm path="a.txt"'), rows
    assert rows[2].startswith('ok read path="b.txt"'), rows
    assert "<b.txt>" in run.inner_text()
    _save(pending, "pending-resumed.png")
    assert (tmp_path / "bodies.txt").read_text().splitlines() == [
        "read a.txt", "rm a.txt", "read b.txt"]
