"""The cards in a real browser: JupyterLab + Debian's chromium driven by Playwright.

The notebook runs a run_code program (in a throwaway kernel) with three
sub-calls, the third of which needs approval. The test checks the DOM of the
run_code card and its nested cards while the cell awaits, clicks Approve,
checks the outcome, and saves screenshots to ``artifacts/widgets/``; with
``DSH_UPDATE_DOC_SCREENSHOTS=1`` also to ``docs/img/`` for ``docs/widgets.md``.
Run it alone with ``pytest -m browser tests/integration/widgets``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_harness import (
    LabServer,
    browser_marks,
    browser_page,
    jupyterlab,
)

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = Path(__file__).parent / "notebooks" / "widgets_live.ipynb"
MAGIC_NOTEBOOK = Path(__file__).parent / "notebooks" / "magic_live.ipynb"
ARTIFACTS = REPO / "artifacts" / "widgets"
DOCS_IMG = REPO / "docs" / "img"
# Screenshots show durations, so they differ on every run: docs/img is rewritten only
# when asked, and a normal run leaves the checkout clean.
UPDATE_DOCS = os.environ.get("DSH_UPDATE_DOC_SCREENSHOTS") == "1"
XSS_TITLE = 'Tidy the notes <img src=x onerror="window.__dsh_xss = 2">'


pytestmark = browser_marks("jupyterlab", "playwright", seconds=300)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabServer]:
    root = tmp_path / "root"
    root.mkdir()
    for notebook in (NOTEBOOK, MAGIC_NOTEBOOK):
        shutil.copy(notebook, root / notebook.name)
    with jupyterlab(root, tmp_path / "lab") as server:
        yield server


@pytest.fixture
def page(lab: LabServer) -> Iterator[Any]:
    with browser_page(device_scale_factor=1) as page:
        yield page


def _kernel_idle(page: Any) -> None:
    page.wait_for_function(
        "() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel"
        "?.status === 'idle'", timeout=90_000)


def _save(locator: Any, name: str, *, docs: bool) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        try:
            locator.screenshot(path=str(ARTIFACTS / name), animations="disabled")
            break
        except Exception as error:
            # A %%run_code cell replaces its live card by the outcome's card when the
            # program ends: the element shot may be swapped under us. The locator
            # finds the new one on the next attempt.
            if "not attached" not in str(error) or attempt == 2:
                raise
    if docs and UPDATE_DOCS:
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        shutil.copy(ARTIFACTS / name, DOCS_IMG / name)


def _text(locator: Any) -> str:
    return " ".join(locator.inner_text().split())


def _headers(calls: Any) -> list[str]:
    """Each nested card's own header line (not the approval card's inside it)."""
    return [_text(calls.nth(i).locator(".dsh-header").first) for i in range(calls.count())]


def _icon_off_centre(button: Any) -> float:
    """How far (CSS pixels) the drawn icon's vertical centre is from its button's.

    Measured on the pixels, not on the ``<i>``'s box: a stretched box is centred
    while the glyph sits at its top. The icon's ink is what differs from the button's
    own colour (sampled at its right end, past the label) in the icon's columns."""
    from io import BytesIO

    from PIL import Image

    box, icon = button.bounding_box(), button.locator("i").bounding_box()
    shot = Image.open(BytesIO(button.screenshot(animations="disabled"))).convert("RGB")
    top = int(box["y"])  # the shot starts at the pixel row holding the button's top
    rows = range(int(box["y"] - top + 0.999), int(box["y"] - top + box["height"]))
    columns = range(int(icon["x"] - int(box["x"])), int(icon["x"] - int(box["x"]) +
                                                       icon["width"]))
    ground = shot.getpixel((shot.width - 4, shot.height // 2))
    assert isinstance(ground, tuple)

    def ink(x: int, y: int) -> bool:
        pixel = shot.getpixel((x, y))
        assert isinstance(pixel, tuple)
        return sum(abs(a - b) for a, b in zip(pixel, ground, strict=False)) > 150

    inked = [y for y in rows if any(ink(x, y) for x in columns)]
    assert inked, "no icon drawn"
    return float(abs((inked[0] + inked[-1] + 1) / 2 - (box["y"] - top + box["height"] / 2)))


def test_run_code_card_with_approval_in_jupyterlab(lab: LabServer, page: Any) -> None:
    started = time.monotonic()
    page.goto(f"{lab.url}/lab/tree/{NOTEBOOK.name}?reset")
    _kernel_idle(page)
    # Not awaited: the command resolves only when every cell has run, and the
    # program cell waits for our click.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

    card = page.locator(".dsh-card-widget.dsh-run-code")
    approve = card.locator("button.dsh-approve")
    approve.wait_for(state="visible", timeout=120_000)

    # While the cell awaits: the title (escaped), the program, three nested cards.
    header = card.locator(".dsh-header").first
    assert _text(header).startswith(f"running {XSS_TITLE} run_code")
    assert "await tools.delete_file" in card.locator("details.dsh-details").first.inner_text()
    calls = card.locator(".dsh-card-widget.dsh-sub-call")
    assert calls.count() == 3
    rows = _headers(calls)
    assert rows[0].startswith('ok list_files pattern="*"'), rows
    assert rows[1].startswith('ok read_file path="notes/todo.md"'), rows
    assert rows[2] == 'waiting: approval delete_file path="notes/todo.md"', rows
    prompt = calls.nth(2).locator(".dsh-card-widget.dsh-approval")
    assert "Approve delete_file?" in prompt.inner_text()
    assert "deleting a file cannot be undone" in prompt.inner_text()
    _save(card, "widgets-run-code-approval.png", docs=True)

    approve.click()

    done = page.locator(".jp-OutputArea-output", has_text="run_code is_error: False")
    done.wait_for(timeout=60_000)
    page.locator(".jp-OutputArea-output", has_text="done").first.wait_for(timeout=60_000)
    assert _text(header).startswith(f"ok {XSS_TITLE} run_code")
    rows = _headers(calls)
    assert [row.split()[0] for row in rows] == ["ok", "ok", "ok"], rows
    assert "delete_file approved by you" in prompt.inner_text()
    assert not approve.is_visible()
    output = card.inner_text()
    assert '- <img src=x onerror="window.__dsh_xss = 1">' in output
    assert '"deleted": "notes/todo.md"' in output
    _save(card, "widgets-run-code-done.png", docs=True)

    gallery = page.locator(".jp-Cell").last.locator(".jp-OutputArea")
    gallery.locator(".dsh-card-widget").nth(5).wait_for(timeout=60_000)
    gallery_text = gallery.inner_text()
    for expected in ("exit code: 1", "showing 3 of 7 matches", "lines 40 to 42 of 120",
                     "+    return a - b", "ipywidgets documentation", "error: TOOL_ERROR",
                     'TODO: <img src=x onerror="window.__dsh_xss = 3">'):
        assert expected in gallery_text, expected
    links = gallery.locator("a")
    assert [links.nth(i).get_attribute("href") for i in range(links.count())] == [
        "https://ipywidgets.readthedocs.io/"]
    page.evaluate("() => document.querySelector('.jp-Notebook').scrollTop = 0")
    _save(gallery, "widgets-gallery.png", docs=True)

    # Nothing tool-derived ran as markup, anywhere on the page.
    assert page.evaluate("() => window.__dsh_xss") is None
    assert page.locator(".jp-Notebook img[src='x']").count() == 0
    print(f"browser test body took {time.monotonic() - started:.1f} s")


def test_run_code_cells_live_approval_plot_and_stop_in_jupyterlab(lab: LabServer,
                                                                    page: Any) -> None:
    """``%%run_code`` cells as a user lives them: the card streams, an approval is
    decided by clicking (its arguments in view), a figure lands in the card, and Stop
    leaves the stopped card with its logs, no traceback, and the next cell runs."""
    page.goto(f"{lab.url}/lab/tree/{MAGIC_NOTEBOOK.name}?reset")
    _kernel_idle(page)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    cells = page.locator(".jp-Notebook .jp-Cell")

    # 1. Streaming: the first line and the started sub-call show while the program waits.
    card = cells.nth(1).locator(".dsh-card-widget.dsh-run-code")
    card.locator(".dsh-live", has_text="first line").wait_for(timeout=120_000)
    header = card.locator(".dsh-header").first
    assert _text(header).startswith("running Stream a line, then wait"), _text(header)
    sub_calls = card.locator(".dsh-card-widget.dsh-sub-call")
    assert _headers(sub_calls) == ["running slow — seconds=6"] or \
        _headers(sub_calls)[0].startswith("running slow"), _headers(sub_calls)
    assert "second line" not in card.locator(".dsh-live").inner_text()  # still waiting
    _save(card, "magic-live.png", docs=True)
    cells.nth(1).locator(".dsh-run-code .dsh-header", has_text="ok Stream").wait_for(
        timeout=60_000)
    assert "second line" in cells.nth(1).locator(".dsh-run-code").inner_text()

    # 2. An approval with its arguments unfolded, decided by a click.
    card = cells.nth(2).locator(".dsh-card-widget.dsh-run-code")
    approve = card.locator("button.dsh-approve")
    approve.wait_for(state="visible", timeout=120_000)
    prompt = card.locator(".dsh-card-widget.dsh-approval")
    prompt_text = prompt.inner_text()
    for expected in ("Approve delete_file?", "deleting a file cannot be undone",
                     '"path": "notes/todo.md"', '"reason": "done with them"',
                     "from the program 'Delete the notes' · call 1 of 1"):
        assert expected in prompt_text, (expected, prompt_text)
    sub = card.locator(".dsh-card-widget.dsh-sub-call").first
    assert _text(sub.locator(".dsh-header").first).startswith("waiting: approval delete_file")
    _save(card, "magic-approval.png", docs=True)
    approve.click()
    done = cells.nth(2).locator(".dsh-run-code", has_text="deleted notes/todo.md")
    done.wait_for(timeout=60_000)
    assert "delete_file approved by you" in cells.nth(2).inner_text()

    # 3. A figure the program drew (never shown by it) lands in the card, after its logs.
    card = cells.nth(3).locator(".dsh-card-widget.dsh-run-code")
    figure = card.locator("img[src^='data:image/png;base64,']")
    figure.wait_for(timeout=120_000)
    text = card.inner_text()
    assert text.index("drawing") < text.index("plotted")
    assert figure.evaluate("img => img.naturalWidth") > 100
    _save(card, "magic-plot.png", docs=True)

    # 4. Stop mid-run: the stopped card keeps its ticks; no traceback; the next cell runs.
    card = cells.nth(4).locator(".dsh-card-widget.dsh-run-code")
    card.locator(".dsh-live", has_text="tick 3").wait_for(timeout=120_000)
    stop = card.locator("button.dsh-stop")
    assert _icon_off_centre(stop) <= 1.5, "the Stop icon is not centred in its button"
    stop.click()
    stopped = cells.nth(4).locator(".dsh-run-code", has_text="Stopped by the user after")
    stopped.wait_for(timeout=60_000)
    # The live card says so first; then the cell's output is replaced by the outcome's
    # card. Once the next cell has run, that final card is the one in place.
    cells.nth(5).locator(".jp-OutputArea", has_text="next cell ran: the user True []").wait_for(
        timeout=60_000)
    assert "tick 3" in stopped.inner_text()
    assert _text(stopped.locator(".dsh-header").first).startswith("stopped Count slowly")
    output = cells.nth(4).locator(".jp-OutputArea")
    assert "Traceback" not in output.inner_text()
    assert "CancelledError" not in output.inner_text()
    assert output.locator("[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
    _save(stopped, "magic-stopped.png", docs=True)
