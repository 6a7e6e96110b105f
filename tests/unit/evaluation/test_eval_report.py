"""The table and the plot the notebook shows."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from dsh_jupyter.evaluation import (
    Evaluation,
    TaskSet,
    run_evaluation,
    summarise,
)
from dsh_jupyter.evaluation.report import (
    Table,
    results_table,
    save_matrix_plot,
    save_plot,
    summary_table,
)

pytestmark = pytest.mark.timeout(60)
HAS_PANDAS = importlib.util.find_spec("pandas") is not None


@pytest.fixture
async def evaluation(shipped: TaskSet) -> Evaluation:
    return await run_evaluation(shipped.select(["open-order-total", "ship-one-order"]),
                                runtime="in-process")


def test_table_text_and_escaped_html() -> None:
    table = Table(["task", "ok", "bytes", "s"], [["<img onerror=x>", True, 12345, 0.5],
                                                 ["b", False, 7, 1.25]])
    assert str(table).splitlines() == [
        "task             ok   bytes   s",
        "---------------  ---  ------  -----",
        "<img onerror=x>  yes  12,345  0.500",
        "b                NO   7       1.250"]
    html = table._repr_html_()
    assert "&lt;img onerror=x&gt;" in html and "<img" not in html
    assert html.count("<tr>") == 3


@pytest.mark.skipif(HAS_PANDAS, reason="pandas installed: tables are DataFrames")
def test_tables_without_pandas(evaluation: Evaluation) -> None:
    rows = results_table(evaluation.records)
    assert isinstance(rows, Table) and len(rows.rows) == 4
    assert rows.headers[:5] == ("task", "model", "mode", "repeat", "ok")
    cells = summary_table(evaluation.summary())
    assert isinstance(cells, Table)
    assert [r[:2] for r in cells.rows] == [("scripted", "native"), ("scripted", "code")]


def test_plot_is_a_png(evaluation: Evaluation, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = save_plot(evaluation.records, tmp_path / "plots" / "plot.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    partial = [r for r in evaluation.records if r.mode == "code" or r.task == "ship-one-order"]
    assert save_plot(partial, tmp_path / "partial.png").stat().st_size > 0
    renamed = [dataclasses.replace(r, mode="both") for r in evaluation.records[:1]]
    assert save_plot(renamed, tmp_path / "one.png").is_file()


def test_matrix_plot_is_a_png(evaluation: Evaluation, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = save_matrix_plot(evaluation.summary(), tmp_path / "out" / "matrix.png", title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    two_models = [dataclasses.replace(r, model="other", token_source="server")
                  for r in evaluation.records]
    again = summarise([*evaluation.records, *two_models])
    assert save_matrix_plot(again, tmp_path / "two.png").stat().st_size > 0

