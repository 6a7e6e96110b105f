"""Tables and a plot of evaluation records, for the notebook.

:func:`results_table` and :func:`summary_table` return a pandas ``DataFrame``
when pandas is installed, else a :class:`Table` that renders as HTML in a
notebook and as aligned text elsewhere. :func:`save_plot` needs matplotlib
(imported on first use, with no pyplot state: the figure is written to a PNG).
"""

from __future__ import annotations

import html
import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .results import ModeSummary, TaskRecord

RECORD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("task", "task"), ("mode", "mode"), ("success", "ok"), ("steps", "steps"),
    ("tool_calls", "tool calls"), ("sub_calls", "sub-calls"),
    ("tool_result_bytes", "result bytes"), ("request_bytes", "request bytes"),
    ("wall_seconds", "wall s"))
SUMMARY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mode", "mode"), ("succeeded", "succeeded"), ("tasks", "tasks"), ("steps", "steps"),
    ("tool_calls", "tool calls"), ("sub_calls", "sub-calls"),
    ("tool_result_bytes", "result bytes"), ("request_bytes", "request bytes"),
    ("wall_seconds", "wall s"))
PLOTTED: tuple[tuple[str, str], ...] = (
    ("steps", "model requests (steps)"), ("tool_calls", "tool calls the model made"),
    ("tool_result_bytes", "tool output returned to the model (bytes)"),
    ("request_bytes", "request bodies sent, summed (bytes)"))


class Table:
    """Rows under headers: HTML in a notebook (every cell escaped), text elsewhere."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        self.headers = tuple(headers)
        self.rows = tuple(tuple(row) for row in rows)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row)
                       + "</tr>" for row in self.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __str__(self) -> str:
        cells = [list(self.headers), *([_cell(v) for v in row] for row in self.rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.headers))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                 for row in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


def results_table(records: Sequence[TaskRecord]) -> Any:
    """One row per task and mode."""
    return _table(RECORD_COLUMNS, [_fields(r, RECORD_COLUMNS) for r in records])


def summary_table(summary: Mapping[str, ModeSummary]) -> Any:
    """One row per mode (``evaluation.summary()``)."""
    return _table(SUMMARY_COLUMNS, [_fields(s, SUMMARY_COLUMNS) for s in summary.values()])


def save_plot(records: Sequence[TaskRecord], path: str | Path, *, dpi: int = 100) -> Path:
    """Grouped bars per task and mode (steps, tool calls, bytes returned, bytes sent),
    written to ``path`` as a PNG."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise ImportError("the evaluation plot needs matplotlib: "
                          "pip install 'dsh-jupyter[eval]'") from None
    tasks = list(dict.fromkeys(r.task for r in records))
    modes = list(dict.fromkeys(r.mode for r in records))
    by_key = {(r.task, r.mode): r for r in records}
    figure = Figure(figsize=(11, 7), layout="constrained")
    axes = figure.subplots(2, 2, sharex=True)
    width = 0.8 / max(len(modes), 1)
    for ax, (name, title) in zip(axes.flat, PLOTTED, strict=True):
        for index, mode in enumerate(modes):
            values = [float(getattr(by_key[(t, mode)], name)) if (t, mode) in by_key else 0.0
                      for t in tasks]
            ax.bar([i + (index - (len(modes) - 1) / 2) * width for i in range(len(tasks))],
                   values, width, label=mode)
        ax.set_title(title, fontsize=10)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right", fontsize=8)
    axes.flat[0].legend()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=dpi, format="png")
    return target


def _fields(item: object, columns: Sequence[tuple[str, str]]) -> list[object]:
    return [getattr(item, name) for name, _ in columns]


def _table(columns: Sequence[tuple[str, str]], rows: list[list[object]]) -> Any:
    headers = [label for _, label in columns]
    try:
        pandas = importlib.import_module("pandas")  # optional; never added just for this
    except ImportError:
        return Table(headers, rows)
    return pandas.DataFrame(rows, columns=headers)


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
